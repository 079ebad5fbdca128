"""GPU assignment on a host of several GPUs (issue 27), run by tools/gpu_multi_check.sh.

    python tools/gpu_multi_check.py                  # the builds still to do, then the report
    python tools/gpu_multi_check.py engines A B T..  # (internal) TensorRT outputs of two builds

A workspace (models/ plus the targets below) of GPU targets of similar cost: trt_engine of
the mlp and of ResNet-18 at two shape ranges, aoti_package(device = "cuda") of both
(MULTI_SET=mlp: four small mlp targets only, for a quick first call; MULTI_SET=mlp_cuda: its
two CUDA packages, which need no Torch-TensorRT). It is built from
empty disk caches with --gpus=1 and --gpus=N (N: the GPUs `nvidia-smi -L` lists), ROUNDS
(3) times each, alternating 1, N, 1, N, ...; each build in a workspace copy, disk cache,
output base and XDG_CACHE_HOME of its own, under $STATE (/tmp/kiln-gpu-multi), so a later
call on the same warm machine goes on where the last stopped (a build is started only when
the time left of $DEADLINE_S (520 s), less 30 s, covers 1.15 x the longest build so far;
the engine comparison waits for a call with 150 s left). During each build a thread
samples `nvidia-smi --query-compute-apps=pid,gpu_uuid` every 0.2 s.

Checks (PASS / FAIL / INFO lines, also into $OUT/summary.txt):

    build        each build's exit status
    overlap      no two GPU actions whose [action_started, action_finished] overlap name
                 the same GPU in the build events (the scheduler takes a GPU before the
                 first event and gives it back after the second)
    explain      each executed GPU action's --explain line says `ran on GPU` its event's ids
    all used     at --gpus=N, the events name every one of the N GPUs
    nvidia-smi   the GPUs that had compute processes are those the events name; every
                 process sampled ran only on GPUs its CUDA_VISIBLE_DEVICES named (read from
                 /proc where it can be); samples are matched to the action holding that
                 GPU at that time (samples no action explains are counted, not failed); a
                 persistent worker's fork (the action in it) gets its CUDA_VISIBLE_DEVICES
                 after the fork, which /proc does not show: it passes where an action held
                 that GPU then (within a second); where nvidia-smi lists no process at all
                 (a container's pid namespace), INFO: not cross-checked
    keys         every build's action keys equal (the events' `key`, by label, mnemonic and
                 outputs)
    .pt2         the aoti packages equal byte for byte in every build (else the zip members
                 that differ)
    engines      each TensorRT engine's outputs at its min/opt/max shapes (raw engine through
                 the TensorRT runtime, and the .ep through torch_tensorrt.load) equal between
                 the first --gpus=1 and the first --gpus=N build within 1e-3, each within
                 1e-3 of eager; whether the engine bytes differ is INFO
    speed-up     medians of the builds' wall times; the GPU part (the time during which any
                 GPU action ran: the union of their intervals) at 1 and at N, its speed-up,
                 against the goal 0.7 x N; sums of GPU and CPU actions' seconds, and the
                 best the GPU part could do with these targets (sum / max(sum / N, longest
                 target's GPU chain))

$OUT gets summary.txt, results.json, builds.log (every build's output), events.tar.gz
(events, nvidia-smi samples), engines.log, env.log. Exit 1 if a check failed.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tarfile
import threading
import time
import zipfile
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
TOLERANCE = 1e-3
GOAL = 0.7  # the GPU part's speed-up at --gpus=N: at least GOAL x N

# cpu_target = "native": the GPU machine's torch 2.11 cannot compile for x86-64-v3
# (tools/gpu_ray_check.py says why).
FULL_BUILD = """
trt_engine(name = "mlp_trt_multi", model = ":mlp", platform = "linux_x86_64")

trt_engine(
    name = "resnet_trt_small",
    model = ":resnet",
    platform = "linux_x86_64",
    inputs = [{"name": "image", "min": [1, 3, 224, 224], "opt": [2, 3, 224, 224],
               "max": [4, 3, 224, 224]}],
)

trt_engine(
    name = "resnet_trt_large",
    model = ":resnet",
    platform = "linux_x86_64",
    inputs = [{"name": "image", "min": [4, 3, 224, 224], "opt": [8, 3, 224, 224],
               "max": [16, 3, 224, 224]}],
)

aoti_package(name = "mlp_cuda", model = ":mlp", device = "cuda", cpu_target = "native")

# rtol = atol = 1e-3: convolutions on the GPU (TF32, other algorithms) are further from
# eager than the mlp's 1e-4; the check here is the same bytes in every build.
aoti_package(name = "resnet_cuda", model = ":resnet", device = "cuda", cpu_target = "native",
             rtol = 1e-3, atol = 1e-3)
"""
MLP_BUILD = """
trt_engine(name = "mlp_trt_multi", model = ":mlp", platform = "linux_x86_64")

trt_engine(
    name = "mlp_trt_wide",
    model = ":mlp",
    platform = "linux_x86_64",
    inputs = [{"name": "x", "min": [16, 10], "opt": [32, 10], "max": [64, 10]}],
)

aoti_package(name = "mlp_cuda", model = ":mlp", device = "cuda", cpu_target = "native")

aoti_package(name = "mlp_cuda_sep", model = ":mlp", device = "cuda", cpu_target = "native",
             weights = "separate")
