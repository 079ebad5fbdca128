"""Persistent workers: torch stays imported between `python -m kiln.actions.<name>` actions.

protocol.py  requests, responses, length-prefixed JSON frames
pool.py      WorkerPool: at most N workers, started lazily, replaced when they die
process.py   one worker process seen from the pool (start, send, wait, kill)
main.py      the worker itself: `python -m kiln.workers.main`
inprocess.py how one action runs inside it, as `python -m` would run it
"""

from kiln.workers.pool import WorkerPool
from kiln.workers.protocol import WorkRequest, WorkResponse, worker_module

__all__ = ["WorkRequest", "WorkResponse", "WorkerPool", "worker_module"]
