"""torch's precompiled headers in kiln's sandbox: one store, read-only to every action.

Inductor precompiles the header its AOT wrapper and its kernels include (5-8 s a
header) and keeps it in `codecache._HEADER_DIR` under a hash of the compile
flags, the preprocessed header and the compiler. The folder used to be the disk
cache's, bound writable into every action: a genrule could rewrite a header
and another workspace's next compile built the genrule's text into its package
under a clean key (tests/e2e/test_action_isolation.py).

Now (a sandboxed action, $KILN_TORCH_STORE set by the executor):

    <store>/published_headers/<hash>.h[.gch]      the disk cache's, bound read-only
    /tmp/kiln-torch-tmp/precompiled_headers/      the action's own (its private /tmp):
                                                  a link to each header of the store

Inductor looks its header up in the action's folder, at the path main used, so
a package names the same path whether the header was there or not: a hit is a
link, used as it is (no copy, no hash: the store is read-only, so what lies
there is what kiln's header maker published). On a miss the action asks kiln
for the header and waits (ask_for_misses): it appends a request to
$KILN_PCH_REQUESTS, kiln, which watches that file while the action runs
(exec/header_requests.py), has its header maker (actions/header_maker.py) make
the header from the request's settings alone, outside any action, and publish
it, then answers in $KILN_PCH_REPLIES; the action links what was published. So
each header is made once, by the maker, and nothing an action writes reaches
the store. Only where the maker made nothing (it failed, or made the header
under another name: not the action's) does the action make its own, in its own
folder, as inductor always does. Without the sandbox ($KILN_TORCH_STORE unset)
actions share the disk cache's folder itself, as --nosandbox shares everything
else.
"""

from __future__ import annotations

import functools
import json
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

# Set by the executor for a sandboxed Python action (kiln.exec.run_in_execroot: the same
# strings, pinned by a test).
STORE_ENV = "KILN_TORCH_STORE"
REQUESTS_ENV = "KILN_PCH_REQUESTS"
REPLIES_ENV = "KILN_PCH_REPLIES"
HEADERS = "precompiled_headers"  # the action's own folder: the path packages name
# The store's folder: not the one actions wrote before issue 20 (which a genrule may have
# rewritten), so nothing made before the header maker is ever taken from it.
PUBLISHED = "published_headers"

# The compile settings a request carries: what inductor passes _precompile_header, less the
# vector ISA (by name) and anything naming a path or a program (the maker never takes those).
REQUEST_SETTINGS = (
    "aot_mode",
    "device_type",
    "use_mmap_weights",
    "use_mmap_weights_external",
    "use_relative_path",
    "min_optimize",
)


def published(store: Path, name: str) -> bool:
    """Whether `store` holds header `name` whole: its .h and its compiled form."""
    return (store / f"{name}.gch").is_file() and (store / name).is_file()


def link_store(store: Path, own: Path) -> None:
    """A link in `own` to each published header of `store` (its .h and .h.gch)."""
    own.mkdir(parents=True, exist_ok=True)
    try:
        names = os.listdir(store)
    except OSError:
        return  # nothing published yet
    present = set(names)
    for name in names:
        if not name.endswith(".h") or name.startswith("."):
            continue
        if f"{name}.gch" not in present:  # the disk cache's GC took its compiled form
            continue
        for file in (name, f"{name}.gch"):
            link = own / file
            if not os.path.lexists(link):
                link.symlink_to(store / file)


# torch's own _precompile_header (functools.cache'd) and _worker_compile_cpp, kept at the
# first patch.
_REAL: dict[str, Callable[..., Any]] = {}


