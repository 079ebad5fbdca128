"""torch's precompiled headers: a read-only store in the sandbox, linked into each action's
own folder, written only by kiln's header maker from a request it checks (issue 20)."""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass
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


def test_an_action_links_each_published_header_and_nothing_half_published(
    tmp_path: Path,
) -> None:
    store, own = tmp_path / "store", tmp_path / "own"
    store.mkdir()
    # b: its .h not yet renamed; c: the disk cache's GC took its compiled form
    for name in ("a.h", "a.h.gch", "b.h.gch", ".a.h.123", "c.h"):
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


class _Builder:
    """inductor's CppBuilder as _worker_compile_cpp sees it: a target, built if missing."""

    def __init__(self, target: Path) -> None:
        self.target = target

    def get_target_file_path(self) -> str:
        return str(self.target)


@dataclass(frozen=True)
class _Asking:
    """A sandboxed action's view: the store, its own header folder, kiln's answers."""

    store: Path
    own: Path
    replies: Path
    requests: Path
    compiled: list[str]  # the headers the action made itself
    codecache: Any


def _asking_action(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> _Asking:
    """torch's codecache with a _precompile_header that names <own>/<NAME> and compiles it
    through _worker_compile_cpp, as torch's does, patched by ask_for_misses."""
    from torch._inductor import codecache

    action = _Asking(
        tmp_path / "store", tmp_path / "own", tmp_path / "replies", tmp_path / "req", [], codecache
    )
    for folder in (action.store, action.own, action.replies):
        folder.mkdir()

    def worker_compile(lock_path: str, builders: Any) -> None:
        for builder in builders:
            if not Path(builder.get_target_file_path()).exists():
                action.compiled.append(builder.get_target_file_path())
                Path(builder.get_target_file_path()).write_text("the action's own")

    def precompile(header: str, cmd: str, **compile_command: Any) -> str:
        path = action.own / REQUEST["name"]
        path.write_text(f"#include <{header}>\n")
        codecache._worker_compile_cpp("lock", (_Builder(Path(f"{path}.gch")),))
        return str(path)

    monkeypatch.setattr(header_store, "_REAL", {})
    monkeypatch.setattr(codecache, "_precompile_header", precompile)
    monkeypatch.setattr(codecache, "_worker_compile_cpp", worker_compile)
    header_store.ask_for_misses(str(action.requests), str(action.replies), action.store)
    return action


@pytest.mark.torch
def test_a_missing_header_is_asked_for_and_the_published_one_linked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    action = _asking_action(tmp_path, monkeypatch)
    requests, store, replies = action.requests, action.store, action.replies

    def kiln() -> None:  # the maker publishes it, then kiln answers
        deadline = time.monotonic() + 30
        while not (requests.exists() and requests.read_text().endswith("\n")):
            assert time.monotonic() < deadline
            time.sleep(0.01)
        asked = json.loads(requests.read_text())
        (store / f"{asked['name']}.gch").write_text("the maker's")
        (store / asked["name"]).write_text("#include <...>\n")
        (replies / asked["name"]).touch()

    answering = threading.Thread(target=kiln)
    answering.start()
    path = action.codecache._precompile_header(REQUEST["header"], "g++ ...", aot_mode=True)
    answering.join(30)
    assert action.compiled == []  # the action did not make it
    assert Path(f"{path}.gch").read_text() == "the maker's"
    assert Path(f"{path}.gch").is_symlink()
    asked = json.loads(requests.read_text())
    assert (asked["header"], asked["name"]) == (REQUEST["header"], REQUEST["name"])
    assert asked["settings"] == {"aot_mode": True}


@pytest.mark.torch
def test_where_nothing_is_published_the_action_makes_its_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    action = _asking_action(tmp_path, monkeypatch)
    (action.replies / REQUEST["name"]).touch()  # kiln answered: the maker made nothing
    path = action.codecache._precompile_header(REQUEST["header"], "g++ ...", aot_mode=True)
    assert action.compiled == [f"{path}.gch"]
    assert Path(f"{path}.gch").read_text() == "the action's own"
    # and asks no more once it has the header
    action.codecache._precompile_header(REQUEST["header"], "g++ ...", aot_mode=True)
    assert len(action.requests.read_text().splitlines()) == 1


@pytest.mark.torch
def test_the_maker_also_makes_the_header_a_cpu_compile_asks_for_next() -> None:
    also = header_maker.companion(REQUEST)
    assert also is not None
    assert also["header"] == "torch/csrc/inductor/cpp_prefix.h"
    assert also["settings"] == {"aot_mode": True, "device_type": "cpu"}  # no min_optimize
    assert also["name"] is None  # published under the name it comes out as
    assert (also["vec_isa"], also["environment"]) == (REQUEST["vec_isa"], REQUEST["environment"])
    assert header_maker.companion(also) is None
    cuda = {**REQUEST, "settings": {**REQUEST["settings"], "device_type": "cuda"}}
    assert header_maker.companion(cuda) is None