"""
# The build loop's smoke test on a machine without GPUs (tests/e2e/test_gpu_multi_check_smoke.py:
# a stand-in nvidia-smi that reports the processes given its GPUs as compute processes).
SMOKE_BUILD = "".join(
    f"""
genrule(name = "busy{i}", outs = ["busy{i}.txt"], gpus = 1,
        cmd = "sleep 1.5; echo $${{CUDA_VISIBLE_DEVICES}} > $@")
"""
    for i in range(4)
)
SETS: dict[str, tuple[str, tuple[str, ...], tuple[str, ...], tuple[str, ...]]] = {
    # name: (BUILD text added to models/BUILD, trt_engine targets, aoti_package targets,
    # other targets)
    "full": (
        FULL_BUILD,
        ("mlp_trt_multi", "resnet_trt_small", "resnet_trt_large"),
        ("mlp_cuda", "resnet_cuda"),
        (),
    ),
    "mlp": (MLP_BUILD, ("mlp_trt_multi", "mlp_trt_wide"), ("mlp_cuda", "mlp_cuda_sep"), ()),
    # The CUDA packages of "mlp" only: one device call, no TensorRT-RTX bundle to unpack.
    "mlp_cuda": (MLP_BUILD, (), ("mlp_cuda", "mlp_cuda_sep"), ()),
    "smoke": (SMOKE_BUILD, (), (), tuple(f"busy{i}" for i in range(4))),
}


# -- the pure logic (tests/unit/tools/test_gpu_multi_check.py) ---------------------------


@dataclasses.dataclass(frozen=True)
class Interval:
    """One action of a build, from its action_started and action_finished events."""

    label: str
    mnemonic: str
    status: str
    key: str
    outputs: tuple[str, ...]
    gpus: tuple[str, ...]
    start_ms: int
    end_ms: int
    seconds: float

    @property
    def ident(self) -> str:
        """Names the action across builds (keys are what is compared)."""
        return f"{self.mnemonic} {self.label} -> {','.join(self.outputs)}"


def read_events(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def action_intervals(events: Iterable[dict[str, Any]]) -> list[Interval]:
    """Each action_finished event with the start of its action: the earliest unmatched
    action_started of the same label and mnemonic (started events name no outputs; two
    FileWrites of one target may pair crosswise, GPU actions of one target have mnemonics
    of their own). Without a started event the start is the end less `seconds`."""
    started: dict[tuple[str, str], list[int]] = {}
    intervals = []
    for e in sorted(
        events, key=lambda e: (int(e.get("time_ms", 0)), e.get("type") != "action_started")
    ):
        kind = e.get("type")
        ident = (str(e.get("label")), str(e.get("mnemonic")))
        if kind == "action_started":
            started.setdefault(ident, []).append(int(e["time_ms"]))
        elif kind == "action_finished":
            end = int(e["time_ms"])
            waiting = started.get(ident)
            seconds = float(e.get("seconds") or 0.0)
            start = waiting.pop(0) if waiting else end - int(seconds * 1000)
            intervals.append(
                Interval(
                    label=ident[0],
                    mnemonic=ident[1],
                    status=str(e.get("status")),
                    key=str(e.get("key") or ""),
                    outputs=tuple(str(o) for o in e.get("outputs") or ()),
                    gpus=tuple(str(g) for g in e.get("gpus") or ()),
                    start_ms=start,
                    end_ms=end,
                    seconds=seconds,
                )
            )
    return intervals


def gpu_actions(intervals: Iterable[Interval]) -> list[Interval]:
    """The actions that ran here holding GPUs."""
    return [i for i in intervals if i.gpus and i.status != "cached"]


def overlaps(intervals: Iterable[Interval]) -> list[str]:
    """Pairs of actions that held the same GPU at once (touching ends are no overlap)."""
    held = sorted(gpu_actions(intervals), key=lambda i: (i.start_ms, i.end_ms))
    found = []
    for n, a in enumerate(held):
        for b in held[n + 1 :]:
            if b.start_ms >= a.end_ms:
                break
            shared = sorted(set(a.gpus) & set(b.gpus))
            if shared:
                found.append(
                    f"{a.mnemonic} {a.label} [{a.start_ms}, {a.end_ms}] and {b.mnemonic} "
                    f"{b.label} [{b.start_ms}, {b.end_ms}] both on {', '.join(shared)}"
                )
    return found


def explain_mismatches(intervals: Iterable[Interval], log: str) -> list[str]:
    """Executed GPU actions whose `--explain` line does not say `ran on GPU <their ids>`."""
    wrong = []
    for i in gpu_actions(intervals):
        if i.status != "executed":
            continue
        line = rf"EXPLAIN: {re.escape(i.mnemonic)} {re.escape(i.label)}: .*; ran on GPU "
        if not re.search(line + re.escape(",".join(i.gpus)) + r"$", log, re.MULTILINE):
            wrong.append(f"{i.mnemonic} {i.label} (events: {','.join(i.gpus)})")
    return wrong


def gpus_named(intervals: Iterable[Interval]) -> set[str]:
    return {g for i in gpu_actions(intervals) for g in i.gpus}


def union_seconds(spans: Iterable[tuple[int, int]]) -> float:
    """The length of the union of [start_ms, end_ms] spans, in seconds."""
    total = 0
    end = None
    for lo, hi in sorted(spans):
        if end is None or lo > end:
            total += hi - lo
            end = hi
        elif hi > end:
            total += hi - end
            end = hi
    return total / 1000


def gpu_part(intervals: Sequence[Interval]) -> dict[str, Any]:
    """How much of a build was GPU work: the union of the GPU actions' intervals (the GPU
    part's wall time), the sums of GPU and CPU actions' seconds, and each target's GPU
    chain (its GPU actions' seconds: a target's actions run one after another)."""
    ran = [i for i in intervals if i.status != "cached"]
    gpu = gpu_actions(ran)
    cpu = [i for i in ran if not i.gpus]
    chains: dict[str, float] = {}
    for i in gpu:
        chains[i.label] = chains.get(i.label, 0.0) + i.seconds
    return {
        "gpu_busy_s": round(union_seconds((i.start_ms, i.end_ms) for i in gpu), 3),
        "gpu_sum_s": round(sum(i.seconds for i in gpu), 3),
        "cpu_sum_s": round(sum(i.seconds for i in cpu), 3),
        "cpu_busy_s": round(union_seconds((i.start_ms, i.end_ms) for i in cpu), 3),
        "gpu_chains_s": {k: round(v, 3) for k, v in sorted(chains.items())},
    }


def best_speedup(gpu_sum: float, chains: dict[str, float], n_gpus: int) -> float:
    """The most N GPUs could shorten GPU work of `gpu_sum` seconds whose longest target
    chain is max(chains): sum / max(sum / N, longest chain) (0 without GPU work)."""
    if gpu_sum <= 0:
        return 0.0
    return gpu_sum / max(gpu_sum / max(n_gpus, 1), max(chains.values(), default=0.0))


def speedup(one: Sequence[float], many: Sequence[float]) -> float | None:
    """median(one) / median(many); None without figures for both."""
    if not one or not many:
        return None
    below = statistics.median(many)
    return statistics.median(one) / below if below > 0 else None


def goal_met(gpu_speedup: float | None, n_gpus: int) -> bool:
    return gpu_speedup is not None and gpu_speedup >= GOAL * n_gpus


def action_keys(intervals: Iterable[Interval]) -> dict[str, str]:
    return {i.ident: i.key for i in intervals}


def keys_of(actions: Iterable[dict[str, Any]]) -> dict[str, str]:
    """action_keys of the actions as results.json holds them (Interval as a dict)."""
    return action_keys(
        Interval(**{**a, "outputs": tuple(a["outputs"]), "gpus": tuple(a["gpus"])}) for a in actions
    )


def compare_keys(first: dict[str, str], other: dict[str, str]) -> list[str]:
    """What differs between two builds' action keys: missing actions and other keys."""
    differences = []
    for ident in sorted(set(first) | set(other)):
        a, b = first.get(ident), other.get(ident)
        if a is None or b is None:
            differences.append(f"{ident}: only in the {'second' if a is None else 'first'}")
        elif a != b:
            differences.append(f"{ident}: {a[:16]} != {b[:16]}")
    return differences


