"""A build's Sandboxing whose sandbox is a stand-in, for tests of what kiln does around
its sandbox (the header maker's queue, the Windows torch libraries) without starting one.

    sandboxing = sandboxing_with(tmp_path, sandbox)   # sandbox: has run() and close(),
                                                      # or None: the build is unsandboxed
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kiln.exec.sandboxing import Sandboxing
from kiln.layout import DiskCache, OutputBase


def sandboxing_with(tmp_path: Path, sandbox: Any) -> Sandboxing:
    """Sandboxing of a workspace and disk cache under `tmp_path`, decided: `sandbox`."""
    sandboxing = Sandboxing(
        sandbox is not None,
        "python",
        tmp_path,
        (),
        OutputBase(tmp_path / "base"),
        DiskCache(tmp_path / "cache"),
        lambda message: None,
    )
    sandboxing._decided, sandboxing._sandbox = True, sandbox
    return sandboxing
