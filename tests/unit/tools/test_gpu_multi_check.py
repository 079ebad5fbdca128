"""The pure logic of tools/gpu_multi_check.py (issue 27), on synthetic build events.

The script itself runs on a host of several GPUs; here: events -> per-action GPU
intervals, the overlap check, GPUs named and seen, the speed-up arithmetic, key and
.pt2 comparison, on events shaped as kiln's BuildEventWriter writes them.
"""

from __future__ import annotations

import importlib.util
import json
import sys
import zipfile
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[3]


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "gpu_multi_check", REPO / "tools" / "gpu_multi_check.py"
    )
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules["gpu_multi_check"] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


m = _load()
A, B = "GPU-aaaa-1111", "GPU-bbbb-2222"


def started(t: int, label: str, mnemonic: str) -> dict[str, Any]:
    return {"type": "action_started", "time_ms": t, "label": label, "mnemonic": mnemonic}


def finished(
    t: int,
    label: str,
    mnemonic: str,
    gpus: list[str],
    seconds: float,
    status: str = "executed",
    key: str = "k",
    outputs: tuple[str, ...] = ("out",),
) -> dict[str, Any]:
    return {
        "type": "action_finished", "time_ms": t, "label": label, "mnemonic": mnemonic,
        "gpus": gpus, "seconds": seconds, "status": status, "key": key,
        "outputs": list(outputs), "strategy": "worker",
    }  # fmt: skip


def two_gpu_build() -> list[dict[str, Any]]:
    """mlp on A while resnet runs on B, then resnet's second action on A: no overlap."""
    return [
        {"type": "build_started", "time_ms": 0},
        started(0, "//models:w", "FileWrite"),
        finished(5, "//models:w", "FileWrite", [], 0.004, outputs=("a.json",)),
        started(10, "//models:mlp_trt", "TorchExport"),
        started(12, "//models:resnet_trt", "TorchExport"),
        finished(4010, "//models:mlp_trt", "TorchExport", [A], 3.99),
        started(4010, "//models:mlp_trt", "TrtCompile"),  # the same ms as A came free
        finished(9012, "//models:resnet_trt", "TorchExport", [B], 8.99),
        finished(10010, "//models:mlp_trt", "TrtCompile", [A], 5.99),
        started(10011, "//models:resnet_trt", "TrtCompile"),
        finished(20011, "//models:resnet_trt", "TrtCompile", [A], 9.99),
        finished(20012, "//models:mlp_trt", "TrtLoader", [], 0.5),  # no started event
        {"type": "build_finished", "time_ms": 20100},
    ]


def test_intervals_pair_started_and_finished_events_and_keep_the_gpus() -> None:
    intervals = m.action_intervals(two_gpu_build())
    by = {(i.label, i.mnemonic): i for i in intervals}
    assert len(intervals) == 6
    export = by["//models:resnet_trt", "TorchExport"]
    assert (export.start_ms, export.end_ms, export.gpus) == (12, 9012, (B,))
    compile_ = by["//models:mlp_trt", "TrtCompile"]
    assert (compile_.start_ms, compile_.end_ms) == (4010, 10010)
    loader = by["//models:mlp_trt", "TrtLoader"]  # start from seconds where none was sent
    assert (loader.start_ms, loader.end_ms, loader.gpus) == (19512, 20012, ())


def test_two_started_events_of_one_action_name_pair_first_in_first_out() -> None:
    events = [
        started(0, "//p:t", "FileWrite"),
        started(1, "//p:t", "FileWrite"),
        finished(3, "//p:t", "FileWrite", [], 0.001, outputs=("a",)),
        finished(9, "//p:t", "FileWrite", [], 0.001, outputs=("b",)),
    ]
    spans = [(i.start_ms, i.end_ms, i.outputs) for i in m.action_intervals(events)]
    assert spans == [(0, 3, ("a",)), (1, 9, ("b",))]


def test_a_build_that_gave_each_running_action_its_own_gpu_has_no_overlap() -> None:
    intervals = m.action_intervals(two_gpu_build())
    assert m.overlaps(intervals) == []
    assert m.gpus_named(intervals) == {A, B}


def test_two_actions_running_at_once_on_one_gpu_are_reported() -> None:
    events = two_gpu_build()
    events.append(started(15000, "//models:bad", "TrtCompile"))
    events.append(finished(16000, "//models:bad", "TrtCompile", [A, B], 1.0))
    found = m.overlaps(m.action_intervals(events))
    assert len(found) == 1
    assert "TrtCompile //models:resnet_trt" in found[0] and "//models:bad" in found[0]
    assert found[0].endswith(f"both on {A}")


def test_cached_actions_and_cpu_actions_hold_no_gpu() -> None:
    events = [
        started(0, "//a:x", "TorchExport"),
        finished(100, "//a:x", "TorchExport", [A], 0.1, status="cached"),
        started(0, "//a:y", "FileWrite"),
        finished(100, "//a:y", "FileWrite", [], 0.1),
        started(50, "//a:z", "TrtCompile"),
        finished(150, "//a:z", "TrtCompile", [A], 0.1),
    ]
    intervals = m.action_intervals(events)
    assert m.overlaps(intervals) == []
    assert [i.label for i in m.gpu_actions(intervals)] == ["//a:z"]


