"""GPU assignment on the GPU machine (issue 26, item 6): `tools/gpu_check.sh assign` runs it.

    python tools/gpu_assign_check.py OUT

In a copy of models/ (under OUT/assign-ws, with a disk cache of its own) plus
`mlp_cuda` (aoti_package, device = "cuda"), `mlp_cpu` (aoti_package on the CPU)
and two genrules that write the CUDA_VISIBLE_DEVICES they get:

    info      `kiln info`: the machine's GPUs, with `CUDA_VISIBLE_DEVICES=0` too, where
              gpu_ids must be the UUID of nvidia-smi's GPU 0, never "0"
    build     `kiln build --explain` of //models:mlp_trt (trt_engine), //models:mlp_cuda,
              //models:mlp_cpu and //probe:all, every action run (fresh cache). Each GPU
              action that ran here must name the GPU's UUID in its build event and its
              EXPLAIN line; every other action none; the GPU genrule must have seen that
              UUID, the CPU one an empty CUDA_VISIBLE_DEVICES; the CPU package builds
              and validates with the GPU hidden
    again     `kiln clean`, then the same build with CUDA_VISIBLE_DEVICES=<the UUID> in
              kiln's own environment: all cache hits (the ids are in no key)

Prints PASS / FAIL / INFO lines (also into OUT/assign-summary.txt); exit 1 if any failed.
OUT gets assign-build.log, assign-build.events.json, assign-again.log.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TARGETS = ("//models:mlp_trt", "//models:mlp_cuda", "//models:mlp_cpu", "//probe:all")
# cpu_target = "native": the GPU machine's torch 2.11 cannot compile for x86-64-v3
# (tools/gpu_ray_check.py says why).
EXTRA_BUILD = """
aoti_package(name = "mlp_cuda", model = ":mlp", device = "cuda", cpu_target = "native")
aoti_package(name = "mlp_cpu", model = ":mlp", cpu_target = "native")
"""
PROBES = """
genrule(name = "gpu", outs = ["gpu.txt"], gpus = 1,
        cmd = "echo [$${CUDA_VISIBLE_DEVICES-unset}] > $@")