# inductor's settings that reach a header's compile flags (cpp_builder), which a request
# carries, each with what the maker takes for it: nothing naming a path or a program.
_OPT_LEVEL = r"O[0-3sgz]?"
REQUEST_CONFIGS = {
    "aot_inductor.compile_wrapper_opt_level": _OPT_LEVEL,
    "aot_inductor.allow_stack_allocation": bool,
    "aot_inductor.enable_lto": bool,
    "aot_inductor.debug_compile": bool,
    "aot_inductor.debug_symbols": bool,
    "aot_inductor.enable_line_tables": bool,
    "aot_inductor.enable_frame_pointer": bool,
    "aot_inductor.link_libtorch": bool,
    "aot_inductor.dynamic_linkage": bool,
    "aot_inductor.package_cpp_only": bool,
    "aot_inductor.weight_use_caching_allocator": bool,
    "aot_inductor.cross_target_platform": r"[a-z]{0,16}",
    "cpp.enable_unsafe_math_opt_flag": bool,
    "cpp.enable_floating_point_contract_flag": r"[a-z]{0,16}|True|False",
    "cpp.march": r"x86-64(-v[234])?|native|",
}


def current_configs() -> dict[str, Any]:
    """The values of REQUEST_CONFIGS in this process's inductor config."""
    from torch._inductor import config

    values = config.get_config_copy()
    return {key: values[key] for key in REQUEST_CONFIGS if key in values}


# The environment that selects the instruction set inductor compiles for
# (inductor_cache.cpu_target_env): a request carries it.
ISA_ENVIRONMENT = ("TORCHINDUCTOR_CPP_MARCH", "ATEN_CPU_CAPABILITY")


# How long an action waits for kiln's answer before it makes the header itself: the
# maker's own bound (exec/sandboxing.py) and a queue of a few headers before it.
ANSWER_TIMEOUT = 900.0
_POLL = 0.05

# What the header being precompiled is, for the compile step that names it.
_asking = threading.local()


def ask_for_misses(requests: str, replies: str, store: Path) -> None:
    """Have inductor ask kiln for each precompiled header it lacks, and wait for the
    answer, before it would compile the header itself (module doc)."""
    from torch._inductor import codecache

    real = _REAL.setdefault("precompile", codecache._precompile_header)
    real_compile = _REAL.setdefault("compile", codecache._worker_compile_cpp)

    @functools.wraps(real)
    def precompile(header: str, hashable_cmd_line: str, **compile_command: Any) -> str:
        _asking.header = (header, compile_command)
        try:
            path = real(header, hashable_cmd_line, **compile_command)
            if not os.path.lexists(f"{path}.gch"):  # a worker's later action: its /tmp is new
                real.cache_clear()  # type: ignore[attr-defined]
                path = real(header, hashable_cmd_line, **compile_command)
            return str(path)
        finally:
            _asking.header = None

    @functools.wraps(real_compile)
    def compile_cpp(lock_path: str, builders: Any, *args: Any, **kwargs: Any) -> Any:
        asking: tuple[str, dict[str, Any]] | None = getattr(_asking, "header", None)
        for builder in builders:
            target = builder.get_target_file_path()
            if asking and target.endswith(".h.gch") and not os.path.lexists(target):
                name = os.path.basename(target)[: -len(".gch")]
                if _ask(requests, replies, _request(asking[0], name, asking[1])):
                    link_store(store, Path(os.path.dirname(target)))
        return real_compile(lock_path, builders, *args, **kwargs)

    codecache._precompile_header = precompile  # type: ignore[assignment]
    codecache._worker_compile_cpp = compile_cpp  # type: ignore[assignment]


def _request(header: str, name: str, compile_command: dict[str, Any]) -> dict[str, Any]:
    settings = {k: compile_command[k] for k in REQUEST_SETTINGS if k in compile_command}
    vec_isa = compile_command.get("vec_isa")
    return {
        "header": header,
        "name": name,
        "settings": settings,
        "vec_isa": str(vec_isa) if vec_isa is not None and bool(vec_isa) else "",
        "environment": {k: os.environ[k] for k in ISA_ENVIRONMENT if k in os.environ},
        "configs": current_configs(),
    }


def _ask(requests: str, replies: str, request: dict[str, Any]) -> bool:
    """Append `request` and wait for kiln's answer; False if none came in time."""
    answer = os.path.join(replies, request["name"])
    with open(requests, "a", encoding="utf-8") as file:
        file.write(json.dumps(request, sort_keys=True) + "\n")
    deadline = time.monotonic() + ANSWER_TIMEOUT
    while not os.path.lexists(answer):
        if time.monotonic() > deadline:
            return False
        time.sleep(_POLL)
    return True
