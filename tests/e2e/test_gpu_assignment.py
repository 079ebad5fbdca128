"""Every GPU of the build host: each GPU action gets GPUs of its own; CPU actions see none.

kiln runs as a child process with a stand-in nvidia-smi listing four GPUs
(tests/fake_gpus.py) first on its PATH. The genrules write the CUDA_VISIBLE_DEVICES
they were given. Overlap is checked by the genrules themselves, never by timing:
each one holds its GPU as a directory in a shared folder (`mkdir` fails if another
running action holds it) and waits, at a barrier, until as many actions as there are
GPUs have started: so that many run at once, whatever the load of the machine, and
two of them sharing an id would fail the build. They reach the shared folder by
absolute path, so those builds run unsandboxed; the sandboxed case is its own test.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.fake_gpus import install_fake_smi, uuid
from tests.kiln_workspace import Workspace

UUIDS = tuple(uuid(i) for i in range(4))

# Holds the action's GPU while it runs; waits until $2 actions have started (a barrier,
# polled: no assumption about how long anything takes, only a generous deadline).
HOLD = """#!/bin/bash
set -e
shared={shared}
id="$CUDA_VISIBLE_DEVICES"
if ! mkdir "$shared/held-$id"; then
  touch "$shared/shared-gpu"  # the others at the barrier stop too
  echo "GPU $id is held by another running action"; exit 1
fi
touch "$shared/started-$1"
deadline=$((SECONDS + 300))
until [ "$(ls "$shared" | grep -c '^started-')" -ge "$2" ]; do
  [ ! -e "$shared/shared-gpu" ] || {{ echo "two running actions got one GPU"; exit 1; }}
  [ "$SECONDS" -lt "$deadline" ] || {{ echo "only $(ls "$shared") after 300 s"; exit 1; }}
  sleep 0.05