def parse_compute_apps(text: str) -> list[tuple[int, str]]:
    """`nvidia-smi --query-compute-apps=pid,gpu_uuid --format=csv,noheader` -> (pid, uuid)."""
    apps = []
    for line in text.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) >= 2 and parts[0].isdigit() and parts[1]:
            apps.append((int(parts[0]), parts[1]))
    return apps


def visible_uuids(value: str | None, listed: Sequence[str]) -> set[str] | None:
    """The GPUs a CUDA_VISIBLE_DEVICES value names (indices as nvidia-smi numbers them,
    UUIDs or their prefixes); None when the variable was not set or not readable."""
    if value is None:
        return None
    names = set()
    for entry in (e.strip() for e in value.split(",")):
        if not entry:
            continue
        if entry.isdigit():
            if int(entry) < len(listed):
                names.add(listed[int(entry)])
        else:
            matches = {u for u in listed if u.startswith(entry)}
            names.update(matches or {entry})
    return names


WORKER = "kiln.workers.main"  # in a persistent worker's command line, and its forks'
_SLACK_MS = 1000  # a sample's time is taken before nvidia-smi runs; events are written after


def attribute_samples(
    samples: Sequence[dict[str, Any]], intervals: Sequence[Interval], listed: Sequence[str]
) -> dict[str, Any]:
    """nvidia-smi's samples ({t_ms, pid, gpu, visible?, cmd?}) against the events: the GPUs
    seen, each pid's GPUs, which action held the GPU at each sample, and the processes seen
    on a GPU their CUDA_VISIBLE_DEVICES did not name."""
    gpu = gpu_actions(intervals)
    seen: set[str] = set()
    by_pid: dict[int, set[str]] = {}
    per_action: dict[str, int] = {}
    unexplained = 0
    strays = []
    for s in samples:
        uuid, pid, t = str(s["gpu"]), int(s["pid"]), int(s["t_ms"])
        seen.add(uuid)
        by_pid.setdefault(pid, set()).add(uuid)
        holders = [i for i in gpu if uuid in i.gpus and i.start_ms <= t <= i.end_ms]
        if holders:
            for i in holders:
                name = f"{i.mnemonic} {i.label}"
                per_action[name] = per_action.get(name, 0) + 1
        else:
            unexplained += 1
        if WORKER in s.get("cmd", ""):
            # An action forked from a worker: its CUDA_VISIBLE_DEVICES is not in /proc.
            if not [
                i
                for i in gpu
                if uuid in i.gpus and i.start_ms - _SLACK_MS <= t <= i.end_ms + _SLACK_MS
            ]:
                strays.append(f"pid {pid} (a worker's fork) on {uuid}, held by no action")
            continue
        allowed = visible_uuids(s.get("visible"), listed)
        if allowed is not None and uuid not in allowed:
            strays.append(f"pid {pid} ({s.get('cmd', '?')}) on {uuid}, given {s['visible']!r}")
    return {
        "gpus_seen": sorted(seen),
        "pids": {str(p): sorted(g) for p, g in sorted(by_pid.items())},
        "samples_per_action": dict(sorted(per_action.items())),
        "samples": len(samples),
        "samples_no_action_held": unexplained,
        "strays": sorted(set(strays)),
    }


