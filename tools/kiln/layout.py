"""Where kiln keeps things on disk: every file name of the output base and the disk cache.

    <workspace>/kiln-out/                 outputs, as read-only hardlinks of CAS blobs
    <output base>/                        kiln's state for one workspace
        lock                              the workspace lock (flock; holds the pid)
        graph-cache.pickle                evaluated packages (loading)
        analysis-cache.pickle             the action graph of the last build (analysis)
        action-state.pickle               what kiln-out/ holds: the no-op path (exec)
        explain.pickle                    each action's last key parts, for --explain
        digests-<function>.log            source file digests by stat data
        blobs-<function>.log              the stamps of the CAS blobs verified (cas.py)
        execroot/                         private execroots of running actions
        wheels/<sha256>/<file>.whl        locked wheels that remote nodes install
    <disk cache>/                         shared by workspaces (--disk_cache)
        cas/<xx>/<hash>[.x]               blobs (`.x`: the executable copy)
        ac/<xx>/<key>                     action results
        gc.lock                           held while the cache is collected
        tmp/torch/                        torch's precompiled headers, read-only to sandboxed
                                          actions (actions/header_store.py), collected with the rest
        python-envs/<digest>/             Python environments: toolchain + locked packages
                                          (kiln.pyenv), shared by workspaces, collected whole
        python-envs/<digest>.in-use       held shared by every process using that environment
        <function>/                       a whole cache of its own for digest functions
                                          other than sha256 (blake3/): names never mix

The default output base is `<cache home>/workspaces/<hash of the workspace path>`,
the default disk cache `<cache home>` itself, with `<cache home>` being
`$XDG_CACHE_HOME/kiln` or `~/.cache/kiln`. Nothing else in kiln spells these
names. A leaf: this module imports only kiln.errors and kiln.action_graph.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from kiln.action_graph import GENERATED_ROOT
from kiln.errors import KilnError

DEFAULT_DIGEST_FUNCTION = "sha256"
# Beside each Python environment (python-envs/<digest>.in-use): held shared (flock) by every
# process that uses the environment, for as long as it lives; the collection removes an
# environment only under this lock held exclusively.
PYTHON_ENV_IN_USE = ".in-use"


def cache_home() -> Path:
    """`$XDG_CACHE_HOME/kiln`, or `~/.cache/kiln`."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "kiln"


def output_root(workspace_root: Path) -> Path:
    """The workspace's kiln-out/."""
    return workspace_root / GENERATED_ROOT


@dataclass(frozen=True)
class OutputBase:
    """kiln's private state for one workspace."""

    root: Path

    @staticmethod
    def for_workspace(workspace_root: Path) -> OutputBase:
        key = hashlib.sha256(str(workspace_root).encode()).hexdigest()[:16]
        return OutputBase(cache_home() / "workspaces" / key)

    @property
    def lock(self) -> Path:
        return self.root / "lock"

    @property
    def graph_cache(self) -> Path:
        return self.root / "graph-cache.pickle"

    @property
    def analysis_cache(self) -> Path:
        return self.root / "analysis-cache.pickle"

    @property
    def action_state(self) -> Path:
        return self.root / "action-state.pickle"

    @property
    def explain_log(self) -> Path:
        return self.root / "explain.pickle"

    @property
    def placed_outputs(self) -> Path:
        return self.root / "placed-outputs.pickle"

    @property
    def last_invocation(self) -> Path:
        """The record of the last `kiln build` or `kiln test` (kiln.report.record), which
        `kiln report` renders; JSON."""
        return self.root / "last-invocation.json"

    @property
    def execroot(self) -> Path:
        return self.root / "execroot"

    @property
    def wheels(self) -> Path:
        """The wheels of locked packages that remote nodes install (kiln.pyenv.wheels)."""
        return self.root / "wheels"

    @property
    def sandbox(self) -> Path:
        """An empty directory each sandbox's root is mounted on (in its own namespace)."""
        return self.root / "sandbox"

    def digest_log(self, function: str) -> Path:
        return self.root / f"digests-{function}.log"

    def blob_log(self, function: str) -> Path:
        return self.root / f"blobs-{function}.log"

    def build_state(self) -> tuple[Path, ...]:
        """What `kiln clean` removes with kiln-out/: the record of what kiln-out/ held.

        The graph, analysis and digest caches stay: they describe the sources.
        """
        return (self.explain_log, self.action_state, self.placed_outputs, self.execroot)

    def create(self) -> None:
        """Make the directory; a KilnError naming it if something else is in the way."""
        _make_directory(self.root, "the output base", "--output_base=DIR")


@dataclass(frozen=True)
class DiskCache:
    """The content-addressed cache: blobs and action results, shared by workspaces."""

    root: Path

    @staticmethod
    def at(root: Path, digest_function: str = DEFAULT_DIGEST_FUNCTION) -> DiskCache:
        """The cache under `root` for a digest function: blobs and keys of another
        function live in a cache of their own, so names never mix."""
        if digest_function == DEFAULT_DIGEST_FUNCTION:
            return DiskCache(root)
        return DiskCache(root / digest_function)

    @property
    def cas(self) -> Path:
        return self.root / "cas"

    @property
    def ac(self) -> Path:
        return self.root / "ac"

    @property
    def gc_lock(self) -> Path:
        return self.root / "gc.lock"

    @property
    def tmp(self) -> Path:
        """Temp state of actions that outlives them: per user, collected by the GC."""
        return self.root / "tmp"

    @property
    def torch_tmp(self) -> Path:
        return self.tmp / "torch"

    @property
    def python_envs(self) -> Path:
        """Python environments of the toolchain plus locked packages (kiln.pyenv): 90 to 250
        MB each, so the collection bounds them with the rest, never one in use."""
        return self.root / "python-envs"

    def expunged(self, digest_functions: Iterable[str]) -> tuple[Path, ...]:
        """What `kiln clean --expunge_disk_cache` removes: the store, the actions' temp state,
        and the other functions' caches."""
        others = (self.root / f for f in digest_functions if f != DEFAULT_DIGEST_FUNCTION)
        return (self.cas, self.ac, self.gc_lock, self.tmp, self.python_envs, *others)

    def create(self) -> None:
        """Make the directory; a KilnError naming it if something else is in the way."""
        _make_directory(self.root, "the disk cache", "--disk_cache=DIR")


def _make_directory(path: Path, what: str, flag: str) -> None:
    try:
        path.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        blocker = next((p for p in (path, *path.parents) if p.exists() and not p.is_dir()), path)
        raise KilnError(
            f"{what} {path} cannot be created: {blocker} is a file, not a directory",
            hint=f"remove {blocker}, or choose another directory with {flag}",
        ) from None
    except PermissionError:
        raise KilnError(
            f"{what} {path} cannot be created: permission denied",
            hint=f"make its parent writable, or choose another directory with {flag}",
        ) from None