done
rmdir "$shared/held-$id"
echo "$id" > "$3"
"""


def _env(ws: Workspace, tmp_path: Path, **extra: str) -> dict[str, str]:
    bin_dir = install_fake_smi(tmp_path / "gpu-bin", 4)
    env = {k: v for k, v in ws.env.items() if k != "CUDA_VISIBLE_DEVICES"}
    return {**env, "PATH": f"{bin_dir}:{env.get('PATH', '/usr/bin:/bin')}", **extra}


def _kiln(ws: Workspace, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kiln", *args],
        cwd=ws.root,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )


def _events(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _finished(events: list[dict[str, object]]) -> dict[str, dict[str, object]]:
    return {str(e["label"]): e for e in events if e["type"] == "action_finished"}


def _holding_genrules(ws: Workspace, tmp_path: Path, count: int, barrier: int) -> Path:
    shared = tmp_path / "shared"
    shared.mkdir()
    ws.write("gpu/hold.sh", HOLD.format(shared=shared))
    (ws.root / "gpu/hold.sh").chmod(0o755)
    ws.write(
        "gpu/BUILD",
        "".join(
            f'genrule(name = "g{i}", tools = ["hold.sh"], outs = ["g{i}.txt"], gpus = 1,\n'
            f'        cmd = "./$(location hold.sh) g{i} {barrier} $@")\n'
            for i in range(count)
        ),
    )
    return shared


def _seen(ws: Workspace, count: int) -> list[str]:
    return [ws.out(f"gpu/g{i}.txt").strip() for i in range(count)]


def test_eight_gpu_genrules_on_four_gpus_each_get_one_id_of_their_own_and_use_all_four(
    ws: Workspace, tmp_path: Path
) -> None:
    _holding_genrules(ws, tmp_path, 8, barrier=4)
    events = tmp_path / "events.json"
    env = _env(ws, tmp_path)
    built = _kiln(
        ws, env, "build", "//gpu:all", "--jobs=8", "--gpus=4", "--nosandbox", "--explain",
        f"--build_event_json_file={events}",
    )  # fmt: skip
    assert built.returncode == 0, built.stderr
    seen = _seen(ws, 8)
    assert all(s in UUIDS for s in seen), seen  # exactly one id each, a GPU's UUID
    assert set(seen) == set(UUIDS)
    # The build events and --explain name the GPU each one ran on.
    finished = _finished(_events(events))
    assert [finished[f"//gpu:g{i}"]["gpus"] for i in range(8)] == [[s] for s in seen]
    new = "new action: never built in this workspace"
    assert f"EXPLAIN: Genrule //gpu:g0: {new}; ran on GPU {seen[0]}" in built.stderr

    # Another workspace on the same disk cache, the GPUs in another order: all hits.
    other = ws.copy("permuted")
    events_again = tmp_path / "events-again.json"
    again = _kiln(
        other, {**env, "CUDA_VISIBLE_DEVICES": ",".join(reversed(UUIDS))},
        "build", "//gpu:all", "--jobs=8", "--nosandbox", f"--build_event_json_file={events_again}",
    )  # fmt: skip
    assert again.returncode == 0, again.stderr
    statuses = {e["status"] for e in _finished(_events(events_again)).values()}
    assert statuses == {"cached"}, again.stderr


def test_gpus_2_hands_out_the_first_two_gpus_only(ws: Workspace, tmp_path: Path) -> None:
    _holding_genrules(ws, tmp_path, 6, barrier=2)
    built = _kiln(
        ws, _env(ws, tmp_path), "build", "//gpu:all", "--jobs=8", "--gpus=2", "--nosandbox"
    )
    assert built.returncode == 0, built.stderr
    assert set(_seen(ws, 6)) == set(UUIDS[:2])


def test_kilns_own_cuda_visible_devices_limits_the_gpus_by_index_never_renumbered(
    ws: Workspace, tmp_path: Path
) -> None:
    """kiln started with CUDA_VISIBLE_DEVICES=2,3: its actions get GPUs 2 and 3 by UUID,
    not 0 and 1 (what "0" would mean to a child is the machine's GPU 0)."""
    _holding_genrules(ws, tmp_path, 4, barrier=2)
    env = _env(ws, tmp_path, CUDA_VISIBLE_DEVICES="2,3")
    built = _kiln(ws, env, "build", "//gpu:all", "--jobs=4", "--nosandbox")
    assert built.returncode == 0, built.stderr
    assert set(_seen(ws, 4)) == {UUIDS[2], UUIDS[3]}


SEEN = 'echo "[${CUDA_VISIBLE_DEVICES-unset}]" > $@'


def test_in_the_sandbox_a_gpu_genrule_sees_its_gpu_and_a_cpu_genrule_none(
    ws: Workspace, tmp_path: Path
) -> None:
    ws.write(
        "BUILD",
        f"""
        genrule(name = "gpu", outs = ["gpu.txt"], gpus = 1, cmd = '{SEEN}')
        genrule(name = "cpu", outs = ["cpu.txt"], cmd = '{SEEN}')
        """,
    )
    built = _kiln(ws, _env(ws, tmp_path), "build", "//:all", "--gpus=1")
    assert built.returncode == 0, built.stderr
    assert "sandbox" not in built.stderr  # no fallback warning: this ran sandboxed
    assert (ws.out("gpu.txt"), ws.out("cpu.txt")) == (f"[{UUIDS[0]}]\n", "[]\n")


def test_after_a_failed_and_a_killed_gpu_action_their_gpu_is_free_again(
    ws: Workspace, tmp_path: Path
) -> None:
    """One GPU, --keep_going: the action after a failure and a kill gets that GPU."""
    ws.write(
        "BUILD",
        f"""
        genrule(name = "a_fails", outs = ["a.txt"], gpus = 1, cmd = "exit 3")
        genrule(name = "b_killed", outs = ["b.txt"], gpus = 1, cmd = "kill -9 $$$$")
        genrule(name = "c_runs", outs = ["c.txt"], gpus = 1, cmd = '{SEEN}')
        """,
    )
    events = tmp_path / "events.json"
    built = _kiln(
        ws, _env(ws, tmp_path), "build", "//:all", "--gpus=1", "--keep_going",
        f"--build_event_json_file={events}",
    )  # fmt: skip
    assert built.returncode == 1
    assert "killed by signal SIGKILL" in built.stderr
    finished = _finished(_events(events))
    assert [finished[f"//:{n}"]["status"] for n in ("a_fails", "b_killed", "c_runs")] == [
        "failed",
        "failed",
        "executed",
    ]
    assert finished["//:a_fails"]["gpus"] == finished["//:b_killed"]["gpus"] == [UUIDS[0]]
    # It ran after both ended (one GPU: one at a time), on the GPU they had held.
    ended = [finished[f"//:{n}"]["time_ms"] for n in ("a_fails", "b_killed")]
    started = [e for e in _events(events) if e["type"] == "action_started"]
    (c_started,) = [e["time_ms"] for e in started if e["label"] == "//:c_runs"]
    assert all(int(str(c_started)) >= int(str(t)) for t in ended)
    assert ws.out("c.txt") == f"[{UUIDS[0]}]\n"


def test_kiln_info_lists_the_gpus_and_which_a_build_may_use(ws: Workspace, tmp_path: Path) -> None:
    env = _env(ws, tmp_path, CUDA_VISIBLE_DEVICES="2,0,3")
    info = _kiln(ws, env, "info", "--gpus=2")
    assert info.returncode == 0, info.stderr
    lines = dict(line.split(": ", 1) for line in info.stdout.splitlines())
    assert lines["gpus"] == "2"
    assert lines["gpu_ids"] == f"{UUIDS[2]},{UUIDS[0]}"
    name = "NVIDIA H100 80GB HBM3"
    assert lines["gpu_0"] == f"{name}, {UUIDS[0]}: used by builds"
    assert lines["gpu_1"] == f"{name}, {UUIDS[1]}: not used: CUDA_VISIBLE_DEVICES=2,0,3"
    assert lines["gpu_2"] == f"{name}, {UUIDS[2]}: used by builds"
    assert lines["gpu_3"] == f"{name}, {UUIDS[3]}: not used: --gpus=2"
    assert _kiln(ws, {**env, "CUDA_VISIBLE_DEVICES": ""}, "info", "gpus").stdout == "0\n"


def test_without_nvidia_smi_and_cuda_visible_devices_there_is_no_gpu_to_hand_out(
    ws: Workspace,
) -> None:
    env = {k: v for k, v in ws.env.items() if k != "CUDA_VISIBLE_DEVICES"}
    env["PATH"] = os.pathsep.join(
        p for p in env["PATH"].split(os.pathsep) if p and not Path(p, "nvidia-smi").exists()
    )
    info = _kiln(ws, env, "info", "gpu_ids")
    assert (info.returncode, info.stdout) == (0, "-\n"), info.stderr
