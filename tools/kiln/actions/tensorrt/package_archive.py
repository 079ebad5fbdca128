"""Where a Torch-TensorRT AOTInductor package (.pt2) keeps its engines, and its rewrite.

torch 2.13's AOTInductor (torch/_inductor/codecache.py, AotCodeCompiler.compile) saves
each TorchBind constant of the compiled graph, a TensorRT engine
(torch.classes.tensorrt.Engine) among them, as `torch._C._pickle_save(obj)` in a file of
its own, `custom_obj_<i>`, and writes `custom_objs_config.json` ({constant name:
file}) beside the wrapper library; the packager (torch/export/pt2_archive/_package.py)
puts the objects under `data/constants/` and the config under
`data/aotinductor/<model>/`. The wrapper calls the engine through the proxy executor,
which unpickles those files when the package is loaded: the engine's bytes are not
compiled into the wrapper. So a package whose engines were refit is the package of the
refittable program with its `custom_obj_<i>` records replaced; nothing is recompiled.

    engine_records(archive)           {constant name: archive record of its object}
    rewrite(source, output, replace, metadata)
                                      a copy with records replaced and kiln.* metadata
                                      merged into the model's metadata record
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

from kiln.actions.constant_layout import METADATA_SUFFIX
from kiln.actions.spec import ActionFailure

CUSTOM_OBJS_CONFIG = "custom_objs_config.json"
CONSTANTS_DIR = "data/constants/"
# The records PyTorchFileWriter writes itself, for every archive.
_WRITER_RECORDS = ("archive_format", "archive_version", "byteorder")


def engine_records(archive: Path) -> dict[str, str]:
    """{TorchBind constant name: its record}, from every model's custom_objs_config.json."""
    from torch.export.pt2_archive import PT2ArchiveReader

    found: dict[str, str] = {}
    with PT2ArchiveReader(str(archive)) as reader:
        names = set(reader.get_file_names())
        for config in sorted(n for n in names if n.endswith("/" + CUSTOM_OBJS_CONFIG)):
            for constant, file in json.loads(reader.read_bytes(config)).items():
                record = CONSTANTS_DIR + str(file)
                if record not in names:
                    raise ActionFailure(
                        f"{archive.name}: {config} names {record} for {constant}, which the "
                        "archive lacks"
                    )
                found[str(constant)] = record
    return found


def read_metadata(archive: Path) -> dict[str, str]:
    """The package's AOTInductor metadata (what get_metadata() returns)."""
    from torch.export.pt2_archive import PT2ArchiveReader

    with PT2ArchiveReader(str(archive)) as reader:
        for record in reader.get_file_names():
            if record.endswith(METADATA_SUFFIX):
                return {str(k): str(v) for k, v in json.loads(reader.read_bytes(record)).items()}
    return {}


def rewrite(
    source: Path,
    output: Path,
    *,
    replace: Mapping[str, bytes],
    metadata: Mapping[str, str],
) -> None:
    """Copy the archive `source` to `output`, with the records in `replace` given new
    bytes and `metadata` merged into each model's metadata record."""
    from torch.export.pt2_archive import PT2ArchiveReader, PT2ArchiveWriter

    # Written in place, not to a temporary name: PyTorchFileWriter names the archive's
    # top folder after the file (an action's outputs are kept only when it succeeds).
    output.parent.mkdir(parents=True, exist_ok=True)
    with PT2ArchiveReader(str(source)) as reader, PT2ArchiveWriter(str(output)) as writer:
        records = reader.get_file_names()
        missing = sorted(set(replace) - set(records))
        if missing:
            raise ActionFailure(f"{source.name} has no record {', '.join(missing)}")
        for record in records:
            if record.startswith(".data/") or record in _WRITER_RECORDS:
                continue
            data = replace.get(record)
            if data is None:
                data = reader.read_bytes(record)
                if record.endswith(METADATA_SUFFIX):
                    data = json.dumps({**json.loads(data), **metadata}, sort_keys=True).encode()
            writer.write_bytes(record, data)
