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
there is what kiln's header maker published); a miss is made in the action's
own folder, as inductor always does, and recorded in $KILN_PCH_REQUESTS. After
the action kiln runs its own header maker (actions/header_maker.py) on those
requests, which makes each header again from its flags alone, outside any
action, and publishes it: nothing an action writes reaches the store.
Without the sandbox ($KILN_TORCH_STORE unset) actions share the disk cache's
folder itself, as --nosandbox shares everything else.
"""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

# Set by the executor for a sandboxed Python action (kiln.exec.run_in_execroot: the same
# strings, pinned by a test).
STORE_ENV = "KILN_TORCH_STORE"
REQUESTS_ENV = "KILN_PCH_REQUESTS"
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


def link_store(store: Path, own: Path) -> None:
    """A link in `own` to each published header of `store` (its .h and .h.gch)."""
    own.mkdir(parents=True, exist_ok=True)
    try:
        names = os.listdir(store)
    except OSError:
        return  # nothing published yet
    for name in names:
        if not name.endswith(".h") or name.startswith("."):
            continue
        for file in (name, f"{name}.gch"):
            link = own / file
            if not os.path.lexists(link):
                link.symlink_to(store / file)


# torch's own _precompile_header (functools.cache'd), kept at the first patch.
_REAL: dict[str, Callable[..., str]] = {}


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


def record_misses(requests: str) -> None:
    """Have inductor's _precompile_header note each header it had to make (not a link to
    the store) in `requests`, one JSON line each, for kiln's header maker."""
    from torch._inductor import codecache

    real = _REAL.setdefault("precompile", codecache._precompile_header)

    @functools.wraps(real)
    def precompile(header: str, hashable_cmd_line: str, **compile_command: Any) -> str:
        path = real(header, hashable_cmd_line, **compile_command)
        compiled = f"{path}.gch"
        if not os.path.lexists(compiled):  # a worker's later action: its /tmp is new
            real.cache_clear()  # type: ignore[attr-defined]
            path = real(header, hashable_cmd_line, **compile_command)
            compiled = f"{path}.gch"
        if os.path.isfile(compiled) and not os.path.islink(compiled):
            _note(requests, header, os.path.basename(path), compile_command)
        return path

    codecache._precompile_header = precompile  # type: ignore[assignment]


def _note(
    requests: str,
    header: str,
    name: str,
    compile_command: dict[str, Any],
) -> None:
    settings = {k: compile_command[k] for k in REQUEST_SETTINGS if k in compile_command}
    vec_isa = compile_command.get("vec_isa")
    request = {
        "header": header,
        "name": name,
        "settings": settings,
        "vec_isa": str(vec_isa) if vec_isa is not None and bool(vec_isa) else "",
        "environment": {k: os.environ[k] for k in ISA_ENVIRONMENT if k in os.environ},
        "configs": current_configs(),
    }
    with open(requests, "a", encoding="utf-8") as file:
        file.write(json.dumps(request, sort_keys=True) + "\n")
