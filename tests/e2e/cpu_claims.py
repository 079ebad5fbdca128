"""A package that claims an instruction set this CPU lacks: what the loaders must refuse.

Its code is the real package's; only its metadata (kiln.cpu_isa, kiln.cpu_isa_flags)
claims more. A loader that read nothing would load it and run it fine, so a test that
it is refused fails where the check is missing.
"""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

from kiln import cpu_isa

# Flags of real x86 CPUs, for where this CPU has every level of kiln's table.
LATER_FLAGS = ("amx_fp16", "amx_complex", "avx10_2", "avx512_4fmaps")


def this_cpu() -> frozenset[str]:
    return cpu_isa.cpu_flags(Path(cpu_isa.CPUINFO).read_text(encoding="utf-8"))


def claim_beyond_this_cpu(package: Path, out: Path) -> tuple[str, list[str]]:
    """`package` copied to `out` claiming an instruction set this CPU lacks:
    (its name, the flags this CPU lacks)."""
    here = this_cpu()
    lacked = [isa for isa in cpu_isa.ISAS if cpu_isa.lacking(isa.flags, here)]
    if lacked:
        name, flags = lacked[0].name, list(lacked[0].flags)
    else:
        extra = next(flag for flag in LATER_FLAGS if flag not in here)
        name, flags = f"{cpu_isa.ISAS[-1].name}+{extra}", [*cpu_isa.ISAS[-1].flags, extra]
    with zipfile.ZipFile(package) as source, zipfile.ZipFile(out, "w") as copy:
        for record in source.namelist():
            data = source.read(record)
            if record.endswith("_metadata.json") and "/aotinductor/" in record:
                metadata = json.loads(data)
                metadata.update({"kiln.cpu_isa": name, "kiln.cpu_isa_flags": " ".join(flags)})
                data = json.dumps(metadata, sort_keys=True).encode()
            copy.writestr(record, data)
    return name, cpu_isa.lacking(flags, here)
