"""The TensorRT toolchain: what this machine offers TensorRT builds, found in a child
interpreter. trt_engine and trt_windows_engine declare it (TENSORRT) and read
it as ctx.toolchain(TENSORRT); `kiln info toolchains` prints it.

kiln itself never imports torch. To learn whether a trt_engine can build
here, a child process of the interpreter that runs the actions, with the
environment the actions get, imports torch and torch_tensorrt and prints one
JSON line: torch and CUDA versions, the GPUs torch sees (name, compute
capability), the torch_tensorrt version and flavour (standard TensorRT, or
TensorRT-RTX: distribution torch-tensorrt-rtx, whose `tensorrt` is
tensorrt_rtx), the TensorRT version,
`torch_tensorrt.ENABLED_FEATURES.windows_cross_compile`, and whether it can refit
engines (ENABLED_FEATURES.refit and torch_tensorrt.dynamo.refit_module_weights).

That costs seconds (torch plus torch_tensorrt), so the result is cached in
kiln's cache home (`$XDG_CACHE_HOME/kiln/probes/`), keyed by the interpreter,
the environment, the installed versions of the torch, TensorRT and NVIDIA
distributions, and the GPUs nvidia-smi lists: installing or upgrading any of
them, or another GPU, probes again. A probe that crashed or timed out is not
cached.

Faking it (tests, and machines where the probe cannot run): set
KILN_TRT_PROBE_JSON to a JSON file holding the fields of Probe; it is read
instead of running anything, and nothing is cached. Tests may also
monkeypatch probe() itself.

preflight() turns a probe into the reason a target cannot build here (what
is missing, what to install), or None.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import subprocess
import sys
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from kiln import machine
from kiln.action_graph import PYTHON_ACTION_ENV
from kiln.cache.atomic import write_atomic
from kiln.host_facts import HostFacts, Toolchain
from kiln.machine import Gpu

FAKE_ENV = "KILN_TRT_PROBE_JSON"
FORMAT = 1
TIMEOUT_S = 300.0  # importing torch_tensorrt cold, on a slow disk, can take a minute
MARKER = "kiln-trt-probe: "
# Distributions whose versions key the cached probe (normalized name prefixes).
KEYED_DISTRIBUTIONS = ("torch", "tensorrt", "nvidia", "dllist")

TARGET_PLATFORMS = ("linux_x86_64", "windows_x86_64")

# The child's program: everything it learns goes into one JSON line after MARKER.
PROBE_CODE = r"""
import importlib.metadata as md, json, platform, sys
out = {"python": platform.python_version(), "executable": sys.executable,
       "os": platform.system().lower(), "arch": platform.machine(), "gpus": []}
def dist_of(top):
    try:
        names = md.packages_distributions().get(top) or []
    except Exception:
        return None
    return names[0] if names else None
