"""kiln's own state files (graph cache, analysis cache, action state, explain log).

Each is one pickle with a format number, replaced whole and atomically. They
are caches of work kiln can redo: a missing, damaged or old-format file reads
as None and costs only time. No fsync: after a power cut an empty file is
read as damaged, which is harmless.

A file that unpickles but holds something else than its reader expects
(other code wrote it, or a kiln whose classes differ under the same format)
would fail later, far from here, in every build. Each reader therefore
states the shape it needs (`is_valid`); a file of another shape is deleted
with a warning, and so read as None. A directory where the file belongs is
left alone, with a warning, and the state is not kept until it is removed.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any


def read(
    path: Path, version: int, is_valid: Callable[[dict[str, Any]], bool], what: str
) -> dict[str, Any] | None:
    """The file's contents if it holds format `version` in a valid shape, else None.

    `what` names the state in the warning ("the action state").
    """
    try:
        with path.open("rb") as f:
            data = pickle.load(f)
    except IsADirectoryError:
        directory_in_the_way(path, what)
        return None
    except Exception:  # missing, truncated, or written by other code: start afresh
        return None
    if not isinstance(data, dict) or data.get("format") != version:
        return None
    if not _checks(is_valid, data):
        discard(path, what)
        return None
    return data


def write(path: Path, version: int, **fields: Any) -> None:
    if path.is_dir():
        return  # said so when it was read
    from kiln.cache.atomic import write_atomic  # not for a run that only reads (a query)

    path.parent.mkdir(parents=True, exist_ok=True)
    data = pickle.dumps({"format": version, **fields}, protocol=pickle.HIGHEST_PROTOCOL)
    write_atomic(path, data, mode=0o644, sync=False)


def discard(path: Path, what: str) -> None:
    """Delete a state file of the wrong shape, saying so."""
    warn(f"{path} does not hold {what} in the shape this kiln writes: discarded")
    with contextlib.suppress(OSError):
        os.unlink(path)


def directory_in_the_way(path: Path, what: str) -> None:
    warn(f"{path} is a directory, not {what}: ignored, and not kept until it is removed")


def warn(message: str) -> None:
    # Before a build's status line starts or after it ends: plain stderr is safe.
    sys.stderr.write(f"WARNING: {message}\n")


def all_of(values: object, cls: type) -> bool:
    """Whether `values` is a dict or sequence whose values are all `cls` instances."""
    if isinstance(values, dict):
        return all(isinstance(v, cls) for v in values.values())
    return isinstance(values, list | tuple) and all(isinstance(v, cls) for v in values)


def _checks(is_valid: Callable[[dict[str, Any]], bool], data: dict[str, Any]) -> bool:
    try:
        return is_valid(data)
    except Exception:  # a check that trips over a wrong type has its answer too
        return False