def test_explain_lines_must_name_the_gpus_of_the_events() -> None:
    intervals = m.action_intervals(two_gpu_build())
    log = "\n".join(
        f"EXPLAIN: {i.mnemonic} {i.label}: new action: never built; ran on GPU {','.join(i.gpus)}"
        for i in m.gpu_actions(intervals)
    )
    assert m.explain_mismatches(intervals, log) == []
    wrong = log.replace(
        f"TrtCompile //models:resnet_trt: new action: never built; ran on GPU {A}",
        f"TrtCompile //models:resnet_trt: new action: never built; ran on GPU {B}",
    )
    assert m.explain_mismatches(intervals, wrong) == [
        f"TrtCompile //models:resnet_trt (events: {A})"
    ]


def test_union_of_spans_counts_overlapping_time_once() -> None:
    assert m.union_seconds([]) == 0
    assert m.union_seconds([(0, 1000), (500, 1500), (3000, 4000), (3100, 3200)]) == 2.5


def test_gpu_part_sums_chains_and_the_best_speedup() -> None:
    part = m.gpu_part(m.action_intervals(two_gpu_build()))
    # 10 to 10010 ms (mlp; resnet export inside it), then 10011 to 20011 ms
    assert part["gpu_busy_s"] == pytest.approx(20.0)
    assert part["gpu_sum_s"] == pytest.approx(3.99 + 8.99 + 5.99 + 9.99)
    assert part["cpu_sum_s"] == pytest.approx(0.504)
    assert part["gpu_chains_s"] == {"//models:mlp_trt": 9.98, "//models:resnet_trt": 18.98}
    # sum 28.96 over max(28.96 / 2, 18.98): the longest target bounds it
    best = m.best_speedup(part["gpu_sum_s"], part["gpu_chains_s"], 2)
    assert best == pytest.approx(28.96 / 18.98, abs=1e-3)
    assert m.best_speedup(8.0, {"a": 2.0, "b": 2.0, "c": 2.0, "d": 2.0}, 4) == 4.0
    assert m.best_speedup(8.0, {"a": 2.0, "b": 6.0}, 1) == 1.0
    assert m.best_speedup(0.0, {}, 2) == 0.0


def test_speedup_is_the_ratio_of_medians_and_the_goal_is_seven_tenths_of_n() -> None:
    assert m.speedup([100.0, 90.0, 300.0], [50.0, 40.0, 60.0]) == 2.0
    assert m.speedup([], [1.0]) is None
    assert m.speedup([1.0], [0.0]) is None
    assert m.goal_met(1.4, 2) and not m.goal_met(1.39, 2)
    assert m.goal_met(2.8, 4) and not m.goal_met(None, 2)


def test_build_order_alternates_one_and_n() -> None:
    assert m.build_order(3, 4) == [1, 4, 1, 4, 1, 4]


def test_keys_compare_by_action_and_outputs() -> None:
    first = m.action_keys(m.action_intervals(two_gpu_build()))
    assert m.compare_keys(first, dict(first)) == []
    changed = dict(first)
    name = "TrtCompile //models:mlp_trt -> out"
    changed[name] = "other"
    del changed["FileWrite //models:w -> a.json"]
    assert m.compare_keys(first, changed) == [
        "FileWrite //models:w -> a.json: only in the first",
        f"{name}: k != other",
    ]


def test_keys_of_reads_the_actions_as_results_json_holds_them() -> None:
    import dataclasses

    intervals = m.action_intervals(two_gpu_build())
    stored = json.loads(json.dumps([dataclasses.asdict(i) for i in intervals]))
    assert m.keys_of(stored) == m.action_keys(intervals)


def test_compute_apps_lines_parse_and_others_are_skipped() -> None:
    text = f"1234, {A}\n 99 ,{B}\nNo running processes found\n[N/A], {A}\n"
    assert m.parse_compute_apps(text) == [(1234, A), (99, B)]


def test_visible_uuids_reads_indices_uuids_and_prefixes() -> None:
    listed = [A, B]
    assert m.visible_uuids(None, listed) is None
    assert m.visible_uuids("", listed) == set()
    assert m.visible_uuids("1", listed) == {B}
    assert m.visible_uuids("GPU-aaaa", listed) == {A}
    assert m.visible_uuids(f"{B},0", listed) == {A, B}


