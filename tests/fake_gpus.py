"""A stand-in nvidia-smi listing GPUs of one model, for tests on machines without any.

    bin_dir = install_fake_smi(tmp_path / "bin", count=4)   # then put bin_dir first on PATH

It answers the two questions kiln asks: `nvidia-smi -L` (index, name, UUID: the ids
the scheduler hands out) and `--query-gpu=index,name,compute_cap,memory.total`
(the model and compute capability analysis keys GPU actions on).
"""

from __future__ import annotations

from pathlib import Path

NAME = "NVIDIA H100 80GB HBM3"
COMPUTE_CAPABILITY = "9.0"


def uuid(index: int) -> str:
    return f"GPU-{index:08x}-fake-4000-8000-{index:012x}"


def install_fake_smi(bin_dir: Path, count: int) -> Path:
    bin_dir.mkdir(parents=True, exist_ok=True)
    listed = "\n".join(f"GPU {i}: {NAME} (UUID: {uuid(i)})" for i in range(count))
    queried = "\n".join(f"{i}, {NAME}, {COMPUTE_CAPABILITY}, 81559 MiB" for i in range(count))
    smi = bin_dir / "nvidia-smi"
    smi.write_text(
        "#!/bin/sh\n"
        'case "$*" in\n'
        f"  *-L*) cat <<'EOF'\n{listed}\nEOF\n  ;;\n"
        f"  *) cat <<'EOF'\n{queried}\nEOF\n  ;;\n"
        "esac\n"
    )
    smi.chmod(0o755)
    return bin_dir
