"""What one action may change in the worker's interpreter and process, and how it is put back.

Set for the action, as `python -m` would have it:

- sys.argv is ["-m", *args] until runpy puts the module's file first;
  sys.path is [execroot, PYTHONPATH entries, the worker's own path]
  (PYTHONSAFEPATH drops the execroot); PYTHONDONTWRITEBYTECODE and
  PYTHONPYCACHEPREFIX apply; the warning filters are the worker's at start,
  and warnings an earlier action saw are shown again.

Put back afterwards:

- modules imported from the execroot or the request's PYTHONPATH leave
  sys.modules (so the next action imports its own copy); the path finders and
  linecache entries for those directories go too; sys.path, sys.meta_path,
  sys.path_hooks, the exception and unraisable hooks, trace and profile
  functions, the recursion limit;
- the root logger's handlers and level; a few torch settings when torch is
  loaded (default dtype, grad mode, thread count, deterministic algorithms);
- the umask, signal handlers installed from Python, and interval timers
  (an alarm the action left is cancelled: it would go off in the next one).

Since issue 20 each action runs in a child forked from the worker
(forking.py), so nothing of this outlives the action anyway: what is put back
here matters only inside that child. What the worker itself never sees: threads
an action leaves running, atexit handlers (run in the child when its action
ends, as at a plain interpreter's exit), C++ warn-once state and other global
state of preloaded libraries (all gone with the child). The worker runs one
thread of its own (the lifeline watchdog, main.py), so threading.active_count()
is one higher. What preloading prints goes to the worker's log, not to an
action's stderr (a plain run that imports torch may print a warning there).
"""

from __future__ import annotations

import contextlib
import importlib
import linecache
import logging
import os
import signal
import sys
import tempfile
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from kiln.workers.protocol import WorkRequest

_TIMERS = (signal.ITIMER_REAL, signal.ITIMER_VIRTUAL, signal.ITIMER_PROF)


@dataclass(frozen=True)
class Baseline:
    """The worker's interpreter state between actions, captured once after preloading."""

    path: tuple[str, ...]
    home: str  # the worker's own working directory
    encoding: str
    errors: str
    warning_filters: tuple[Any, ...]

    @classmethod
    def capture(cls) -> Baseline:
        stdout = sys.__stdout__
        return cls(
            path=tuple(sys.path),
            home=os.getcwd(),
            encoding=stdout.encoding if stdout else "utf-8",
            errors=(stdout.errors or "strict") if stdout else "strict",
            warning_filters=tuple(warnings.filters),
        )


@contextlib.contextmanager
def isolated(request: WorkRequest, baseline: Baseline) -> Iterator[None]:
    """The action's interpreter state while the block runs (cwd is already the execroot)."""
    with _process_state(), _interpreter_state(request, baseline):
        yield


