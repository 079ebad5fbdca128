"""What the finished actions of this build produced, for the actions reading it.

An action's key needs the digest of every input; a generated input's digest
is known once its producer finished (ran, hit a cache or was up to date).
Producers record here from scheduler threads; an action reads only what its
producers recorded, and the scheduler starts it only after they finished
(their futures completed), so no read races its write. Each write is one
dict or set operation, atomic in CPython: no lock on the no-op path's
thousands of reads.
"""

from __future__ import annotations

from collections.abc import Iterable, Set
from typing import Protocol

from kiln.action_graph import Action
from kiln.cache.digest import Digest


class _Output(Protocol):
    @property
    def path(self) -> str: ...
    @property
    def digest(self) -> Digest: ...
    @property
    def is_executable(self) -> bool: ...


class BuiltOutputs:
    def __init__(self) -> None:
        self._digests: dict[str, Digest] = {}
        self._executable: set[str] = set()
        self._directories: dict[str, tuple[str, ...]] = {}

    def record(self, action: Action, files: Iterable[_Output]) -> None:
        """The files `action` produced: its output files and those in its output directories."""
        files = list(files)
        for file in files:
            self._digests[file.path] = file.digest
            if file.is_executable:
                self._executable.add(file.path)
        for output in action.outputs:
            if output.directory:
                prefix = output.path + "/"
                self._directories[output.path] = tuple(
                    f.path for f in files if f.path.startswith(prefix)
                )

    def digest(self, path: str) -> Digest:
        return self._digests[path]

    def files_in(self, directory: str) -> tuple[str, ...]:
        """The files a directory output held, by path."""
        return self._directories[directory]

    @property
    def executable(self) -> Set[str]:
        """Generated files that are executable: their blobs are the CAS's `.x` copies."""
        return self._executable
