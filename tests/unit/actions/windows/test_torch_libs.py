"""The Windows torch libraries: kiln unpacks them before a sandboxed action that names them,
into a folder the sandbox shows read-only, so no action can change what a later one links
(issue 20); the action only looks them up. Unsandboxed, the action unpacks them itself.

A small zip stands in for PyPI's 122 MB wheel (named and hashed as the spec names it);
tests/e2e/test_windows_package.py links and runs against the real one."""

from __future__ import annotations

import hashlib
import zipfile
from pathlib import Path

import pytest
from kiln import windows_torch_libs
from kiln.action_graph import Action, File
from kiln.actions.errors import ActionError
from kiln.actions.windows import torch_libs
from kiln.errors import KilnError
from kiln.exec.sandboxing import Sandboxing
from kiln.layout import DiskCache
from kiln.windows_specs import WindowsTorch

from tests.fake_sandboxing import sandboxing_with

WHEEL = "torch-2.13.0-cp311-cp311-win_amd64.whl"


def _wheel(folder: Path) -> WindowsTorch:
    folder.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(folder / WHEEL, "w") as archive:
        archive.writestr("torch/lib/torch_cpu.dll", b"MZ the library")
        archive.writestr("torch/__init__.py", b"")
    sha256 = hashlib.sha256((folder / WHEEL).read_bytes()).hexdigest()
    return WindowsTorch(version="2.13.0", wheel=WHEEL, sha256=sha256)


def _compile(torch: WindowsTorch | None, wheelhouse: Path) -> Action:
    return Action(
        owner="//m:pt2_win",
        mnemonic="AotiCompile",
        argv=("python", "-m", "kiln.actions.windows.aoti_compile", "spec.json"),
        inputs=(File("spec.json"),),
        outputs=(File("kiln-out/m/pt2_win.program.pt2"),),
        env=((windows_torch_libs.WHEELHOUSE_ENV, str(wheelhouse)),),
        windows_torch=torch,
    )


class _Sandbox:
    def close(self) -> None:
        pass


def _sandboxing(tmp_path: Path, sandboxed: bool) -> Sandboxing:
    return sandboxing_with(tmp_path, _Sandbox() if sandboxed else None)


def test_kiln_unpacks_the_libraries_an_action_names_before_it_runs(tmp_path: Path) -> None:
    torch = _wheel(tmp_path / "wheels")
    sandboxing = _sandboxing(tmp_path, sandboxed=True)
    env = sandboxing.windows_torch(_compile(torch, tmp_path / "wheels"))
    assert env == {windows_torch_libs.PREPARED_ENV: "1"}
    lib = DiskCache(tmp_path / "cache").torch_tmp / "windows-libs" / torch.sha256 / "torch/lib"
    assert (lib / "torch_cpu.dll").read_bytes() == b"MZ the library"
    # once: a second action finds them there (the wheelhouse may be gone by then)
    (tmp_path / "wheels" / WHEEL).unlink()
    assert sandboxing.windows_torch(_compile(torch, tmp_path / "wheels")) == env


def test_an_action_naming_none_or_an_unsandboxed_build_gets_nothing(tmp_path: Path) -> None:
    torch = _wheel(tmp_path / "wheels")
    assert _sandboxing(tmp_path, sandboxed=True).windows_torch(_compile(None, tmp_path)) == {}
    unsandboxed = _sandboxing(tmp_path, sandboxed=False)
    assert unsandboxed.windows_torch(_compile(torch, tmp_path / "wheels")) == {}
    assert not (DiskCache(tmp_path / "cache").torch_tmp / "windows-libs").exists()


def test_a_wheel_kiln_cannot_have_fails_the_action_saying_what_to_do(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    torch = _wheel(tmp_path / "wheels")
    (tmp_path / "wheels" / WHEEL).write_bytes(b"not the wheel the spec hashes")
    monkeypatch.setattr(windows_torch_libs, "_pip_python", lambda: "false")  # pip cannot fetch it
    with pytest.raises(KilnError) as raised:
        _sandboxing(tmp_path, sandboxed=True).windows_torch(_compile(torch, tmp_path / "wheels"))
    assert "cannot fetch the Windows torch libraries, torch==2.13.0" in raised.value.message
    assert raised.value.hint is not None and windows_torch_libs.WHEELHOUSE_ENV in raised.value.hint
    libs = DiskCache(tmp_path / "cache").torch_tmp / "windows-libs"
    assert not (libs / torch.sha256).exists()  # nothing half-unpacked


def test_a_sandboxed_action_only_looks_the_libraries_up(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    torch = _wheel(tmp_path / "wheels")
    monkeypatch.setenv("KILN_TORCH_TMP", str(tmp_path / "torch"))
    monkeypatch.setenv(windows_torch_libs.WHEELHOUSE_ENV, str(tmp_path / "wheels"))
    monkeypatch.setenv(windows_torch_libs.PREPARED_ENV, "1")
    with pytest.raises(ActionError, match="kiln unpacks them before the action runs"):
        torch_libs.lib_dir(torch)
    assert not (tmp_path / "torch").exists()  # it unpacked nothing itself
    monkeypatch.delenv(windows_torch_libs.PREPARED_ENV)  # --nosandbox, or Bazel: it unpacks them
    lib = torch_libs.lib_dir(torch)
    assert lib == tmp_path / "torch" / "windows-torch" / torch.sha256 / "torch" / "lib"
    assert (lib / "torch_cpu.dll").exists()


def test_a_library_the_disk_cache_collected_is_unpacked_again(tmp_path: Path) -> None:
    torch = _wheel(tmp_path / "wheels")
    sandboxing = _sandboxing(tmp_path, sandboxed=True)
    sandboxing.windows_torch(_compile(torch, tmp_path / "wheels"))
    lib = DiskCache(tmp_path / "cache").torch_tmp / "windows-libs" / torch.sha256 / "torch/lib"
    (lib / "torch_cpu.dll").unlink()  # the GC goes file by file, least recently used first
    sandboxing.windows_torch(_compile(torch, tmp_path / "wheels"))
    assert (lib / "torch_cpu.dll").read_bytes() == b"MZ the library"
    # nothing left of the damaged folder nor of the unpacking (the wheel came from the
    # wheelhouse: none in the cache)
    assert sorted(p.name for p in lib.parents[2].iterdir()) == [
        torch.sha256,
        f"{torch.sha256}.lock",
    ]
