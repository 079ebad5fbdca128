"""AotiJoin: a compiled program and its weights into the package a deployment loads.

    <name>.program.pt2 + <name>.layout.json + <name>.weights.safetensors -> <name>.pt2

    packaged   the program's weights blob rewritten with the weights (code constants
               kept): one .pt2 that plain aoti_load_package / AOTIModelPackageLoader load
    separate   the program without a blob; the weights file is loaded at start
               (load_constants), so a new weights file deploys without a new .pt2

Either way the package's metadata (aot_inductor.metadata: get_metadata(),
load_metadata_from_package) names where it came from: the target, the compile and
join keys, the weights' and the program's digests and the toolchain, plus the
weights' names, dtypes, shapes and strides, which the generated loaders check a
weights file against. Cheap: no compiler, one copy of the archive's records.

A package cannot hold its own digest, nor the action key kiln stores it under (the
key covers the spec, which would have to name it): it names the keys of what it was
made from instead. `kiln.compile_key` is a digest of the structure, the settings and
the toolchain (AotiCompile writes it); `kiln.join_key` one of the compile key, the
program's and the weights' digests and this join's settings. Equal keys, equal package.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

from kiln import cpu_isa
from kiln.action_specs import ConstantLayout, JoinSpec
from kiln.actions import spec as action_spec
from kiln.actions.aoti_compile import file_digest
from kiln.actions.spec import ActionFailure

# The records PyTorchFileWriter writes itself, for every archive.
_WRITER_RECORDS = ("archive_format", "archive_version", "byteorder")


def main(spec: JoinSpec) -> None:
    import torch
    from safetensors.torch import load_file
    from torch.export.pt2_archive import PT2ArchiveReader, PT2ArchiveWriter

    from kiln.actions.constant_layout import BLOB_SUFFIX, METADATA_SUFFIX, as_compiled, build_blob

    layout = ConstantLayout.read(spec.layout)
    code = [entry.fqn for entry in layout.constants if entry.kind == "constant"]
    if spec.form == "separate" and code:
        raise ActionFailure(
            f"weights = 'separate' needs every tensor of the program to be a parameter or a "
            f"buffer, and {spec.provenance.model} has {len(code)} other tensor(s) in its code "
            f"({', '.join(code[:3])}: tensor literals or plain tensor attributes); register "
            "them with register_buffer(name, tensor, persistent=False), or use "
            "weights = 'packaged'"
        )
    weights = load_file(spec.weights)
    missing = [e.fqn for e in layout.weights() if e.fqn not in weights]
    if missing:
        raise ActionFailure(
            f"the weights {spec.weights} miss {len(missing)} of the program's weights: "
            f"{', '.join(missing[:5])}"
        )
    for entry in layout.weights():
        as_compiled(entry, weights[entry.fqn])  # the dtype and shape compiled for, or a failure
        for alias in entry.aliases:
            if alias in weights and not torch.equal(weights[alias], weights[entry.fqn]):
                raise ActionFailure(
                    f"weights '{alias}' and '{entry.fqn}' differ in {spec.weights}, but the "
                    "program was compiled with them tied (one tensor)"
                )
    listed = {e.fqn for e in layout.weights()} | {a for e in layout.weights() for a in e.aliases}
    metadata = provenance(spec, layout, sorted(set(weights) - listed))

    output = Path(spec.output)
    output.parent.mkdir(parents=True, exist_ok=True)
    with PT2ArchiveReader(spec.program) as reader, PT2ArchiveWriter(str(output)) as writer:
        for record in reader.get_file_names():
            if record.startswith(".data/") or record in _WRITER_RECORDS:
                continue
            data = reader.read_bytes(record)
            if record.endswith(BLOB_SUFFIX):
                if spec.form == "separate":
                    continue
                data = build_blob(layout, weights, data)
                if not data:
                    # No constant kept (a program whose outputs read no weight):
                    # AOTInductor's loader fails to mmap an empty blob, and loads without one.
                    continue
            elif record.endswith(METADATA_SUFFIX):
                data = json.dumps({**json.loads(data), **metadata}, sort_keys=True).encode()
            writer.write_bytes(record, data)


def provenance(spec: JoinSpec, layout: ConstantLayout, unused: list[str]) -> dict[str, str]:
    """The kiln.* metadata of the package (values are strings, as AOTInductor's are)."""
    import torch

    origin = spec.provenance
    program_digest = file_digest(Path(spec.program))
    weights_digest = file_digest(Path(spec.weights))
    compile_key = _compiled_metadata(Path(spec.program)).get("kiln.compile_key", "")
    join = {
        "compile_key": compile_key,
        "program": program_digest,
        "weights": weights_digest,
        "form": spec.form,
        "target": origin.target,
    }
    toolchain = {**origin.toolchain, "torch": torch.__version__}
    return {
        "kiln.target": origin.target,
        "kiln.model": origin.model,
        "kiln.device": origin.device,
        "kiln.cpu_target": origin.cpu_target,
        # The instruction set the code was compiled for and the /proc/cpuinfo flags it
        # needs: the loaders refuse a CPU that lacks one (torch's AOTI_CPU_ISA names
        # the vector ISA alone, not the level under it).
        "kiln.cpu_isa": origin.cpu_isa or "",
        "kiln.cpu_isa_flags": " ".join(cpu_isa.isa_of(origin.cpu_isa).flags)
        if origin.cpu_isa
        else "",
        "kiln.toolchain": " ".join(f"{k}={v}" for k, v in sorted(toolchain.items())),
        "kiln.compile_key": compile_key,
        "kiln.join_key": _digest(join),
        "kiln.program_sha256": program_digest,
        "kiln.weights_form": spec.form,
        "kiln.weights_file": Path(spec.weights).name,
        "kiln.weights_sha256": weights_digest,
        # What a weights file for this package must hold: name -> [dtype, shape, strides]
        # (strides as compiled; a loader copies a tensor of other strides into them).
        "kiln.weights": json.dumps(
            {e.fqn: [e.dtype, list(e.shape), list(e.stride)] for e in layout.weights()},
            separators=(",", ":"),
        ),
        # Other names of a tied weight -> its name: a file may hold them, with equal values.
        "kiln.weights_tied": json.dumps(
            {alias: e.fqn for e in layout.weights() for alias in e.aliases},
            separators=(",", ":"),
        ),
        # Names of the weights file the program does not use (a loader skips them).
        "kiln.weights_unused": json.dumps(unused, separators=(",", ":")),
    }


def _compiled_metadata(program: Path) -> dict[str, str]:
    from torch.export.pt2_archive import PT2ArchiveReader

    from kiln.actions.constant_layout import METADATA_SUFFIX

    with PT2ArchiveReader(str(program)) as reader:
        for record in reader.get_file_names():
            if record.endswith(METADATA_SUFFIX):
                loaded: dict[str, str] = json.loads(reader.read_bytes(record))
                return loaded
    return {}


def _digest(value: object) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()


if __name__ == "__main__":
    action_spec.run(main, JoinSpec, sys.argv[1:])