genrule(name = "cpu", outs = ["cpu.txt"], cmd = "echo [$${CUDA_VISIBLE_DEVICES-unset}] > $@")
"""
# Actions of a GPU target that hold no GPU: they write files, or render or read a package
# without running it (AotiManifest reads the package's records: a plain process).
CPU_ACTIONS = {"FileWrite", "TrtLoader", "AotiManifest"}
results: list[str] = []


def report(verdict: str, what: str, detail: str = "") -> None:
    line = f"{verdict:<5} {what}" + (f": {detail}" if detail else "")
    results.append(line)
    print(line, flush=True)


def kiln(root: Path, out: Path, name: str, *args: str, env: dict[str, str]) -> int:
    argv = [sys.executable, "-m", "kiln", *args]
    with (out / f"{name}.log").open("w") as log:
        log.write(" ".join(argv) + "\n")
        log.flush()
        return subprocess.run(
            argv, cwd=root, env=env, stdout=log, stderr=log, timeout=500, check=False
        ).returncode


def gpu_uuid() -> str:
    listed = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, check=False)
    found = re.search(r"^GPU 0: .*\(UUID: (\S+)\)", listed.stdout, re.MULTILINE)
    return found[1] if found else ""


def workspace(root: Path) -> None:
    shutil.rmtree(root, ignore_errors=True)
    shutil.copytree(REPO / "models", root / "models", ignore=shutil.ignore_patterns("kiln-out"))
    (root / "WORKSPACE").write_text("")
    build = (REPO / "models" / "BUILD").read_text()
    (root / "models" / "BUILD").write_text(build + EXTRA_BUILD)
    (root / "probe").mkdir()
    (root / "probe" / "BUILD").write_text(PROBES)


def info(root: Path, env: dict[str, str], uuid: str) -> None:
    shown = subprocess.run(
        [sys.executable, "-m", "kiln", "info"], cwd=root, env=env, capture_output=True,
        text=True, check=False,
    )  # fmt: skip
    print(shown.stdout + shown.stderr)
    gpus = [line for line in shown.stdout.splitlines() if line.startswith(("gpu", "cpus"))]
    report("INFO", "kiln info", "; ".join(gpus))
    limited = subprocess.run(
        [sys.executable, "-m", "kiln", "info", "gpu_ids"], cwd=root, capture_output=True,
        env={**env, "CUDA_VISIBLE_DEVICES": "0"}, text=True, check=False,
    )  # fmt: skip
    ids = limited.stdout.strip()
    report("PASS" if ids == uuid else "FAIL", "CUDA_VISIBLE_DEVICES=0 kiln info gpu_ids", ids)


def main(out: Path) -> int:
    out.mkdir(parents=True, exist_ok=True)
    root = out / "assign-ws"
    workspace(root)
    env = {k: v for k, v in os.environ.items() if k != "CUDA_VISIBLE_DEVICES"}
    env["XDG_CACHE_HOME"] = str(out / "assign-xdg")
    shutil.rmtree(out / "assign-xdg", ignore_errors=True)
    uuid = gpu_uuid()
    report("PASS" if uuid else "FAIL", "nvidia-smi -L: GPU 0's UUID", uuid or "none")
    info(root, env, uuid)

    preload = os.environ.get("LD_PRELOAD", "")  # gpu_check.sh sets it on that image
    extra = [f"--action_env=LD_PRELOAD={preload}"] if preload else []
    events = out / "assign-build.events.json"
    flags = ["--verbose_failures", "--keep_going", *extra]
    code = kiln(
        root, out, "assign-build", "build", *TARGETS, "--explain", *flags,
        f"--build_event_json_file={events}", env=env,
    )  # fmt: skip
    finished = [
        e
        for e in map(json.loads, events.read_text().splitlines() if events.exists() else [])
        if e.get("type") == "action_finished"
    ]
    for e in finished:
        report(
            "INFO",
            f"{e['mnemonic']} {e['label']}",
            f"{e['status']} {e['strategy']} gpus={e['gpus']}",
        )
    report("PASS" if code == 0 else "FAIL", "build", f"exit {code}, see assign-build.log")
    log = (out / "assign-build.log").read_text()
    wrong = []
    for e in finished:
        if e["status"] == "cached" or e["strategy"] not in ("local", "worker"):
            continue
        gpu_action = str(e["label"]) != "//models:mlp_cpu" and e["mnemonic"] not in CPU_ACTIONS
        if str(e["label"]) == "//probe:cpu":
            gpu_action = False
        want = [uuid] if gpu_action else []
        explained = rf"EXPLAIN: {e['mnemonic']} {re.escape(str(e['label']))}: .*ran on GPU "
        if e["gpus"] != want:
            wrong.append(f"{e['mnemonic']} {e['label']}: gpus={e['gpus']}, want {want}")
        elif (
            gpu_action
            and e["status"] == "executed"
            and not re.search(explained + re.escape(uuid), log)
        ):
            wrong.append(f"{e['mnemonic']} {e['label']}: its EXPLAIN line names not {uuid}")
    report(
        "FAIL" if wrong else "PASS", "each action's GPUs in events and --explain", "; ".join(wrong)
    )
    for probe, expected in (("gpu", f"[{uuid}]"), ("cpu", "[]")):
        path = root / "kiln-out" / "probe" / f"{probe}.txt"
        seen = path.read_text() if path.exists() else "(not built)"
        first = seen.splitlines()[0] if seen else ""
        report(
            "PASS" if first == expected else "FAIL",
            f"//probe:{probe} saw",
            seen.replace("\n", " | "),
        )
    by_label: dict[str, set[str]] = {}
    for e in finished:
        by_label.setdefault(str(e["label"]), set()).add(str(e["status"]))
    for label in ("//models:mlp_trt", "//models:mlp_cuda", "//models:mlp_cpu"):
        # No action at all: analysis refused it (a preflight: assign-build.log says why).
        statuses = by_label.get(label, {"no action: refused before running"})
        report(
            "PASS" if statuses <= {"executed", "cached"} else "FAIL",
            f"{label} built",
            ", ".join(sorted(statuses)),
        )

    kiln(root, out, "assign-clean", "clean", env=env)
    again_events = root.parent / "assign-again.events.json"
    code = kiln(
        root, out, "assign-again", "build", *TARGETS, *flags,
        f"--build_event_json_file={again_events}", env={**env, "CUDA_VISIBLE_DEVICES": uuid},
    )  # fmt: skip
    lines = again_events.read_text().splitlines() if again_events.exists() else []
    ran = [
        f"{e['mnemonic']} {e['label']}"
        for e in map(json.loads, lines)
        if e.get("type") == "action_finished" and e.get("status") != "cached"
    ]
    report(
        "PASS" if code == 0 and not ran else "FAIL",
        f"after kiln clean, CUDA_VISIBLE_DEVICES={uuid[:12]}...: all cache hits",
        f"exit {code}" + (f"; ran: {', '.join(ran)}" if ran else ""),
    )
    (out / "assign-summary.txt").write_text("\n".join(results) + "\n")
    return 1 if any(line.startswith("FAIL") for line in results) else 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]).resolve()))
