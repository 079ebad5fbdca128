"""Persistent workers: torch stays imported between `python -m kiln.actions.<name>` actions.

protocol.py  requests, responses, length-prefixed JSON frames
pool.py      WorkerPool: at most N workers, started lazily, replaced when they die
process.py   one worker process seen from the pool (start, send, wait, kill)
main.py      the worker itself: `python -m kiln.workers.main`
inprocess.py how one action runs inside it, as `python -m` would run it

WorkerPool is imported when first asked for: a process that only speaks the protocol
(a worker, a sandbox host) never pays for the pool's imports (subprocess, logging).
"""

from typing import TYPE_CHECKING, Any

from kiln.workers.protocol import WorkRequest, WorkResponse, worker_module

if TYPE_CHECKING:
    from kiln.workers.pool import WorkerPool

__all__ = ["WorkRequest", "WorkResponse", "WorkerPool", "worker_module"]


def __getattr__(name: str) -> Any:
    if name == "WorkerPool":
        from kiln.workers.pool import WorkerPool

        return WorkerPool
    raise AttributeError(f"module 'kiln.workers' has no attribute {name!r}")
