"""kiln's own state files (graph cache, analysis cache, action state, explain log).

Each is one pickle with a format number, replaced whole and atomically. They
are caches of work kiln can redo: a missing, damaged or old-format file reads
as None and costs only time. No fsync: after a power cut an empty file is
read as damaged, which is harmless.
"""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

from kiln.cache.atomic import write_atomic


def read(path: Path, version: int) -> dict[str, Any] | None:
    """The file's contents if it holds format `version`, else None."""
    try:
        with path.open("rb") as f:
            data = pickle.load(f)
    except Exception:  # missing, truncated, or written by other code: start afresh
        return None
    if not isinstance(data, dict) or data.get("format") != version:
        return None
    return data


def write(path: Path, version: int, **fields: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    data = pickle.dumps({"format": version, **fields}, protocol=pickle.HIGHEST_PROTOCOL)
    write_atomic(path, data, mode=0o644, sync=False)