def zip_differences(a: Path, b: Path) -> list[str]:
    """The members of two zip files (a .pt2) whose bytes differ, or that only one has."""
    with zipfile.ZipFile(a) as za, zipfile.ZipFile(b) as zb:
        ia = {i.filename: i.CRC for i in za.infolist()}
        ib = {i.filename: i.CRC for i in zb.infolist()}
    return sorted(n for n in set(ia) | set(ib) if ia.get(n) != ib.get(n))


def file_digests(root: Path) -> dict[str, str]:
    """sha256 of every file under root, by relative path."""
    digests = {}
    for path in sorted(root.rglob("*")):
        if path.is_file():
            digests[str(path.relative_to(root))] = hashlib.sha256(path.read_bytes()).hexdigest()
    return digests


def build_order(rounds: int, n_gpus: int) -> list[int]:
    """--gpus for each build, alternating: 1, N, 1, N, ..."""
    return [g for _ in range(rounds) for g in (1, n_gpus)]


# -- the run on the GPU machine ---------------------------------------------------------

OUT = Path(os.environ.get("OUT") or Path.cwd() / "gpu-multi-check-out").resolve()
STATE = Path(os.environ.get("STATE") or "/tmp/kiln-gpu-multi")
START = time.monotonic()
DEADLINE = float(os.environ.get("DEADLINE_S", "520"))
MARGIN_S = 30.0  # kept after a build for the checks (the engine comparison may wait)
ENGINES_S = 150.0  # what the engine comparison needs left, else it waits for the next call
failures: list[str] = []
running: list[subprocess.Popen[bytes]] = []  # the kiln build under way, for on_term


def on_term(signum: int, frame: object) -> None:
    """SIGTERM (the shell script's `timeout`): stop the build under way by its PID (kiln
    stops its actions and workers), then exit."""
    for process in running:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
    raise SystemExit(124)


def report(verdict: str, what: str, detail: str = "") -> None:
    if verdict == "FAIL":
        failures.append(what)
    line = f"{verdict:<5} {what}" + (f": {detail}" if detail else "")
    print(line, flush=True)
    with (OUT / "summary.txt").open("a") as summary:
        summary.write(line + "\n")


def left() -> float:
    return DEADLINE - (time.monotonic() - START)


def listed_gpus() -> list[str]:
    try:
        done = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, check=False)
    except OSError:  # no nvidia-smi: no GPU listed
        return []
    return re.findall(r"^GPU \d+: .*\(UUID: (\S+)\)", done.stdout, re.MULTILINE)


class Sampler(threading.Thread):
    """nvidia-smi's compute processes every `period` s, with each new pid's command line
    and CUDA_VISIBLE_DEVICES from /proc (where this user may read them)."""

    def __init__(self, period: float = 0.2) -> None:
        super().__init__(daemon=True)
        self.period = period
        self.samples: list[dict[str, Any]] = []
        self.errors = 0
        self._stop_event = threading.Event()
        self._known: dict[int, tuple[str | None, str]] = {}

    def _process(self, pid: int) -> tuple[str | None, str]:
        if pid not in self._known:
            visible, cmd = None, "?"
            try:
                cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()[:200]
                for entry in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0"):
                    if entry.startswith(b"CUDA_VISIBLE_DEVICES="):
                        visible = entry.split(b"=", 1)[1].decode()
            except OSError:
                pass
            self._known[pid] = (visible, cmd)
        return self._known[pid]

    def run(self) -> None:
        while not self._stop_event.is_set():
            t = int(time.time() * 1000)
            try:
                done = subprocess.run(
                    ["nvidia-smi", "--query-compute-apps=pid,gpu_uuid", "--format=csv,noheader"],
                    capture_output=True, text=True, timeout=10, check=False,
                )  # fmt: skip
                for pid, uuid in parse_compute_apps(done.stdout):
                    visible, cmd = self._process(pid)
                    sample: dict[str, Any] = {"t_ms": t, "pid": pid, "gpu": uuid, "cmd": cmd}
                    if visible is not None:
                        sample["visible"] = visible
                    self.samples.append(sample)
            except (OSError, subprocess.SubprocessError):
                self.errors += 1
            self._stop_event.wait(self.period)

    def stop(self) -> None:
        self._stop_event.set()
        self.join(timeout=15)


def make_workspace(root: Path, extra: str) -> None:
    shutil.rmtree(root, ignore_errors=True)
    shutil.copytree(REPO / "models", root / "models", ignore=shutil.ignore_patterns("kiln-out"))
    (root / "WORKSPACE").write_text("")
    build = (REPO / "models" / "BUILD").read_text()
    (root / "models" / "BUILD").write_text(build + extra)


