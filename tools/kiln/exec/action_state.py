"""The workspace's record of what kiln-out/ holds: ninja's build log for kiln.

For each action (by its first output) it keeps the key it last ran or hit
with, and each output's digest and the stat data of the file kiln placed in
kiln-out/. When the key is unchanged and every output file still has that
stat data, the action is up to date: no action-cache read, no thread, no
hashing. Anything else falls back to the action cache, so a lost or stale
record only costs time. Written whole, atomically, at the end of a build.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kiln import state_file
from kiln.cache.action_cache import ActionResult
from kiln.cache.digest import Digest

FORMAT = 1


@dataclass(frozen=True, slots=True)
class OutputRecord:
    path: str
    digest: Digest
    is_executable: bool
    inode: int
    mtime_ns: int
    size: int


@dataclass(frozen=True, slots=True)
class StateEntry:
    key: str
    outputs: tuple[OutputRecord, ...]


class ActionState:
    def __init__(self, path: Path, workspace_root: Path):
        self.path = path
        self.root = str(workspace_root)
        self.entries: dict[str, StateEntry] = {}
        self._lock = threading.Lock()
        self._dirty = False
        data = state_file.read(path, FORMAT, _is_valid, "the action state")
        if data is not None:
            self.entries = data["entries"]

    def current(self, primary_output: str, key: str) -> tuple[OutputRecord, ...] | None:
        """The outputs, if kiln-out/ still holds exactly what the action made under `key`."""
        entry = self.entries.get(primary_output)
        if entry is None or entry.key != key:
            return None
        for out in entry.outputs:
            try:
                st = os.stat(os.path.join(self.root, out.path))
            except OSError:
                return None
            if (st.st_ino, st.st_mtime_ns, st.st_size) != (out.inode, out.mtime_ns, out.size):
                return None
        return entry.outputs

    def record(self, primary_output: str, key: str, result: ActionResult) -> None:
        outputs = []
        for out in result.output_files:
            try:
                st = os.stat(os.path.join(self.root, out.path))
            except OSError:
                return
            outputs.append(
                OutputRecord(
                    out.path, out.digest, out.is_executable, st.st_ino, st.st_mtime_ns, st.st_size
                )
            )
        with self._lock:
            self.entries[primary_output] = StateEntry(key, tuple(outputs))
            self._dirty = True

    def save(self) -> None:
        if self._dirty:
            state_file.write(self.path, FORMAT, entries=self.entries)
            self._dirty = False


def _is_valid(data: dict[str, Any]) -> bool:
    entries = data["entries"]
    return isinstance(entries, dict) and all(
        isinstance(name, str)
        and isinstance(entry, StateEntry)
        and isinstance(entry.key, str)
        and state_file.all_of(entry.outputs, OutputRecord)
        and all(isinstance(out.path, str) for out in entry.outputs)
        for name, entry in entries.items()
    )
