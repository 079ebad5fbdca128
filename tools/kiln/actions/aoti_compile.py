"""AotiCompile: a program's structure into an AOTInductor program whose weights are data.

    structure (<name>.structure.pt2: meta tensors for weights, kiln.actions.weights_split)
      -> placeholders in their place
      -> torch._inductor.aoti_compile_and_package(..., SPLIT_CONFIGS)
      -> <name>.program.pt2   the compiled program; its weights blob holds the placeholders
         <name>.layout.json   its constants in blob order (ConstantLayout), checked

The action's inputs hold no weight values, so a retrained model (a new weights file,
a new model_weights seed) never re-runs it: AotiJoin puts the weights in. What keeps
values out of the compiled code, measured on torch 2.13 (tests/e2e/test_weights_join.py
pins it):

- Inductor inlines small constants into kernels as literals
  (GraphLowering.can_inline_constant: 0-d tensors, 1-d tensors of <= 8 elements)
  unless `always_keep_tensor_constants`; with it each stays a constant.
- `freezing` folds weights into the graph by design: kiln sets it off (and the rule
  refuses it).
- package_constants_in_so = False with package_constants_on_disk_format =
  "binary_blob" keeps the constants out of the .so, in a blob beside it that
  AOTIModelPackageLoader loads: the one file a join rewrites.

kiln.actions.constant_layout then checks the blob against the structure, so a
setting or a torch version that folds values anyway fails here, never silently.
"""

from __future__ import annotations

import hashlib
import json
import platform
import sys
from pathlib import Path
from typing import Any

from kiln.action_specs import CompileSpec
from kiln.actions import spec as action_spec
from kiln.actions.environment import environment
from kiln.actions.errors import ActionError, summary
from kiln.actions.inductor_cache import private_inductor_cache
from kiln.actions.isa_compile import check_package, compile_env, isa_configs, pinned_vec_isa
from kiln.actions.spec import ActionFailure
from kiln.actions.temp_state import pin_temp_dirs

SPLIT_CONFIGS: dict[str, Any] = {
    "aot_inductor.package_constants_in_so": False,
    "aot_inductor.package_constants_on_disk_format": "binary_blob",
    "always_keep_tensor_constants": True,
    "freezing": False,
}
METADATA = "aot_inductor.metadata"
# For CUDA, Inductor picks among a pointwise kernel's Triton configs by timing each at
# compile time, so two compiles of one structure differ: on the H200 (2026-12-01) two
# builds of mlp_cuda had different kernels, cubins and wrapper. A package must be the same
# bytes wherever it is built (and a remote build's keys a local one's), so the one
# heuristic config, unless the target's inductor_configs ask for autotuning.
REPRODUCIBLE_CONFIGS: dict[str, dict[str, Any]] = {
    "cuda": {"triton.autotune_pointwise": False},
}
# The build machine's core count must not reach the package either. Left alone, inductor
# writes the compiling process's torch.get_num_threads() into its C++ kernels: the number
# of loop levels it parallelises, `#pragma omp parallel num_threads(N)` where N is not
# os.cpu_count(), and reduction buffers of N slots; so packages built on 1 and on 4 threads
# differed in bytes (bench/bench_thread_portability.py). A fixed count for those
# decisions, and OpenMP's own at run time (dynamic_threads: the deployment's
# OMP_NUM_THREADS or torch.set_num_threads), make one package for every build machine.
# Any device: a CUDA package's CPU kernels too. A target's inductor_configs may set them.
THREAD_CONFIGS: dict[str, Any] = {"cpp.threads": 8, "cpp.dynamic_threads": True}