def run_build(
    index: int, gpus: int, targets: Sequence[str], extra: str, timeout: float
) -> dict[str, Any]:
    """One build from nothing: its own workspace copy, disk cache, output base, XDG home."""
    name = f"build{index}-gpus{gpus}"
    base = STATE / name
    shutil.rmtree(base, ignore_errors=True)
    ws = base / "ws"
    make_workspace(ws, extra)
    events = base / "events.json"
    env = {k: v for k, v in os.environ.items() if k != "CUDA_VISIBLE_DEVICES"}
    env["XDG_CACHE_HOME"] = str(base / "xdg")
    preload = os.environ.get("KILN_ACTION_PRELOAD", "")
    argv = [sys.executable, "-m", "kiln", f"--output_base={base / 'output-base'}", "build"]
    argv += [f"//models:{t}" for t in targets]
    argv += [
        f"--gpus={gpus}", f"--disk_cache={base / 'cache'}", f"--build_event_json_file={events}",
        "--explain", "--verbose_failures", "--keep_going",
    ]  # fmt: skip
    if preload:
        argv.append(f"--action_env=LD_PRELOAD={preload}")
    argv += os.environ.get("KILN_FLAGS", "").split()  # e.g. --jobs=8
    sampler = Sampler()
    with (base / "build.log").open("w") as log:
        log.write(" ".join(argv) + "\n")
        log.flush()
        sampler.start()
        started = time.monotonic()
        process = subprocess.Popen(argv, cwd=ws, env=env, stdout=log, stderr=subprocess.STDOUT)
        running.append(process)
        try:
            code = process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            process.terminate()  # kiln stops its actions and workers on SIGTERM
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
            code = 124
        finally:
            running.remove(process)
        wall = time.monotonic() - started
        sampler.stop()
    (base / "smi-samples.json").write_text(json.dumps(sampler.samples))
    return {
        "name": name, "gpus": gpus, "exit": code, "wall_s": round(wall, 3),
        "smi_errors": sampler.errors,
    }  # fmt: skip


def load_state() -> dict[str, Any]:
    path = STATE / "state.json"
    return json.loads(path.read_text()) if path.exists() else {"builds": []}


def save_state(state: dict[str, Any]) -> None:
    (STATE / "state.json").write_text(json.dumps(state, indent=2, sort_keys=True))


def builds_step(state: dict[str, Any], n_gpus: int, targets: Sequence[str], extra: str) -> int:
    """Runs the builds still to do while time is left; returns how many are left."""
    order = build_order(int(os.environ.get("ROUNDS", "3")), n_gpus)
    while len(state["builds"]) < len(order):
        index = len(state["builds"])
        gpus = order[index]
        walls = [b["wall_s"] for b in state["builds"]]
        need = 1.15 * max(walls) if walls else 60.0
        if left() - MARGIN_S < need:
            report(
                "INFO", "builds left for the next call",
                f"{len(order) - index} (next: --gpus={gpus}; {left():.0f} s left, the longest "
                f"build took {max(walls, default=0):.0f} s)",
            )  # fmt: skip
            return len(order) - index
        print(f"-- build {index}: --gpus={gpus}", flush=True)
        record = run_build(index, gpus, targets, extra, timeout=left() - MARGIN_S)
        state["builds"].append(record)
        save_state(state)
        report(
            "PASS" if record["exit"] == 0 else "FAIL",
            f"{record['name']} built",
            f"exit {record['exit']}, {record['wall_s']:.1f} s",
        )
        if record["exit"] == 124:
            report(
                "INFO", "a build cut off at the call's time limit is kept as failed",
                "remove $STATE to start over; MULTI_SET=mlp builds less",
            )  # fmt: skip
    return 0


def check_build(record: dict[str, Any], listed: Sequence[str]) -> dict[str, Any]:
    base = STATE / record["name"]
    intervals = action_intervals(read_events(base / "events.json"))
    samples = json.loads((base / "smi-samples.json").read_text())
    name, gpus = record["name"], record["gpus"]
    found = overlaps(intervals)
    report(
        "FAIL" if found else "PASS", f"{name}: no GPU held by two actions at once", "; ".join(found)
    )
    log = (base / "build.log").read_text(errors="replace") if (base / "build.log").exists() else ""
    wrong = explain_mismatches(intervals, log)
    report(
        "FAIL" if wrong else "PASS",
        f"{name}: each GPU action's --explain line names the GPUs of its event",
        "; ".join(wrong[:5]),
    )
    named = gpus_named(intervals)
    want = set(listed[:gpus])
    report(
        "PASS" if named == want else "FAIL",
        f"{name}: GPUs the events name are the {gpus} of --gpus={gpus}",
        ", ".join(sorted(named)),
    )
    seen = attribute_samples(samples, intervals, listed)
    readable = len({s["pid"] for s in samples if s.get("cmd", "?") != "?"})
    if not samples:
        # In a container nvidia-smi may list no process (another pid namespace): then the
        # events alone say where each action ran.
        report(
            "INFO", f"{name}: nvidia-smi listed no compute process during the build",
            f"GPUs not cross-checked; {record['smi_errors']} nvidia-smi errors",
        )  # fmt: skip
    else:
        report(
            "PASS" if set(seen["gpus_seen"]) == named else "FAIL",
            f"{name}: GPUs with compute processes (nvidia-smi) = GPUs the events name",
            f"seen {', '.join(seen['gpus_seen'])}",
        )
        report(
            "FAIL" if seen["strays"] else "PASS",
            f"{name}: each process only on GPUs its CUDA_VISIBLE_DEVICES names",
            "; ".join(seen["strays"][:5]),
        )
        report(
            "INFO", f"{name}: samples",
            f"{seen['samples']} ({seen['samples_no_action_held']} while no action held the GPU: "
            f"idle workers), {len(seen['pids'])} pids, {readable} of them in this /proc",
        )  # fmt: skip
    for i in gpu_actions(intervals):
        print(f"      {i.mnemonic} {i.label}: {i.seconds:.1f} s on {', '.join(i.gpus)}")
    return {
        **record,
        "part": gpu_part(intervals),
        "actions": [dataclasses.asdict(i) for i in intervals],
        "smi": seen,
    }


