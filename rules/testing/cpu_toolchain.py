"""The CPU benchmarks run on (model name and core count): what a timing's key names, so a
latency measured on one machine is never served on another."""

from __future__ import annotations

import os

from kiln.host_facts import HostFacts, Toolchain


def _cpu(host: HostFacts) -> tuple[str, int]:
    del host
    model = "unknown"
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as info:
            for line in info:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return model, os.cpu_count() or 1


def _example() -> tuple[str, int]:
    return "Example CPU", 8


CPU: Toolchain[tuple[str, int]] = Toolchain(
    "cpu",
    "this machine's CPU model and core count (benchmark timings are keyed on them)",
    _cpu,
    example=_example,
)
