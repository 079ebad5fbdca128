"""The Windows torch libraries a cross compile links against and Wine runs with, as the
action finds them (kiln.windows_torch_libs fetches and unpacks them):

    kiln's sandbox   kiln unpacked them before the action ran, into a folder the sandbox
                     shows it read-only at its torch folder's windows-torch: no action can
                     change what a later one links (issue 20). The action only looks them
                     up, and one that finds none is an error.
    otherwise        the action unpacks them itself into its torch folder's windows-torch
                     (--nosandbox, or Bazel: there at /tmp/kiln-torch-tmp, so packages
                     name the same path as kiln's).
"""

from __future__ import annotations

import os
from pathlib import Path

from kiln.actions.errors import ActionError
from kiln.actions.temp_state import shared_dir
from kiln.windows_specs import WindowsTorch
from kiln.windows_torch_libs import (
    PREPARED_ENV,
    WINDOWS_TORCH,
    Unavailable,
    complete,
    unpack,
    wheelhouses_of,
)


def lib_dir(torch: WindowsTorch) -> Path:
    """torch/lib of the wheel `torch` names: kiln's, or unpacked here once (module doc)."""
    folder = shared_dir() / WINDOWS_TORCH
    if os.environ.get(PREPARED_ENV):
        lib = folder / torch.sha256 / "torch" / "lib"
        if not complete(folder / torch.sha256):
            raise ActionError(
                f"the Windows torch libraries (torch=={torch.version} win_amd64) are not "
                "in the sandbox: kiln unpacks them before the action runs, and did not",
                hint="a kiln bug: report it with `kiln info`; --nosandbox lets the action "
                "unpack them itself",
            )
        return lib
    try:
        return unpack(torch, folder, wheelhouses_of(os.environ))
    except Unavailable as error:
        raise ActionError(error.message, hint=error.hint) from None