def main(spec: CompileSpec) -> None:
    output = Path(spec.output).resolve()
    output.parent.mkdir(parents=True, exist_ok=True)
    with (
        private_inductor_cache(spec) as cache,
        environment(
            TORCHINDUCTOR_CACHE_DIR=str(cache / "inductor"),
            TRITON_CACHE_DIR=str(cache / "triton"),
            **compile_env(spec.cpu_isa),
        ),
    ):
        pin_temp_dirs()
        import torch
        import torch._inductor

        from kiln.actions.constant_layout import layout_of

        structure = _load(spec)
        configs = inductor_configs(spec, compile_key(spec, torch.__version__))
        try:
            with pinned_vec_isa(spec.cpu_isa):
                torch._inductor.aoti_compile_and_package(
                    structure, package_path=str(output), inductor_configs=configs
                )
        except Exception as error:
            raise ActionError(
                f"AOTInductor compilation failed: {summary(error)}{_compiler_error(error)}",
                hint="try another cpu_target or other inductor_configs of the aoti_package; "
                "--verbose_failures shows torch's whole message",
                cause=error,
            ) from error
        if spec.cpu_isa is not None:
            check_package(output, spec.cpu_isa)
        layout = layout_of(output, structure, spec.device)
    Path(spec.layout).write_text(layout.to_json(), encoding="utf-8")


def _load(spec: CompileSpec) -> Any:
    """The structure, its pytree types registered from what the export recorded (never from
    what ran before in this process); a structure torch cannot load is one ActionError."""
    import logging

    from kiln.actions import pytree_types, weights_split

    pytree_types.register_recorded(Path(spec.structure))
    # torch.export.load logs its first attempt's whole traceback before it raises.
    export_log = logging.getLogger("torch.export")
    level = export_log.level
    export_log.setLevel(logging.ERROR)
    try:
        return weights_split.load_structure(spec.structure, spec.device)
    except Exception as error:
        raise ActionError(
            f"cannot load the exported program {spec.structure}: {summary(error)}",
            hint="export it again with this toolchain (a changed torch or library); "
            "--verbose_failures shows torch's whole message",
            cause=error,
        ) from error
    finally:
        export_log.setLevel(level)


def _compiler_error(error: Exception) -> str:
    """The first `error:` line of a C++ compiler's output inside torch's message."""
    for line in str(error).splitlines():
        if "error:" in line:
            return f" ({line.strip()})"
    return ""


def inductor_configs(spec: CompileSpec, key: str) -> dict[str, Any]:
    """kiln's reproducible defaults for the device, the user's settings over them, kiln's
    split settings over those, and the compile's provenance in the package metadata (the
    join keeps it)."""
    configs = dict(spec.inductor_configs)
    metadata = configs.pop(METADATA, None) or {}
    if not isinstance(metadata, dict):
        raise ActionFailure(f"inductor_configs '{METADATA}' must be a dict of strings")
    return {
        **REPRODUCIBLE_CONFIGS.get(spec.device, {}),
        **THREAD_CONFIGS,
        **configs,
        **SPLIT_CONFIGS,
        **isa_configs(spec.cpu_isa),
        METADATA: {**{str(k): str(v) for k, v in metadata.items()}, "kiln.compile_key": key},
    }


def compile_key(spec: CompileSpec, torch_version: str) -> str:
    """What the compiled program is a function of: the structure's bytes, the settings and
    the toolchain. No paths: the same compile gives the same key wherever it runs."""
    facts = {
        "structure": file_digest(Path(spec.structure)),
        "device": spec.device,
        "cpu_target": spec.cpu_target,
        "cpu_isa": spec.cpu_isa,
        "inductor_configs": spec.inductor_configs,
        "split_configs": SPLIT_CONFIGS,
        "reproducible_configs": REPRODUCIBLE_CONFIGS.get(spec.device, {}),
        "thread_configs": THREAD_CONFIGS,
        "toolchain": {
            "torch": torch_version,
            "python": platform.python_version(),
            "machine": platform.machine(),
        },
    }
    return hashlib.sha256(json.dumps(facts, sort_keys=True).encode()).hexdigest()


def file_digest(path: Path) -> str:
    with path.open("rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


if __name__ == "__main__":
    action_spec.run(main, CompileSpec, sys.argv[1:], quiet=True)