def compare_outputs(
    checked: Sequence[dict[str, Any]], trt: Sequence[str], aoti: Sequence[str]
) -> dict[str, Any]:
    """Keys of every build that succeeded against the first; .pt2 bytes; TensorRT outputs
    and bytes. (A failed build has its FAIL line already.)"""
    failed = [b["name"] for b in checked if b["exit"] != 0]
    checked = [b for b in checked if b["exit"] == 0]
    if failed:
        report("INFO", "left out of the comparisons (failed)", ", ".join(failed))
    if not checked:
        report("FAIL", "outputs compared", "no build succeeded")
        return {}
    first = checked[0]
    keys0 = keys_of(first["actions"])
    key_differences = {}
    for other in checked[1:]:
        differing = compare_keys(keys0, keys_of(other["actions"]))
        if differing:
            key_differences[other["name"]] = differing
    report(
        "FAIL" if key_differences else "PASS",
        f"action keys equal in all {len(checked)} builds ({len(keys0)} actions)",
        "; ".join(f"{n}: {d[:3]}" for n, d in key_differences.items()),
    )
    outs = {b["name"]: STATE / b["name"] / "ws" / "kiln-out" for b in checked}
    digests = {n: file_digests(p) if p.exists() else {} for n, p in outs.items()}
    d0 = digests[first["name"]]
    differing_files = sorted(
        {f for d in digests.values() for f in set(d) | set(d0) if d.get(f) != d0.get(f)}
    )
    for target in aoti:
        rel = f"models/{target}.pt2"
        wrong = [n for n, d in digests.items() if rel not in d or d[rel] != d0.get(rel)]
        detail = ""
        if wrong and rel in d0 and (outs[wrong[0]] / rel).exists():
            members = zip_differences(outs[first["name"]] / rel, outs[wrong[0]] / rel)
            detail = f"differs in {', '.join(wrong)}; members: {', '.join(members[:8])}"
        elif wrong:
            detail = f"missing or different in {', '.join(wrong)}"
        report(
            "FAIL" if wrong or rel not in d0 else "PASS",
            f"{rel} equal byte for byte in every build",
            detail,
        )
    engines = [f for f in differing_files if ".engines/" in f]
    if trt:
        report(
            "INFO", "TensorRT engine bytes",
            f"differ between builds: {', '.join(engines)}" if engines else "equal in every build",
        )  # fmt: skip
    others = [f for f in differing_files if ".engines/" not in f and not f.endswith(".pt2")]
    if others:
        report("INFO", "other outputs that differ between builds", ", ".join(others[:12]))
    result: dict[str, Any] = {
        "key_differences": key_differences,
        "differing_files": differing_files,
    }
    result["engines"] = compare_engines(checked, outs, trt)
    return result


def compare_engines(
    checked: Sequence[dict[str, Any]], outs: dict[str, Path], trt: Sequence[str]
) -> dict[str, Any] | None:
    """The engines of the first --gpus=1 and the first --gpus=N build that succeeded, run in
    a process of their own (engines_main) on the same inputs."""
    one = next((b for b in checked if b["gpus"] == 1 and b["exit"] == 0), None)
    many = next((b for b in checked if b["gpus"] != 1 and b["exit"] == 0), None)
    if not trt:
        return None
    if not (one and many):
        report("FAIL", "engine outputs compared", "no successful build at --gpus=1 and at --gpus=N")
        return None
    if left() < ENGINES_S:
        report("INFO", "engine outputs: compared by the next call", f"{left():.0f} s left")
        return {"deferred": True}
    argv = [sys.executable, __file__, "engines", str(outs[one["name"]]), str(outs[many["name"]])]
    argv += trt
    env = {k: v for k, v in os.environ.items() if k != "CUDA_VISIBLE_DEVICES"}
    with (OUT / "engines.log").open("a") as log:
        log.write(" ".join(argv) + "\n")
        log.flush()
        try:
            done = subprocess.run(
                argv, env=env, stdout=subprocess.PIPE, stderr=log, text=True,
                timeout=max(30.0, left()), check=False,
            )  # fmt: skip
            text = done.stdout
        except subprocess.TimeoutExpired:
            text = ""
        log.write(text)
    compared = _last_json(text)
    for target in trt:
        r = compared.get(target) if compared else None
        if r is None:
            report(
                "FAIL",
                f"{target}: engine outputs of --gpus=1 and --gpus=N compared",
                "no result: engines.log",
            )
            continue
        if "error" in r:
            report("FAIL", f"{target}: engine outputs compared", r["error"])
            continue
        report(
            "PASS" if r["ok"] else "FAIL",
            f"{target}: engine outputs equal ({one['name']} vs {many['name']}, min/opt/max)",
            f"max |a-b| {r['between']}, vs eager {r['vs_eager']}, engine bytes "
            + ("equal" if r["bytes_equal"] else "differ"),
        )
    return compared