def test_samples_are_matched_to_the_action_holding_the_gpu_and_strays_found() -> None:
    intervals = m.action_intervals(two_gpu_build())
    samples = [
        {"t_ms": 1000, "pid": 10, "gpu": A, "visible": A, "cmd": "worker"},
        {"t_ms": 1000, "pid": 11, "gpu": B, "visible": B, "cmd": "worker"},
        {"t_ms": 15000, "pid": 10, "gpu": A, "visible": A, "cmd": "worker"},
        {"t_ms": 15000, "pid": 11, "gpu": B, "visible": B, "cmd": "worker"},  # B idle
        {"t_ms": 15000, "pid": 12, "gpu": B, "visible": A, "cmd": "rogue"},
        {"t_ms": 15000, "pid": 13, "gpu": A, "cmd": "unreadable /proc"},
    ]
    seen = m.attribute_samples(samples, intervals, [A, B])
    assert seen["gpus_seen"] == [A, B]
    assert seen["samples_per_action"] == {
        "TorchExport //models:mlp_trt": 1,
        "TorchExport //models:resnet_trt": 1,
        "TrtCompile //models:resnet_trt": 2,
    }
    assert seen["samples_no_action_held"] == 2
    assert seen["pids"]["10"] == [A]
    assert seen["strays"] == [f"pid 12 (rogue) on {B}, given {A!r}"]


def test_a_workers_fork_passes_only_where_an_action_held_its_gpu() -> None:
    """An action forked from a worker gets its CUDA_VISIBLE_DEVICES after the fork; /proc
    shows the worker's (empty): the events say whether its GPU was held then."""
    intervals = m.action_intervals(two_gpu_build())
    fork = f"python -m {m.WORKER} --request-fd 3"
    samples = [
        {"t_ms": 1000, "pid": 20, "gpu": A, "visible": "", "cmd": fork},  # held
        {"t_ms": 15000, "pid": 21, "gpu": B, "visible": "", "cmd": fork},  # B idle
    ]
    seen = m.attribute_samples(samples, intervals, [A, B])
    assert seen["strays"] == [f"pid 21 (a worker's fork) on {B}, held by no action"]


def test_zip_differences_names_the_members_that_differ(tmp_path: Path) -> None:
    def write(name: str, members: dict[str, bytes]) -> Path:
        path = tmp_path / name
        with zipfile.ZipFile(path, "w") as z:
            for member, data in members.items():
                z.writestr(member, data)
        return path

    a = write("a.pt2", {"m/data/constants": b"1", "m/wrapper.so": b"x", "m/only_a": b""})
    b = write("b.pt2", {"m/data/constants": b"1", "m/wrapper.so": b"y"})
    assert m.zip_differences(a, b) == ["m/only_a", "m/wrapper.so"]


def test_file_digests_walk_the_output_tree(tmp_path: Path) -> None:
    (tmp_path / "models" / "x.engines").mkdir(parents=True)
    (tmp_path / "models" / "x.engines" / "x.engine").write_bytes(b"e")
    (tmp_path / "models" / "x.pt2").write_bytes(b"p")
    assert sorted(m.file_digests(tmp_path)) == ["models/x.engines/x.engine", "models/x.pt2"]


def test_the_added_targets_are_the_ones_each_set_names() -> None:
    for name, (extra, trt, aoti, other) in m.SETS.items():
        for target in (*trt, *aoti, *other):
            assert f'name = "{target}"' in extra
        if name != "mlp_cuda":  # "mlp"'s CUDA half, a one-call check; the run needs four
            assert len(trt) + len(aoti) + len(other) >= 4


def test_compare_outputs_checks_keys_and_pt2_bytes_of_the_builds_that_succeeded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import dataclasses

    monkeypatch.setattr(m, "STATE", tmp_path / "state")
    monkeypatch.setattr(m, "OUT", tmp_path / "out")
    monkeypatch.setattr(m, "failures", [])
    (tmp_path / "out").mkdir()
    actions = [dataclasses.asdict(i) for i in m.action_intervals(two_gpu_build())]

    def build(name: str, exit_code: int, members: dict[str, bytes]) -> dict[str, Any]:
        folder = tmp_path / "state" / name / "ws" / "kiln-out" / "models"
        folder.mkdir(parents=True)
        for target in ("same", "other"):
            with zipfile.ZipFile(folder / f"{target}.pt2", "w") as z:
                for member, data in members.items():
                    z.writestr(member, data if target == "other" else b"fixed")
        (folder / "e.engines").mkdir()
        (folder / "e.engines" / "e.engine").write_bytes(name.encode())
        return {"name": name, "gpus": 1, "exit": exit_code, "actions": actions}

    checked = [
        build("b0", 0, {"a/wrapper.so": b"1", "a/data": b"d"}),
        build("b1", 1, {}),  # failed: left out
        build("b2", 0, {"a/wrapper.so": b"2", "a/data": b"d"}),
    ]
    result = m.compare_outputs(checked, (), ("same", "other"))
    lines = (tmp_path / "out" / "summary.txt").read_text().splitlines()
    assert lines[0] == "INFO  left out of the comparisons (failed): b1"
    assert lines[1] == "PASS  action keys equal in all 2 builds (6 actions)"
    assert lines[2] == "PASS  models/same.pt2 equal byte for byte in every build"
    assert lines[3] == (
        "FAIL  models/other.pt2 equal byte for byte in every build: differs in b2; "
        "members: a/wrapper.so"
    )
    assert result["differing_files"] == ["models/e.engines/e.engine", "models/other.pt2"]
    assert m.failures == ["models/other.pt2 equal byte for byte in every build"]
