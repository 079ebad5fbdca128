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


def _dist(site: Path, name: str, version: str, top: str, requires: tuple[str, ...] = ()) -> None:
    info = site / f"{name}-{version}.dist-info"
    info.mkdir()
    lines = [f"Name: {name}", f"Version: {version}", *(f"Requires-Dist: {r}" for r in requires)]
    (info / "METADATA").write_text("\n".join(["Metadata-Version: 2.1", *lines]) + "\n")
    (info / "RECORD").write_text(f"{top}/__init__.py,,\n{info.name}/METADATA,,\n")
    (site / top).mkdir()
    (site / top / "__init__.py").write_text("")


def test_tensorrt_s_split_distributions_and_a_package_without_metadata_are_linked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The TensorRT-RTX bundle on the H200: torch_tensorrt_rtx requires `tensorrt_rtx`,
    whose folder is there without a .dist-info; the libs and bindings distributions are
    required by nothing installed. Environments lacked all three: `import tensorrt_rtx`
    failed in every action with packages."""
    site = tmp_path / "site"
    site.mkdir()
    _dist(site, "torch", "2.11.0", "torch")
    _dist(site, "torch_tensorrt_rtx", "2.11.0", "torch_tensorrt", ("torch>=2.11", "tensorrt_rtx"))
    _dist(site, "tensorrt_rtx_cu13_libs", "1.4.0.76", "tensorrt_rtx_libs")
    _dist(site, "tensorrt_rtx_cu13_bindings", "1.4.0.76", "tensorrt_rtx_bindings")
    _dist(site, "unrelated", "1.0", "unrelated")
    (site / "tensorrt_rtx").mkdir()
    (site / "tensorrt_rtx/__init__.py").write_text("")
    monkeypatch.setattr(toolchain, "site_directories", lambda: (site,))
    toolchain.distributions.cache_clear()
    try:
        found = {d.name: d for d in toolchain.distributions()}
    finally:
        toolchain.distributions.cache_clear()
    assert sorted(found) == [
        "tensorrt_rtx",
        "tensorrt_rtx_cu13_bindings",
        "tensorrt_rtx_cu13_libs",
        "torch",
        "torch_tensorrt_rtx",
    ]
    assert found["tensorrt_rtx"].version == toolchain.UNLISTED
    assert found["tensorrt_rtx"].entries == (site / "tensorrt_rtx",)
    assert site / "tensorrt_rtx_libs" in found["tensorrt_rtx_cu13_libs"].entries