def _last_json(text: str) -> dict[str, Any] | None:
    for line in reversed(text.splitlines()):
        if line.startswith("{"):
            try:
                value = json.loads(line)
            except ValueError:
                continue
            return value if isinstance(value, dict) else None
    return None


def timings(checked: Sequence[dict[str, Any]], n_gpus: int) -> dict[str, Any]:
    ok = [b for b in checked if b["exit"] == 0]
    one = [b for b in ok if b["gpus"] == 1]
    many = [b for b in ok if b["gpus"] == n_gpus and n_gpus != 1]
    wall = speedup([b["wall_s"] for b in one], [b["wall_s"] for b in many])
    gpu = speedup([b["part"]["gpu_busy_s"] for b in one], [b["part"]["gpu_busy_s"] for b in many])
    for b in ok:
        p = b["part"]
        report(
            "INFO", f"{b['name']}",
            f"wall {b['wall_s']:.1f} s; GPU part {p['gpu_busy_s']:.1f} s; GPU actions "
            f"{p['gpu_sum_s']:.1f} s, CPU actions {p['cpu_sum_s']:.1f} s (busy "
            f"{p['cpu_busy_s']:.1f} s); chains {p['gpu_chains_s']}",
        )  # fmt: skip
    median = statistics.median
    figures: dict[str, Any] = {
        "n_gpus": n_gpus,
        "builds_at_1": len(one),
        "builds_at_n": len(many),
        "wall_speedup": wall,
        "gpu_part_speedup": gpu,
        "goal": GOAL * n_gpus,
    }
    if one and many:
        best = median(
            [best_speedup(b["part"]["gpu_sum_s"], b["part"]["gpu_chains_s"], n_gpus) for b in one]
        )
        figures["best_gpu_speedup"] = best
        report(
            "INFO", f"wall time, median of {len(one)} / {len(many)}",
            f"--gpus=1 {median([b['wall_s'] for b in one]):.1f} s, --gpus={n_gpus} "
            f"{median([b['wall_s'] for b in many]):.1f} s: speed-up {wall or 0:.2f}x",
        )  # fmt: skip
        report(
            "PASS" if goal_met(gpu, n_gpus) else "FAIL",
            f"GPU part's speed-up >= {GOAL} x {n_gpus} = {GOAL * n_gpus:.2f}",
            f"{gpu or 0:.2f}x (GPU part {median([b['part']['gpu_busy_s'] for b in one]):.1f} s "
            f"-> {median([b['part']['gpu_busy_s'] for b in many]):.1f} s; the best these "
            f"targets allow: {best:.2f}x)",
        )  # fmt: skip
    else:
        report("INFO", "speed-up", f"not yet: {len(one)} build(s) at --gpus=1, {len(many)} at N")
    return figures


def pack_events(checked: Sequence[dict[str, Any]]) -> None:
    with tarfile.open(OUT / "events.tar.gz", "w:gz") as tar:
        for b in checked:
            for name in ("events.json", "smi-samples.json"):
                path = STATE / b["name"] / name
                if path.exists():
                    tar.add(path, arcname=f"{b['name']}/{name}")
    with (OUT / "builds.log").open("w") as log:
        for b in checked:
            path = STATE / b["name"] / "build.log"
            log.write(f"\n===== {b['name']}\n")
            log.write(path.read_text(errors="replace") if path.exists() else "(no log)\n")


def main() -> int:
    signal.signal(signal.SIGTERM, on_term)
    OUT.mkdir(parents=True, exist_ok=True)
    STATE.mkdir(parents=True, exist_ok=True)
    (OUT / "summary.txt").touch()
    which = os.environ.get("MULTI_SET", "full")
    extra, trt, aoti, other = SETS[which]
    targets = (*trt, *aoti, *other)
    listed = listed_gpus()
    n_gpus = len(listed)
    report(
        "PASS" if n_gpus >= 2 else "FAIL", "nvidia-smi -L: several GPUs",
        f"{n_gpus}: {', '.join(listed)}",
    )  # fmt: skip
    if not n_gpus:
        return 1
    state = load_state()
    if state.get("set", which) != which or state.get("n_gpus", n_gpus) != n_gpus:
        report(
            "INFO",
            f"$STATE held another run ({state.get('set')}, {state.get('n_gpus')} GPUs)",
            "started over",
        )
        shutil.rmtree(STATE)
        STATE.mkdir(parents=True)
        state = {"builds": []}
    state.update(set=which, n_gpus=n_gpus, targets=list(targets))
    save_state(state)
    report("INFO", f"targets ({which})", ", ".join(targets))
    pending = builds_step(state, n_gpus, targets, extra)
    checked = [check_build(b, listed) for b in state["builds"]]
    results: dict[str, Any] = {"set": which, "gpus": listed, "builds": checked}
    if checked:
        results["outputs"] = compare_outputs(checked, trt, aoti)
        results["timings"] = timings(checked, n_gpus)
        pack_events(checked)
    (OUT / "results.json").write_text(json.dumps(results, indent=2, sort_keys=True))
    verdict = f"{len(failures)} check(s) failed" if failures else "every check passed"
    if pending:
        verdict += f" so far; {pending} build(s) still to run: call again on this machine"
    elif (results.get("outputs") or {}).get("engines") == {"deferred": True}:
        verdict += " so far; the engine comparison is still to run: call again on this machine"
    print(verdict, flush=True)
    return 1 if failures else 0


