"""Private execroots: a directory per action holding only its declared inputs.

Source inputs are symlinks to the workspace; generated inputs are hardlinks
of CAS blobs (read-only, so an action cannot corrupt the cache through
them). An action that opens an undeclared workspace file by its relative
path finds nothing. Execroots live in the output base; ones left by a
killed kiln are swept at the next start.

A generated input's blob is verified as it is linked in (cas.materialize).
One that left the cache during the build (a concurrent collection, an
expunged shared cache) or was found damaged is put back from the file
kiln-out/ holds, if that still hashes to it; otherwise InputUnavailable
names the input, and the action fails asking for another build (whose
up-to-date check finds the blob gone and runs its producer again).

Directories are the expensive part: on the development machine's ext4 an
rmdir took 1-2 ms against 10 us for unlinking a link, and every new inode
costs more the more were freed recently; an execroot has half a dozen
directories (.tmp, tools/, the package, kiln-out/...). So an execroot is not
deleted after its action but handed to the next one (release() returns it
to a pool), as later Bazels' --reuse_sandbox_directories does. create() then
makes it exactly what a fresh one would be: it unlinks every file, keeps the
symlinks to sources the new action reads too, moves aside every directory
it does not need (a rename) and makes the missing ones. What was moved aside
is deleted on a thread of its own, off the actions' lanes; close() deletes
the pool and waits for that thread.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import queue
import shutil
import threading
from collections.abc import Set
from pathlib import Path

from kiln.action_graph import GENERATED_ROOT, Action
from kiln.cache.cas import ContentStore, DamagedBlob, MissingBlob
from kiln.cache.digest import Digest

_counter = itertools.count()
_TMP = ".tmp"  # the action's TMPDIR, and where its stdout and stderr go


class InputUnavailable(Exception):
    """A generated input whose blob is gone or damaged, and that kiln-out/ cannot restore."""

    def __init__(self, path: str, damaged: bool) -> None:
        how = "was found damaged in" if damaged else "left"
        super().__init__(
            f"its input {path} {how} the disk cache during this build (a concurrent "
            "collection or expunge, or a write through a hard link?) and kiln-out/ no "
            "longer holds it: build again to make it anew"
        )
        self.path = path


class Execroots:
    def __init__(self, base: Path, workspace_root: Path, cas: ContentStore):
        self.base = base
        self.workspace_root = workspace_root
        self.cas = cas
        self._free: list[Path] = []  # execroots between two actions
        self._lock = threading.Lock()
        self._doomed: queue.SimpleQueue[Path | None] = queue.SimpleQueue()
        self._remover: threading.Thread | None = None
        self._doomed_dir_made = False

    def sweep(self) -> None:
        """Remove execroots a previous, killed kiln left behind."""
        if self.base.exists():
            shutil.rmtree(self.base, ignore_errors=True)

    def create(
        self,
        action: Action,
        key: str,
        inputs: dict[str, Digest],
        executable: Set[str] = frozenset(),
    ) -> Path:
        """An execroot holding `inputs` (every concrete input file, by path); the
        generated ones named in `executable` come from the CAS's executable copies."""
        del key  # execroots are reused: their names say nothing of their action
        needed = {_TMP}
        for path in inputs:
            needed.update(_ancestors(os.path.dirname(path)))
        for file in action.outputs:
            # Output directories exist before the action runs, as in Bazel.
            needed.update(_ancestors(file.path if file.directory else os.path.dirname(file.path)))
        needed.discard("")
        links = {p: str(self.workspace_root / p) for p in inputs if not _generated(p)}
        root, present = self._take(needed, links)
        try:
            for directory in sorted(needed - present, key=lambda d: d.count("/")):
                os.mkdir(root / directory)
            for path, digest in inputs.items():
                if _generated(path):
                    # a no-op if already that blob
                    self._link_generated(digest, root, path, path in executable)
                elif path not in present:
                    os.symlink(links[path], root / path)
        except BaseException:
            self.release(root)  # half made: the next create() empties it like any other
            raise
        return root

    def _link_generated(self, digest: Digest, root: Path, path: str, executable: bool) -> None:
        try:
            self.cas.materialize(digest, root / path, executable)
        except (MissingBlob, DamagedBlob) as error:
            if not self.cas.restore(digest, self.workspace_root / path, executable):
                raise InputUnavailable(path, isinstance(error, DamagedBlob)) from None
            self.cas.materialize(digest, root / path, executable)

    def release(self, root: Path) -> None:
        """The action is done with `root`: keep it for the next one."""
        with self._lock:
            self._free.append(root)

    def close(self) -> None:
        """Delete every execroot, and wait until they are gone."""
        with self._lock:
            free, self._free = self._free, []
            remover, self._remover = self._remover, None
        if remover is None and not free:
            return
        if remover is None:
            remover = self._start_remover()
        for root in free:
            self._doomed.put(root)
        self._doomed.put(None)
        remover.join()
        with contextlib.suppress(OSError):
            (self.base / "doomed").rmdir()
            self._doomed_dir_made = False

    # -- reuse ----------------------------------------------------------------

    def _take(self, needed: set[str], links: dict[str, str]) -> tuple[Path, set[str]]:
        """A pooled execroot emptied down to the `needed` directories and the symlinks
        (path -> target) it already has, and those paths; or a new one."""
        with self._lock:
            root = self._free.pop() if self._free else None
        if root is not None:
            present: set[str] = set()
            try:
                self._empty(root, "", needed, links, present)
            except OSError:
                # Something the action left (a read-only directory, say) resists:
                # give up on this one.
                self._doom(root)
            else:
                return root, present
        root = self.base / f"{os.getpid()}-{next(_counter)}"
        root.mkdir(parents=True)
        return root, set()

    def _empty(
        self,
        directory: Path,
        relative: str,
        needed: set[str],
        links: dict[str, str],
        present: set[str],
    ) -> None:
        with os.scandir(directory) as entries:
            for entry in entries:
                path = f"{relative}/{entry.name}" if relative else entry.name
                if not entry.is_dir(follow_symlinks=False):
                    # A source the next action reads too stays: creating an inode
                    # costs more than reading a link.
                    if path in links and entry.is_symlink() and os.readlink(entry) == links[path]:
                        present.add(path)
                    else:
                        os.unlink(entry.path)
                elif path in needed:
                    present.add(path)
                    self._empty(Path(entry.path), path, needed, links, present)
                else:
                    self._doom(Path(entry.path))

    def _doom(self, path: Path) -> None:
        """Move `path` out of its execroot now; delete it on the remover thread."""
        doomed = self.base / "doomed"
        if not self._doomed_dir_made:
            doomed.mkdir(exist_ok=True)
            self._doomed_dir_made = True
        target = doomed / f"{os.getpid()}-{next(_counter)}"
        os.rename(path, target)
        with self._lock:
            if self._remover is None:
                self._remover = self._start_remover()
        self._doomed.put(target)

    def _start_remover(self) -> threading.Thread:
        thread = threading.Thread(target=self._remove_queued, name="kiln-execroots", daemon=True)
        thread.start()
        return thread

    def _remove_queued(self) -> None:
        while (path := self._doomed.get()) is not None:
            delete(path)


def delete(root: Path) -> None:
    """rmtree, even of read-only directories an action made."""
    try:
        shutil.rmtree(root)
    except FileNotFoundError:
        return
    except OSError:
        # rmtree copes with read-only files (outputs linked into the CAS) but not
        # with read-only directories: open them up and try again. Rare, so the
        # common case walks the tree only once.
        for dirpath, dirnames, _ in os.walk(root):
            for name in dirnames:
                with contextlib.suppress(OSError):
                    os.chmod(os.path.join(dirpath, name), 0o755)
        shutil.rmtree(root, ignore_errors=True)


def _generated(path: str) -> bool:
    return path.startswith(GENERATED_ROOT + "/")


def _ancestors(path: str) -> list[str]:
    """'a/b/c' -> ['a', 'a/b', 'a/b/c']; '' -> []."""
    parts = path.split("/") if path else []
    return ["/".join(parts[: i + 1]) for i in range(len(parts))]
