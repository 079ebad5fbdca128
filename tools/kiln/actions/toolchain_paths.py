"""The toolchain as inductor names it: torch's and Python's folders at paths every machine shares.

Inductor passes torch's include and library folders (`torch.utils.cpp_extension.
include_paths()`, inside the site-packages of whichever environment runs it) and
Python's (`sysconfig`) to g++ by absolute path. Those paths end up in the
sources it writes into a package (the compile command is a comment there), in
the names of its files (hashes of those sources) and in the debug info of the
shared library. So a package built from /work/a/.venv and one built from
/ci/b/.venv differed byte for byte, although their keys are equal by design
(portable keys, issue 11 C1): a cache hit from another checkout then served
bytes that a build here would not make (tests/e2e/bazel/test_bazel_conformance.py
failed so, with kiln hitting the disk cache that another checkout filled).

`pin(shared)` makes links in the shared temp directory (temp_state.shared_dir(),
the same path on every machine), named by what they hold, not where:

    <shared>/toolchain/torch-<version>-<git revision>   -> this environment's torch/
    <shared>/toolchain/python-<version>-include         -> Python's include folder
    <shared>/toolchain/python-<version>-lib             -> Python's LIBDIR

and has inductor name the links instead of the real folders. Two environments
holding the same torch build point the same link at equal files, so one
re-pointing it under another's running compile changes nothing that compile
reads. A link is replaced atomically (rename over it), never followed when
checked.
"""

from __future__ import annotations

import os
import sys
import sysconfig
from collections.abc import Iterable
from pathlib import Path
from typing import Any


def pin(shared: Path) -> None:
    """Have inductor name torch and Python through links under `shared` (see above)."""
    import torch
    from torch._inductor import cpp_builder
    from torch.utils import cpp_extension

    folder = shared / "toolchain"
    folder.mkdir(mode=0o700, exist_ok=True)
    python = ".".join(str(part) for part in sys.version_info[:3])
    revision = (getattr(torch.version, "git_version", None) or "unknown")[:12]
    links: dict[str, str] = {}

    def through_link(real: str, name: str) -> None:
        if real and os.path.isdir(real):
            links[os.path.realpath(real)] = str(_link(folder / name, os.path.realpath(real)))

    torch_folder = os.path.dirname(torch.__file__)
    through_link(torch_folder, f"torch-{torch.__version__}-{revision}")
    through_link(sysconfig.get_path("include"), f"python-{python}-include")
    through_link(sysconfig.get_config_var("LIBDIR") or "", f"python-{python}-lib")

    def mapped(paths: Iterable[str]) -> list[str]:
        return [_through(path, links) for path in paths]

    # The first call keeps the real functions; a second (a worker's next action) wraps those.
    real = _REAL.setdefault(
        "functions",
        (
            cpp_extension.include_paths,
            cpp_extension.library_paths,
            cpp_builder._get_python_related_args,
        ),
    )
    include_paths, library_paths, python_args = real

    def python_related() -> tuple[list[str], list[str]]:
        include_dirs, library_dirs = python_args()
        return mapped(include_dirs), mapped(library_dirs)

    # cpp_builder imports these from cpp_extension when it calls them: patched there.
    cpp_extension.include_paths = lambda *a, **k: mapped(include_paths(*a, **k))
    cpp_extension.library_paths = lambda *a, **k: mapped(library_paths(*a, **k))
    cpp_extension.TORCH_LIB_PATH = _through(
        _REAL.setdefault("lib", cpp_extension.TORCH_LIB_PATH), links
    )
    cpp_builder._get_python_related_args = python_related
    if hasattr(cpp_builder, "_TORCH_PATH"):  # the headers' folder of a C++-only package
        cpp_builder._TORCH_PATH = _through(torch_folder, links)


# What pin() replaced, as torch defined it.
_REAL: dict[str, Any] = {}


def _through(path: str, links: dict[str, str]) -> str:
    """`path` with a linked folder it lies in replaced by its link."""
    real = os.path.realpath(path) if path else path
    for target, link in links.items():
        if real == target or real.startswith(target + os.sep):
            return link + real[len(target) :]
    return path


def _link(link: Path, target: str) -> Path:
    """`link` pointing at `target`, made or re-pointed atomically."""
    try:
        if os.readlink(link) == target:
            return link
    except OSError:
        pass
    temporary = link.with_name(f".{link.name}.{os.getpid()}")
    temporary.unlink(missing_ok=True)
    temporary.symlink_to(target)
    os.replace(temporary, link)
    return link