@contextlib.contextmanager
def _interpreter_state(request: WorkRequest, baseline: Baseline) -> Iterator[None]:
    env = request.env
    module = request.module
    execroot = os.getcwd()  # resolved, as `python -m` puts it on sys.path
    extra = [os.path.abspath(p) for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    extra = [p for p in dict.fromkeys(extra) if p not in baseline.path]
    roots = tuple(dict.fromkeys([execroot, os.path.abspath(request.cwd), *extra]))

    saved_argv = sys.argv
    saved_meta_path = list(sys.meta_path)
    saved_path_hooks = list(sys.path_hooks)
    saved_modules = set(sys.modules)
    saved_bytecode = (sys.dont_write_bytecode, sys.pycache_prefix)
    saved_hooks = (sys.excepthook, sys.unraisablehook, sys.gettrace(), sys.getprofile())
    saved_recursion_limit = sys.getrecursionlimit()
    root_logger = logging.getLogger()
    saved_logging = (list(root_logger.handlers), root_logger.level)
    saved_torch = _torch_state()

    # An earlier action may have imported the module to run: runpy would warn that
    # it "found it in sys.modules", which a fresh process does not.
    cached = sys.modules.get(module)
    if cached is not None and not hasattr(cached, "__path__"):
        del sys.modules[module]
    else:
        cached = None
    sys.argv = ["-m", *request.argv[3:]]  # runpy replaces argv[0] with the module's file
    first = [] if env.get("PYTHONSAFEPATH") else [execroot]
    sys.path[:] = [*first, *extra, *baseline.path]
    sys.dont_write_bytecode = bool(env.get("PYTHONDONTWRITEBYTECODE"))
    sys.pycache_prefix = env.get("PYTHONPYCACHEPREFIX") or None
    importlib.invalidate_caches()  # the finders' directory listings may predate this execroot
    # tempfile caches the first $TMPDIR it sees: that of an earlier action's execroot.
    tempfile.tempdir = None
    _reset_warnings(baseline)
    try:
        yield
    finally:
        sys.argv = saved_argv
        sys.path[:] = baseline.path
        sys.meta_path[:] = saved_meta_path
        sys.path_hooks[:] = saved_path_hooks
        sys.dont_write_bytecode, sys.pycache_prefix = saved_bytecode
        sys.excepthook, sys.unraisablehook = saved_hooks[:2]
        sys.settrace(saved_hooks[2])
        sys.setprofile(saved_hooks[3])
        sys.setrecursionlimit(saved_recursion_limit)
        root_logger.handlers[:] = saved_logging[0]
        root_logger.setLevel(saved_logging[1])
        _restore_torch_state(saved_torch)
        _forget_files_under(roots, saved_modules)
        if cached is not None:
            sys.modules.setdefault(module, cached)
        _reset_warnings(baseline)
        tempfile.tempdir = None


@contextlib.contextmanager
def _process_state() -> Iterator[None]:
    umask = os.umask(0o022)
    os.umask(umask)
    handlers = {}
    for number in signal.valid_signals():
        with contextlib.suppress(OSError, ValueError):
            handlers[number] = signal.getsignal(number)
    idle_timers = [timer for timer in _TIMERS if signal.getitimer(timer) == (0.0, 0.0)]
    try:
        yield
    finally:
        os.umask(umask)
        for timer in idle_timers:
            signal.setitimer(timer, 0)
        for number, handler in handlers.items():
            if handler is not None and signal.getsignal(number) is not handler:
                signal.signal(number, handler)


def _reset_warnings(baseline: Baseline) -> None:
    warnings.filters[:] = baseline.warning_filters  # type: ignore[index]  # a list at run time
    warnings.onceregistry.clear()  # type: ignore[attr-defined]
    # A new filters version makes every module's __warningregistry__ stale, so a
    # warning shown once in an earlier action is shown again, as in a fresh process.
    mutated = getattr(warnings, "_filters_mutated", None)
    if mutated is not None:
        mutated()


def _forget_files_under(roots: tuple[str, ...], keep: set[str]) -> None:
    prefixes = tuple(os.path.join(root, "") for root in roots)

    def under_roots(path: object) -> bool:
        return isinstance(path, str) and (path in roots or path.startswith(prefixes))

    for name in [n for n in sys.modules if n not in keep]:
        module = sys.modules.get(name)
        locations = [getattr(module, "__file__", None), *getattr(module, "__path__", [])]
        if any(under_roots(p) for p in locations):
            del sys.modules[name]
    for path in [p for p in sys.path_importer_cache if under_roots(p)]:
        del sys.path_importer_cache[path]
    # Source lines kept for tracebacks and warnings: the next action at the same
    # path may hold other files.
    for path in [p for p in linecache.cache if under_roots(p)]:
        del linecache.cache[path]


def _torch_state() -> tuple[Any, ...] | None:
    torch: Any = sys.modules.get("torch")
    if torch is None or not hasattr(torch, "get_default_dtype"):
        return None
    return (
        torch.get_default_dtype(),
        torch.is_grad_enabled(),
        torch.get_num_threads(),
        torch.are_deterministic_algorithms_enabled(),
        torch.is_deterministic_algorithms_warn_only_enabled(),
    )


def _restore_torch_state(state: tuple[Any, ...] | None) -> None:
    torch: Any = sys.modules.get("torch")
    if state is None or torch is None:
        return
    dtype, grad, threads, deterministic, warn_only = state
    if torch.get_default_dtype() != dtype:
        torch.set_default_dtype(dtype)
    torch.set_grad_enabled(grad)
    if torch.get_num_threads() != threads:
        torch.set_num_threads(threads)
    if (
        torch.are_deterministic_algorithms_enabled(),
        torch.is_deterministic_algorithms_warn_only_enabled(),
    ) != (deterministic, warn_only):
        torch.use_deterministic_algorithms(deterministic, warn_only=warn_only)
