"""The one compile of a program with Torch-TensorRT, used by TrtEngine, TrtCompile, the refit
and AotiPackage's Torch-TensorRT route, and the one policy for which settings the installed
Torch-TensorRT accepts (accepted_settings).

    trt_gm = torch_tensorrt.dynamo.compile(program, arg_inputs=[Input(min, opt, max)],
                                           **settings, cache_built_engines=False,
                                           reuse_cached_engines=False)
          or torch_tensorrt.dynamo.cross_compile_for_windows(...)   (windows)

Settings are passed only when the compile function names them as parameters (2.13
removed `use_explicit_typing` and `enabled_precisions` and raises on them, though it
takes **kwargs); the caller records the ones left out. Torch-TensorRT's engine cache
is off on every path (kiln.actions.tensorrt.settings says why): passed off to compile, and
cross_compile_for_windows forces it off itself with the rest of FORCED_OFF. Each
action gets its own timing cache under its TMPDIR (the default is one shared file
under /tmp that every build rewrites).
"""

from __future__ import annotations

import inspect
import os
import sys
import tempfile
import traceback
from pathlib import Path
from typing import Any

from kiln.action_specs import ShapeRange
from kiln.actions.spec import ActionFailure
from kiln.actions.tensorrt.settings import ENGINE_CACHE_OFF, FORCED_OFF

COMPILE = "torch_tensorrt.dynamo.compile"
CROSS_COMPILE = "torch_tensorrt.dynamo.cross_compile_for_windows"
# What TrtCompile adds for a program whose weights are refit later (kiln.actions.tensorrt.refit).
REFITTABLE = {"immutable_weights": False}


def import_torch_tensorrt() -> Any:
    try:
        import torch_tensorrt
    except Exception as error:  # ImportError, or TensorRT's libraries failing to load
        raise ActionFailure(
            f"torch_tensorrt is not importable in the action's interpreter ({sys.executable}): "
            f"{brief(error)}"
        ) from error
    return torch_tensorrt


def compile_program(
    torch_tensorrt: Any,
    program: Any,
    ranges: tuple[ShapeRange, ...],
    settings: dict[str, Any],
    *,
    windows: bool,
    scratch: Path | None = None,
) -> tuple[Any, dict[str, Any], list[str]]:
    """(the compiled module, the settings passed, those the installed version lacks).

    The timing cache goes to `scratch` (default: kiln-trt under the action's TMPDIR)."""
    from kiln.actions.model_loading import DTYPES

    inputs = [
        torch_tensorrt.Input(
            min_shape=list(r.min),
            opt_shape=list(r.opt),
            max_shape=list(r.max),
            dtype=DTYPES[r.dtype],
        )
        for r in ranges
    ]
    if scratch is None:
        scratch = Path(os.environ.get("TMPDIR") or tempfile.gettempdir()) / "kiln-trt"
    scratch.mkdir(parents=True, exist_ok=True)
    wanted = {k: v for k, v in settings.items() if k not in FORCED_OFF}
    wanted["timing_cache_path"] = str(scratch / "timing.cache")
    if windows:
        api, compile_fn = CROSS_COMPILE, torch_tensorrt.dynamo.cross_compile_for_windows
    else:
        api, compile_fn = COMPILE, torch_tensorrt.dynamo.compile
        wanted.update(ENGINE_CACHE_OFF)  # cross_compile_for_windows forces it off itself
    passed, dropped = accepted_settings(compile_fn, wanted)
    try:
        trt_gm = compile_fn(program, arg_inputs=inputs, **passed)
    except Exception as error:
        raise ActionFailure(f"{api} failed: {brief(error)}") from error
    return trt_gm, {k: v for k, v in passed.items() if k != "timing_cache_path"}, dropped


def accepted_settings(fn: Any, wanted: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """(the settings `fn` names as parameters, the names of those it does not).

    A **kwargs parameter does not count: 2.13 raises on the names it removed. If no
    named parameter can be found at all, every setting is passed.
    """
    named = _named_parameters(fn)
    if not named:
        return dict(wanted), []
    passed = {k: v for k, v in wanted.items() if k in named}
    return passed, sorted(k for k in wanted if k not in named)


def _named_parameters(fn: Any) -> set[str]:
    """The keyword-capable parameters of fn, looking through decorators.

    cross_compile_for_windows is wrapped by @needs_cross_compile, a `wrapper(*args,
    **kwargs)` without functools.wraps: its own signature names nothing, so follow
    the one function its closure holds.
    """
    kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    for _ in range(8):
        try:
            params = inspect.signature(fn).parameters  # follows __wrapped__
        except (TypeError, ValueError):
            return set()
        named = {name for name, p in params.items() if p.kind in kinds}
        if named:
            return named
        cells = getattr(fn, "__closure__", None) or ()
        inner = [c.cell_contents for c in cells if inspect.isfunction(c.cell_contents)]
        if len(inner) != 1:
            return set()
        fn = inner[0]
    return set()


def brief(error: BaseException) -> str:
    """The error in a line; a bare one (`assert` without a message, inside Torch-TensorRT)
    says where it was raised, the only clue it has."""
    text = str(error).strip()
    if text:
        return f"{type(error).__name__}: {text[:2000]}"
    frames = traceback.extract_tb(error.__traceback__)
    if not frames:
        return type(error).__name__
    last = frames[-1]
    where = "/".join(Path(last.filename).parts[-3:])
    return f"{type(error).__name__} at {where}:{last.lineno}: {(last.line or '').strip()}"
