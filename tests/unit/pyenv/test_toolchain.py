"""Where the toolchain's distributions are looked for (kiln.pyenv.toolchain)."""

from __future__ import annotations

import sys
import sysconfig
from pathlib import Path

import pytest
from kiln.pyenv import toolchain


def test_a_folder_a_pth_file_puts_on_sys_path_is_a_site_of_the_toolchain(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The GPU image's torch lives in another venv, named by a .pth file: an environment
    made from purelib alone lacked torch (seen on the H200)."""
    other = tmp_path / "image-venv-site"
    (other / "torch-2.11.0+cu130.dist-info").mkdir(parents=True)
    plain = tmp_path / "no-distributions"
    plain.mkdir()
    monkeypatch.setattr(sys, "path", [*sys.path, str(other), str(plain), ""])
    found = toolchain.site_directories()
    assert found[0] == Path(sysconfig.get_paths()["purelib"])
    assert other in found
    assert plain not in found