# -- engines: run in a process of its own (torch, TensorRT) ------------------------------


def flat(value: Any) -> list[Any]:
    """A model's outputs as a list."""
    return list(value) if isinstance(value, (tuple, list)) else [value]


def run_engine(
    runtime: Any, folder: Path, manifest: dict[str, Any], inputs: list[Any]
) -> list[Any] | None:
    """A target's one raw engine through the TensorRT runtime (None for several engines)."""
    import torch

    if len(manifest["engines"]) != 1:
        return None
    (record,) = manifest["engines"]
    engine = runtime.deserialize_cuda_engine((folder / record["file"]).read_bytes())
    context = engine.create_execution_context()
    for binding, tensor in zip(record["inputs"], inputs, strict=True):
        context.set_input_shape(binding["name"], tuple(tensor.shape))
        context.set_tensor_address(binding["name"], tensor.data_ptr())
    results = []
    for binding in record["outputs"]:
        shape = tuple(context.get_tensor_shape(binding["name"]))
        result = torch.empty(
            shape, dtype=getattr(torch, binding["dtype"] or "float32"), device="cuda"
        )
        context.set_tensor_address(binding["name"], result.data_ptr())
        results.append(result)
    stream = torch.cuda.Stream()  # type: ignore[no-untyped-call]
    with torch.cuda.stream(stream):
        ran = context.execute_async_v3(stream.cuda_stream)
    if not ran:
        raise RuntimeError("execute_async_v3 failed")
    stream.synchronize()
    return results


def most(a: list[Any], b: list[Any]) -> float:
    """The largest absolute difference of two lists of tensors."""
    return max(float((x.float() - y.float()).abs().max()) for x, y in zip(a, b, strict=True))


def engines_main(first: Path, second: Path, targets: Sequence[str]) -> int:
    """For each trt_engine target: its raw engine (one engine) through the TensorRT runtime
    and its .ep through torch_tensorrt.load, from both kiln-out folders, on the same inputs
    at min/opt/max; prints one JSON line {target: {between, vs_eager, bytes_equal, ok}}."""
    import importlib

    import torch
    import torch_tensorrt
    from kiln.action_specs import TrtEngineSpec
    from kiln.actions.model_loading import build_model, example_inputs

    trt = importlib.import_module("tensorrt")  # after torch_tensorrt: tensorrt or tensorrt_rtx
    runtime = trt.Runtime(trt.Logger(trt.Logger.WARNING))

    def compare_one(target: str) -> dict[str, Any]:
        spec = TrtEngineSpec.read(first / "models" / f"{target}.trt.json")
        model = build_model(spec.model.source).to(torch.device("cuda"))
        sides = []
        for folder in (first / "models", second / "models"):
            manifest = json.loads((folder / f"{target}.manifest.json").read_text())
            program = torch_tensorrt.load(str(folder / manifest["program"]["file"])).module()
            engine_bytes = b"".join((folder / e["file"]).read_bytes() for e in manifest["engines"])
            sides.append((folder, manifest, program, hashlib.sha256(engine_bytes).hexdigest()))
        between: dict[str, float] = {}
        vs_eager: dict[str, float] = {}
        for which in ("min", "opt", "max"):
            shapes = {r.name: r.at(which) for r in spec.ranges}
            inputs = [t.cuda() for t in example_inputs(spec.model.signature.inputs, shapes, seed=1)]
            with torch.no_grad():
                eager = flat(model(*inputs))
                outputs = {}
                for n, (folder, manifest, program, _) in enumerate(sides):
                    outputs[f"ep{n}"] = flat(program(*inputs))
                    raw = run_engine(runtime, folder, manifest, inputs)
                    if raw is not None:
                        outputs[f"engine{n}"] = raw
            between[which] = max(
                most(outputs[f"{kind}0"], outputs[f"{kind}1"])
                for kind in ("ep", "engine")
                if f"{kind}0" in outputs
            )
            vs_eager[which] = max(most(o, eager) for o in outputs.values())
        return {
            "between": between,
            "vs_eager": vs_eager,
            "raw_engine": len(sides[0][1]["engines"]) == 1,
            "bytes_equal": sides[0][3] == sides[1][3],
            # The engines may time other tactics on each GPU (TF32 on by default): they must
            # differ from each other no more than TOLERANCE, or than either differs from eager.
            "ok": max(between.values()) <= max(TOLERANCE, *vs_eager.values()),
        }

    report_: dict[str, Any] = {}
    for target in targets:
        try:
            report_[target] = compare_one(target)
        except Exception as error:  # one target's failure is its own line
            report_[target] = {"ok": False, "error": f"{type(error).__name__}: {error}"}
        print(f"{target}: {report_[target]}", file=sys.stderr, flush=True)
    print(json.dumps(report_, sort_keys=True), flush=True)
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["engines"]:
        sys.exit(engines_main(Path(sys.argv[2]), Path(sys.argv[3]), sys.argv[4:]))
    sys.exit(main())
