"""The Python environment of an action with third-party packages, made on the node.

    python = node_env.interpreter(task, cas, remote, wheelhouse, notes.append)

The driver sent the wheels the environment installs (RemoteTask.wheels: file
name and digest; their bytes are blobs of the remote cache, uploaded by the
driver). The node makes the environment as a local build does, with
kiln.pyenv's EnvironmentStore under `<worker root>/cache/python-envs/` (its disk
cache's, as a local build's are: the sandbox shows them read-only), once per
closure (and toolchain) and reused by every later action needing it: its
manifest is the check, so a node that has one fetches no wheel at all. To make
one:

    1. the wheels this node's CAS lacks are fetched, each verified against its
       digest as it is written (as inputs are)
    2. they are linked under their own file names (pip reads name, version and
       tags from it) into `wheelhouse`, a folder of this task's, removed after
    3. pip installs them from that folder only and offline (`--no-index`, even
       where it lacks one): a node never reaches an index, and `--require-hashes`
       checks every wheel against the lock's hash once more

A failure is an EnvironmentFailed naming the package, which run_task turns
into the task's failure; nothing half-made is ever used (EnvironmentStore).
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from pathlib import Path

from kiln.cache.cas import BlobMismatch, ContentStore
from kiln.cache.digest import Digest
from kiln.cache.remote_store import RemoteError, RemoteStore
from kiln.errors import KilnError
from kiln.exec.execroot import delete
from kiln.layout import DiskCache
from kiln.pyenv.environment import EnvironmentStore
from kiln.remote_exec.protocol import RemoteTask, TaskWheel


class EnvironmentFailed(Exception):
    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def interpreter(
    task: RemoteTask,
    cas: ContentStore,
    remote: RemoteStore,
    root: Path,
    wheelhouse: Path,
    report: Callable[[str], None],
) -> str:
    """The interpreter of the action's environment on this node, made first if need be."""
    packages = task.action.python_env or ()
    store = EnvironmentStore(
        DiskCache(root / "cache").python_envs,
        sys.executable,  # this node's toolchain: the interpreter its Ray workers run
        find_links=(str(wheelhouse),),
        offline=True,
        report=report,
    )
    try:
        if store.has(packages):
            return store.python_for(packages)
        _fetch(task.wheels, cas, remote)
        wheelhouse.mkdir(parents=True)
        for wheel in task.wheels:
            cas.materialize(Digest(wheel.hash, wheel.size), wheelhouse / wheel.file_name, False)
        return store.python_for(packages)
    except BlobMismatch as error:
        raise EnvironmentFailed(f"a wheel from the remote cache is damaged: {error}") from None
    except RemoteError as error:
        raise EnvironmentFailed(f"cannot fetch its wheels: {error.message}") from None
    except KilnError as error:  # pip's refusal (PythonEnvError), a blob gone from the CAS
        raise EnvironmentFailed(error.message) from None
    finally:
        delete(wheelhouse)


def _fetch(wheels: tuple[TaskWheel, ...], cas: ContentStore, remote: RemoteStore) -> None:
    """The wheels this node's CAS lacks, from the remote cache, verified as written."""
    missing = []
    for wheel in wheels:
        digest = Digest(wheel.hash, wheel.size)
        if cas.has(digest):
            cas.touch(digest, False)
        else:
            missing.append(functools.partial(remote.download, digest, cas, False))
    remote.transfer_many(missing)
