"""The constant table of a Windows model library, read from its generated source.

On Linux kiln asks the compiled library through its C ABI
(kiln.actions.constant_layout.read_table); a PE DLL cannot be loaded here, but the
package holds the wrapper source inductor compiled it from, whose constructor fills
the same table line by line:

    constants_info_[0].name = "net_0_weight";
    constants_info_[0].data_size = 2560;
    constants_info_[0].from_folded = false;
    constants_info_[0].type = static_cast<int32_t>(torch::aot_inductor::ConstantType::Parameter);
    constants_info_[0].original_fqn = "net.0.weight";

A row missing a field fails, naming it: a torch whose wrapper reads otherwise fails
here, never with a wrong layout.
"""

from __future__ import annotations

import re
from pathlib import Path

from torch.export.pt2_archive import PT2ArchiveReader

from kiln.actions.constant_layout import MODEL_DIR, TableRow
from kiln.actions.spec import ActionFailure

_FIELD = re.compile(r"constants_info_\[(\d+)\]\.(\w+) = (.+);$")
_TYPES = {"Unknown": 0, "Parameter": 1, "Buffer": 2, "TensorConstant": 3, "FoldedConstant": 4}


def read(archive: Path) -> list[TableRow]:
    with PT2ArchiveReader(str(archive)) as reader:
        sources = [n for n in reader.get_file_names() if n.startswith(MODEL_DIR)]
        wrapper = [n for n in sources if n.endswith(".wrapper.cpp")]
        if len(wrapper) != 1:
            raise ActionFailure(f"{archive.name} holds {len(wrapper)} wrapper sources, not 1")
        text = reader.read_bytes(wrapper[0]).decode("utf-8")
    return rows(text)


def rows(source: str) -> list[TableRow]:
    fields: dict[int, dict[str, str]] = {}
    for line in source.splitlines():
        found = _FIELD.search(line.strip())
        if found:
            fields.setdefault(int(found.group(1)), {})[found.group(2)] = found.group(3)
    table = []
    for index in sorted(fields):
        row = fields[index]
        missing = [k for k in ("name", "data_size", "from_folded", "type") if k not in row]
        if missing:
            raise ActionFailure(f"constant {index} of the wrapper source lacks {missing}")
        kind = row["type"].rsplit("::", 1)[-1].rstrip(")")
        table.append(
            TableRow(
                name=_string(row["name"]),
                fqn=_string(row.get("original_fqn", row["name"])),
                from_folded=row["from_folded"] == "true",
                type=_TYPES.get(kind, 0),
                data_size=int(row["data_size"]),
            )
        )
    return table


def _string(literal: str) -> str:
    return literal.strip().removeprefix('"').removesuffix('"')
