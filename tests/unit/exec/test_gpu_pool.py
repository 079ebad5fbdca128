"""The GPU ids a build hands out: which GPUs exist, which a build may use, who holds which."""

from __future__ import annotations

from pathlib import Path

import pytest
from kiln.exec import host
from kiln.exec.gpu_pool import GpuPool, cuda_env
from kiln.exec.host import HostGpu

from tests.fake_gpus import NAME, install_fake_smi, uuid

LISTED = tuple(HostGpu(str(i), NAME, uuid(i)) for i in range(4))


def test_take_gives_the_first_free_ids_and_give_back_keeps_the_pools_order() -> None:
    pool = GpuPool(("a", "b", "c", "d"))
    assert (pool.take(1), pool.take(2), pool.free) == (("a",), ("b", "c"), 1)
    pool.give_back(("b",))
    assert pool.take(2) == ("b", "d")
    assert pool.take(1) == ()  # none free: an oversized action alone gets what is there
    pool.give_back(("d", "b"))
    pool.give_back(("a",))
    assert (pool.free, pool.take(4)) == (3, ("a", "b", "d"))


def test_a_gpu_action_sees_exactly_its_ids_and_a_cpu_action_none() -> None:
    assert cuda_env(2, ("GPU-a", "GPU-b")) == {"CUDA_VISIBLE_DEVICES": "GPU-a,GPU-b"}
    assert cuda_env(0, ()) == {"CUDA_VISIBLE_DEVICES": ""}
    assert cuda_env(0, ("GPU-a",)) == {"CUDA_VISIBLE_DEVICES": ""}
    assert cuda_env(1, ()) == {}  # not assigned here: what the machine shows


def test_nvidia_smi_lists_index_name_and_uuid(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", f"{install_fake_smi(tmp_path / 'bin', 4)}:/usr/bin:/bin")
    assert host.host_gpus() == LISTED
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert host.usable_gpus() == tuple(uuid(i) for i in range(4))
    assert host.gpu_count() == 4


def test_without_nvidia_smi_there_is_no_gpu(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert (host.host_gpus(), host.gpu_count()) == ((), 0)


@pytest.mark.parametrize(
    ("visible", "ids"),
    [
        (None, tuple(uuid(i) for i in range(4))),
        # indices as nvidia-smi numbers GPUs, kept in the parent's order, never renumbered
        ("2,0", (uuid(2), uuid(0))),
        # UUIDs and unique prefixes of them, with or without GPU-
        (f"{uuid(3)},{uuid(1)[:12]}", (uuid(3), uuid(1))),
        (uuid(2)[4:14], (uuid(2),)),
        # CUDA stops at the first entry it cannot use; -1 or nothing hides every GPU
        ("1,-1,2", (uuid(1),)),
        ("-1", ()),
        ("", ()),
        # one nvidia-smi does not list (a MIG instance) is passed on as written
        ("MIG-1234", ("MIG-1234",)),
        ("1,1", (uuid(1),)),
    ],
)
def test_cuda_visible_devices_of_kiln_itself_limits_and_orders_the_ids(
    visible: str | None, ids: tuple[str, ...]
) -> None:
    assert host.usable_gpu_ids(LISTED, visible) == ids


def test_without_nvidia_smi_the_parents_entries_are_the_ids() -> None:
    assert host.usable_gpu_ids((), "3,1") == ("3", "1")
    assert host.usable_gpu_ids((), None) == ()


def test_a_build_uses_the_first_gpus_slots_and_indices_past_what_was_detected() -> None:
    usable = (uuid(2), uuid(0))
    assert host.gpu_pool_ids(usable, 1) == (uuid(2),)
    assert host.gpu_pool_ids(usable, 0) == ()
    assert host.gpu_pool_ids((), 2) == ("0", "1")  # --gpus=2 where detection found none