try:
    import torch
    out["torch"] = torch.__version__
    out["cuda"] = torch.version.cuda
    if torch.cuda.is_available():
        for i in range(torch.cuda.device_count()):
            p = torch.cuda.get_device_properties(i)
            out["gpus"].append({"name": p.name, "compute_capability": f"{p.major}.{p.minor}",
                                "memory_mb": int(p.total_memory) // 2**20})
except BaseException as e:
    out["torch_error"] = f"{type(e).__name__}: {e}".strip()[:500]
if "torch" in out:
    try:
        import torch_tensorrt
        out["torch_tensorrt"] = torch_tensorrt.__version__
        out["torch_tensorrt_dist"] = dist_of("torch_tensorrt")
        features = torch_tensorrt.ENABLED_FEATURES
        rtx = bool(getattr(features, "tensorrt_rtx", False))
        out["flavour"] = "rtx" if rtx else "standard"
        out["windows_cross_compile"] = bool(getattr(features, "windows_cross_compile", False))
        dynamo = getattr(torch_tensorrt, "dynamo", None)
        out["refit"] = bool(getattr(features, "refit", False)) and \
            getattr(dynamo, "refit_module_weights", None) is not None
        import tensorrt
        out["tensorrt"] = str(tensorrt.__version__)
        out["tensorrt_dist"] = dist_of("tensorrt_rtx_libs" if rtx else "tensorrt_libs") or \
            dist_of("tensorrt_rtx" if rtx else "tensorrt")
    except BaseException as e:
        out["torch_tensorrt_error"] = f"{type(e).__name__}: {e}".strip()[:500]
sys.stdout.flush()
print("\n" + MARKER + json.dumps(out), flush=True)
""".replace("MARKER", repr(MARKER))


@dataclass(frozen=True)
class Probe:
    """What the child interpreter found; None where it found nothing."""

    python: str = ""
    executable: str = ""
    os: str = ""
    arch: str = ""
    torch: str | None = None
    cuda: str | None = None  # torch.version.cuda: None for a CPU-only build
    gpus: tuple[Gpu, ...] = ()
    torch_tensorrt: str | None = None
    torch_tensorrt_dist: str | None = None  # "torch_tensorrt" or "torch_tensorrt_rtx"
    flavour: str | None = None  # "standard" | "rtx"
    tensorrt: str | None = None
    tensorrt_dist: str | None = None
    windows_cross_compile: bool = False
    refit: bool = False  # refit_module_weights is there and ENABLED_FEATURES.refit is set
    torch_error: str | None = None
    torch_tensorrt_error: str | None = None
    probe_error: str | None = None  # the probe itself failed (crash, timeout)
    source: str = field(default="probe", compare=False)  # "probe" | "cache" | "fake:<path>"

    @staticmethod
    def from_json(data: dict[str, Any], source: str = "probe") -> Probe:
        known = {f.name for f in fields(Probe)} - {"gpus", "source"}
        values = {k: v for k, v in data.items() if k in known}
        gpus = tuple(
            Gpu(str(g["name"]), str(g["compute_capability"]), int(g.get("memory_mb", 0)))
            for g in data.get("gpus") or ()
        )
        return Probe(**values, gpus=gpus, source=source)

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data.pop("source")
        return data

    @property
    def gpu(self) -> Gpu | None:
        """The GPU an action builds on: the first one torch sees."""
        return self.gpus[0] if self.gpus else None


def probe(python: str = sys.executable, env: dict[str, str] | None = None) -> Probe:
    """The probe of `python` run with `env` (the actions' environment), cached."""
    fake = os.environ.get(FAKE_ENV)
    if fake:
        return Probe.from_json(json.loads(Path(fake).read_text()), source=f"fake:{fake}")
    env = dict(env if env is not None else os.environ)
    cache = _cache_file(python, env)
    try:
        return Probe.from_json(json.loads(cache.read_text()), source="cache")
    except (OSError, ValueError, KeyError, TypeError):
        pass
    result = run_probe(python, env)
    if result.probe_error is None:
        # An unwritable cache only costs the next build the probe again.
        with contextlib.suppress(OSError):
            write_atomic(cache, json.dumps(result.to_json(), sort_keys=True).encode(), 0o644)
    return result


def run_probe(python: str, env: dict[str, str]) -> Probe:
    """Run the child interpreter now, uncached."""
    try:
        run = subprocess.run(
            [python, "-c", PROBE_CODE],
            env=env,
            capture_output=True,
            text=True,
            timeout=TIMEOUT_S,
            check=False,
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired:
        return Probe(probe_error=f"the probe of {python} timed out after {TIMEOUT_S:g} s")
    except OSError as error:
        return Probe(probe_error=f"cannot run {python}: {error.strerror}")
    for line in reversed(run.stdout.splitlines()):
        if line.startswith(MARKER):
            return Probe.from_json(json.loads(line[len(MARKER) :]))
    tail = (run.stderr.strip().splitlines() or ["no output"])[-1][:300]
    return Probe(probe_error=f"the probe of {python} exited with code {run.returncode}: {tail}")


def _cache_file(python: str, env: dict[str, str]) -> Path:
    dists = {
        name: version
        for name, version in machine.distributions()
        if name.startswith(KEYED_DISTRIBUTIONS)
    }
    key = json.dumps(
        {
            "format": FORMAT,
            "code": PROBE_CODE,
            "python": python,
            "version": sys.version,
            "env": sorted(env.items()),
            "dists": dists,
            "gpus": [repr(gpu) for gpu in machine.nvidia_gpus()],
            "visible": os.environ.get("CUDA_VISIBLE_DEVICES"),
        },
        sort_keys=True,
    )
    digest = hashlib.sha256(key.encode()).hexdigest()[:24]
    return _cache_home() / "probes" / f"trt-{digest}.json"


def _cache_home() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "kiln"


@dataclass(frozen=True)
class Preflight:
    """Why a TensorRT target cannot build on this machine, and what to do about it."""

    target_platform: str
    problems: tuple[str, ...]  # what is missing, each in a few words
    hint: str  # what to install

    @property
    def message(self) -> str:
        problems = "; ".join(self.problems)
        return f"cannot build a TensorRT engine for {self.target_platform} here: {problems}"


def preflight(found: Probe, target_platform: str) -> Preflight | None:
    """None if a trt_engine for `target_platform` can build here; else what is missing."""
    problems: list[str] = []
    if found.probe_error:
        problems.append(found.probe_error)
    else:
        if found.os != "linux" or found.arch.lower() not in ("x86_64", "amd64"):
            problems.append(f"the host is {found.os or '?'} {found.arch or '?'}, not Linux x86-64")
        if found.torch is None:
            problems.append(f"torch is not importable ({found.torch_error or 'unknown error'})")
        elif not found.gpus:
            if found.cuda is None:
                problems.append(f"no CUDA GPU (torch {found.torch} is a CPU-only build)")
            else:
                problems.append(f"no CUDA GPU visible to torch {found.torch} (CUDA {found.cuda})")
        if found.torch is not None and found.torch_tensorrt is None:
            why = found.torch_tensorrt_error or "unknown error"
            problems.append(f"torch_tensorrt is not importable ({why})")
        if (
            target_platform == "windows_x86_64"
            and found.torch_tensorrt is not None
            and not found.windows_cross_compile
        ):
            what = "TensorRT-RTX" if found.flavour == "rtx" else "TensorRT"
            problems.append(
                f"torch_tensorrt.ENABLED_FEATURES.windows_cross_compile is False: {what} "
                f"{found.tensorrt or '?'} has no Windows builder resource "
                "(libnvinfer_builder_resource_win.so)"
            )
    if not problems:
        return None
    return Preflight(target_platform, tuple(problems), _install_hint(found, target_platform))


def _install_hint(found: Probe, target_platform: str) -> str:
    series = ".".join((found.torch or "2.13.0").split("+")[0].split(".")[:2])
    extra = " (kiln's 'trt' extra)" if series == "2.13" else ""
    hint = (
        f"pip install torch-tensorrt=={series}.0{extra} on a Linux x86-64 machine with a CUDA "
        f"GPU and a CUDA build of torch {series} (torch-tensorrt pins torch exactly)"
    )
    if target_platform == "windows_x86_64":
        hint += (
            "; cross-compiling for Windows needs the standard TensorRT, whose Linux libraries "
            "ship the Windows builder resource: the TensorRT-RTX flavour (torch-tensorrt-rtx) "
            "cannot cross-compile for Windows"
        )
    return hint


def describe(found: Probe) -> list[tuple[str, str]]:
    """(name, value) lines for `kiln info toolchains`."""
    if found.probe_error:
        return [("probe", found.probe_error)]
    if found.torch is None:
        torch_line = f"not importable ({found.torch_error})"
    else:
        cuda = f"CUDA {found.cuda}" if found.cuda else "CPU-only build"
        torch_line = f"{found.torch} ({cuda})"
    if found.torch_tensorrt is None:
        trt_line = f"not importable ({found.torch_tensorrt_error or 'torch missing'})"
    else:
        flavour = "TensorRT-RTX" if found.flavour == "rtx" else "standard TensorRT"
        trt_line = f"{found.torch_tensorrt} ({flavour}; distribution {found.torch_tensorrt_dist})"
    gpus = (
        "; ".join(
            f"{i}: {g.name} (compute capability {g.compute_capability}, {g.memory_mb} MB)"
            for i, g in enumerate(found.gpus)
        )
        or "none"
    )
    return [
        ("python", f"{found.python} ({found.executable})"),
        ("host", f"{found.os} {found.arch}"),
        ("torch", torch_line),
        ("torch_tensorrt", trt_line),
        ("tensorrt", found.tensorrt or "-"),
        ("windows_cross_compile", "yes" if found.windows_cross_compile else "no"),
        ("refit", "yes" if found.refit else "no"),
        ("gpus", gpus),
    ]


def _resolve(host: HostFacts) -> Probe:
    return probe(host.interpreter, PYTHON_ACTION_ENV)


def _capable() -> Probe:
    """A host every TensorRT target builds on (for kiln.bazel.generate, which probes nothing)."""
    return Probe(
        python="3.11.7",
        executable="python3",
        os="linux",
        arch="x86_64",
        torch="2.13.0",
        cuda="13.0",
        gpus=(Gpu("NVIDIA H200", "9.0", 143771),),
        torch_tensorrt="2.13.0",
        torch_tensorrt_dist="torch_tensorrt",
        flavour="standard",
        tensorrt="10.14.0",
        tensorrt_dist="tensorrt",
        windows_cross_compile=True,
        source="example",
    )


TENSORRT: Toolchain[Probe] = Toolchain(
    "tensorrt",
    "torch, CUDA, the GPUs torch sees, torch_tensorrt and its flavour, TensorRT, and "
    "whether it can cross-compile for Windows: probed in the actions' interpreter",
    _resolve,
    example=_capable,
    gpu=True,
)
