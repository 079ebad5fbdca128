"""torch's precompiled headers: a read-only store in the sandbox, linked into each action's
own folder, written only by kiln's header maker from a request it checks (issue 20)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from kiln.actions import header_maker, header_store
from kiln.exec import run_in_execroot, sandboxing


def test_the_executor_the_sandbox_and_the_actions_name_the_same_strings() -> None:
    assert header_store.STORE_ENV == run_in_execroot.TORCH_STORE_ENV == sandboxing.TORCH_STORE_ENV
    assert run_in_execroot.SANDBOXED_TORCH_STORE == sandboxing.SANDBOXED_TORCH_STORE
    assert header_store.REQUESTS_ENV == run_in_execroot.PCH_REQUESTS_ENV
    assert header_maker.PUBLISH_ENV == sandboxing.TORCH_PUBLISH_ENV


def test_the_sandbox_binds_the_windows_libraries_where_the_action_unpacks_them() -> None:
    from kiln.actions.windows import torch_libs

    assert torch_libs.WINDOWS_TORCH == sandboxing.WINDOWS_TORCH


def test_an_action_links_each_published_header_and_nothing_half_published(
    tmp_path: Path,
) -> None:
    store, own = tmp_path / "store", tmp_path / "own"
    store.mkdir()
    for name in ("a.h", "a.h.gch", "b.h.gch", ".a.h.123"):  # b: its .h not yet renamed
        (store / name).write_text(name)
    header_store.link_store(store, own)
    assert sorted(p.name for p in own.iterdir()) == ["a.h", "a.h.gch"]
    assert (own / "a.h.gch").readlink() == store / "a.h.gch"
    header_store.link_store(store, own)  # a worker's next action: nothing to redo
    header_store.link_store(tmp_path / "none", tmp_path / "own2")  # nothing published yet
    assert list((tmp_path / "own2").iterdir()) == []


REQUEST: dict[str, Any] = {
    "header": "torch/csrc/inductor/aoti_include/cpu.h",
    "name": "cu2fmcqytzpell3emwbbwcwlrznrg5xxoqcnkt3swj5pznegja2l.h",
    "settings": {"aot_mode": True, "device_type": "cpu", "min_optimize": True},
    "vec_isa": "avx2",
    "environment": {"TORCHINDUCTOR_CPP_MARCH": "x86-64-v3", "ATEN_CPU_CAPABILITY": "avx2"},
    "configs": {"aot_inductor.compile_wrapper_opt_level": "O0", "cpp.march": None},
}


def test_the_maker_takes_a_request_of_inductor_s_own_settings() -> None:
    assert header_maker.valid(json.loads(json.dumps(REQUEST)))


@pytest.mark.parametrize(
    "change",
    [
        {"header": "/etc/passwd"},
        {"header": "torch/csrc/inductor/../../../x.h"},
        {"name": "../x.h"},
        {"settings": {"extra_flags": "-fplugin=/tmp/evil.so"}},
        {"settings": {"device_type": "cpu -fplugin=x"}},
        {"vec_isa": "avx2 -fplugin=x"},
        {"environment": {"CXX": "/tmp/evil"}},
        {"environment": {"TORCHINDUCTOR_CPP_MARCH": "native -fplugin=x"}},
        {"configs": {"cpp.cxx": "/tmp/evil"}},
        {"configs": {"aot_inductor.compile_wrapper_opt_level": "O1 -fplugin=x"}},
        {"configs": {"aot_inductor.enable_lto": "yes"}},
        {"more": 1},
    ],
)
def test_the_maker_refuses_a_request_naming_a_path_a_program_or_a_flag(
    change: dict[str, Any],
) -> None:
    assert not header_maker.valid({**REQUEST, **change})
