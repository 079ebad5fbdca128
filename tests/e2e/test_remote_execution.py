"""--remote_executor end to end: a real Ray cluster on 127.0.0.1, a real nginx cache.

The cluster (tests/ray_cluster.py) is a head with no CPUs of its own and two
worker nodes: `cpu` (1 CPU) and `gpu` (1 CPU and a fake GPU: Ray's num_gpus=1
with a stand-in nvidia-smi on that node's PATH, and the labels a real H200
node advertises). It is started once for the module and stopped by PID.
Each test has its own workspace, disk cache and remote-cache instance name,
so results never leak from one test to the next; the nodes' own CAS is shared,
as a real cluster's is.

The driver is `kiln build` in a child process with `--gpus=0`: no GPU here.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.nginx_cache import NginxCache
from tests.ray_cluster import FAKE_SMI, NodeSpec, RayCluster
from tests.wheels import make_wheel

REPO = Path(__file__).resolve().parents[2]
KILN = [sys.executable, "-m", "kiln"]
GPU = "NVIDIA H200"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RayCluster]:
    # A short path: Ray's socket names must stay under 108 bytes.
    tmp = Path(f"/tmp/kiln-ray-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    started = RayCluster.start(tmp, [NodeSpec("cpu"), NodeSpec("gpu", gpus=1, gpu_name=GPU)])
    try:
        yield started
    finally:
        started.stop()
        shutil.rmtree(tmp, ignore_errors=True)


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NginxCache]:
    server = NginxCache.start(tmp_path_factory.mktemp("nginx"))
    try:
        yield server
    finally:
        server.stop()


@dataclass
class Built:
    code: int
    err: str
    events: list[dict[str, object]]

    def actions(self) -> dict[str, dict[str, object]]:
        """action_finished events by mnemonic and label."""
        return {
            f"{e['mnemonic']} {e['label']}": e
            for e in self.events
            if e.get("type") == "action_finished"
        }


@dataclass
class Driver:
    root: Path
    env: dict[str, str]
    flags: list[str]

    def write(self, path: str, text: str) -> None:
        target = self.root / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(textwrap.dedent(text))

    def command(self, *args: str, remote: bool = True) -> list[str]:
        events = self.root.parent / "events.json"
        events.unlink(missing_ok=True)
        return [
            *KILN,
            "build",
            *args,
            "--gpus=0" if remote else "--gpus=1",
            f"--build_event_json_file={events}",
            *(self.flags if remote else []),
        ]

    def build(self, *args: str, remote: bool = True, env: dict[str, str] | None = None) -> Built:
        done = subprocess.run(
            self.command(*args, remote=remote),
            cwd=self.root,
            env=env or self.env,
            capture_output=True,
            text=True,
            check=False,
            timeout=600,
        )
        return self._built(done.returncode, done.stderr)

    def start(self, *args: str, remote: bool = True) -> subprocess.Popen[str]:
        return subprocess.Popen(
            self.command(*args, remote=remote),
            cwd=self.root,
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    def finish(self, process: subprocess.Popen[str]) -> Built:
        """What a build from start() did, once it ends."""
        _, err = process.communicate(timeout=600)
        return self._built(process.returncode, err)

    def _built(self, code: int, err: str) -> Built:
        events = self.root.parent / "events.json"
        lines = events.read_text().splitlines() if events.exists() else []
        return Built(code, err, [json.loads(line) for line in lines])

    def out(self, path: str) -> bytes:
        return (self.root / "kiln-out" / path).read_bytes()


def _driver(root: Path, cluster: RayCluster, cache: NginxCache, *extra: str) -> Driver:
    root.mkdir(parents=True)
    (root / "WORKSPACE").write_text("")
    xdg = root.parent / "xdg"
    env = dict(os.environ, XDG_CACHE_HOME=str(xdg), HOME=str(root.parent))
    env.pop("CUDA_VISIBLE_DEVICES", None)
    flags = [
        f"--remote_executor={cluster.address}",
        f"--remote_cache={cache.url}",
        f"--remote_instance_name={root.parent.name}",
        *extra,
    ]
    return Driver(root, env, flags)


@pytest.fixture
def driver(tmp_path: Path, cluster: RayCluster, cache: NginxCache) -> Driver:
    return _driver(tmp_path / "ws", cluster, cache)


def _gpu_machine_env(driver: Driver, tmp: Path) -> dict[str, str]:
    """The driver's environment, but on a 'GPU machine': the same stand-in nvidia-smi
    the GPU node has, first on PATH."""
    bin_dir = tmp / "gpu-bin"
    bin_dir.mkdir()
    (bin_dir / "nvidia-smi").write_text(FAKE_SMI.format(name=GPU, cc="9.0", memory=80000))
    (bin_dir / "nvidia-smi").chmod(0o755)
    return dict(driver.env, PATH=f"{bin_dir}:{driver.env['PATH']}")


GENRULES = """
genrule(name = "a", srcs = ["in.txt"], outs = ["a.txt"], cmd = "sha256sum $< > $@; cat $< >> $@")
genrule(name = "b", srcs = [":a"], tools = ["tool.sh"], outs = ["b.txt"],
        cmd = "./$(location tool.sh) $< > $@")
genrule(name = "c", srcs = [":b"], outs = ["c.bin"],
        cmd = "head -c 300000 /dev/zero | tr '\\\\0' x > $@; cat $< >> $@")
"""


def _genrule_workspace(driver: Driver) -> None:
    driver.write("BUILD", GENRULES)
    driver.write("in.txt", "hello\n")
    driver.write("tool.sh", '#!/bin/bash\ntr a-z A-Z < "$1"\n')
    (driver.root / "tool.sh").chmod(0o755)


def test_genrules_run_on_the_cluster_and_match_a_local_build(
    driver: Driver, tmp_path: Path, cluster: RayCluster, cache: NginxCache
) -> None:
    _genrule_workspace(driver)
    built = driver.build("//:c", "--spawn_strategy=remote")
    assert built.code == 0, built.err
    assert "3 executed (3 remote-exec)" in built.err
    actions = built.actions()
    assert {a["strategy"] for a in actions.values()} == {"remote-exec"}

    local = _driver(tmp_path / "local" / "ws", cluster, cache)
    _genrule_workspace(local)
    here = local.build("//:c", remote=False)
    assert here.code == 0, here.err
    for name in ("a.txt", "b.txt", "c.bin"):
        assert driver.out(name) == local.out(name)
    # The same keys: a remote result is a cache hit for a local build and back.
    assert {k: a["key"] for k, a in actions.items()} == {
        k: a["key"] for k, a in here.actions().items()
    }
    # The executable tool kept its mode on the worker (./tool.sh ran).
    assert b"HELLO" in driver.out("b.txt")


def test_a_gpu_action_from_a_driver_without_gpus_lands_on_the_gpu_node(
    driver: Driver, tmp_path: Path, cluster: RayCluster, cache: NginxCache
) -> None:
    driver.write(
        "BUILD",
        """
        genrule(name = "cpu", outs = ["cpu.txt"],
                cmd = "echo cpu [$${CUDA_VISIBLE_DEVICES-unset}] > $@")
        genrule(name = "gpu", srcs = [":cpu"], outs = ["gpu.txt"], gpus = 1,
                cmd = "cat $< > $@; echo on GPU [$${CUDA_VISIBLE_DEVICES-unset}] >> $@")
        """,
    )
    built = driver.build("//:gpu")
    assert built.code == 0, built.err
    actions = built.actions()
    # The default placement: only what this host cannot run leaves it.
    assert actions["Genrule //:cpu"]["strategy"] == "local"
    gpu = actions["Genrule //:gpu"]
    assert gpu["strategy"] == "remote-exec"
    assert str(gpu["lane"]).endswith(cluster.nodes["gpu"][:8])
    # The CPU action saw no GPU; the GPU one the GPU Ray reserved for its task, as is.
    assert driver.out("gpu.txt") == b"cpu []\non GPU [0]\n"

    # A GPU machine building it for itself computes the same key (the GPU facts came
    # from the cluster's GPU node), so the remote result is its cache hit.
    local = _driver(tmp_path / "gpu-machine" / "ws", cluster, cache)
    local.write("BUILD", (driver.root / "BUILD").read_text())
    here = local.build("//:gpu", remote=False, env=_gpu_machine_env(local, tmp_path))
    assert here.code == 0, here.err
    assert here.actions()["Genrule //:gpu"]["key"] == gpu["key"]


def _error_lines(err: str) -> list[str]:
    """What a failed build said about its action, less where it ran."""
    return [line for line in err.splitlines() if "in.txt" in line or "secret" in line]


@pytest.mark.parametrize(
    "cmd",
    [
        pytest.param("echo more >> $<; cp $< $@", id="write-through-an-input"),
        pytest.param("cat {secret} > $@", id="read-an-undeclared-absolute-path"),
    ],
)
def test_a_hermeticity_breach_fails_on_a_node_exactly_as_here(
    driver: Driver, tmp_path: Path, cluster: RayCluster, cache: NginxCache, cmd: str
) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("not an input\n")
    failed = {}
    for name, remote in (("remote", True), ("local", False)):
        here = driver if remote else _driver(tmp_path / "local" / "ws", cluster, cache)
        here.write(
            "BUILD",
            'genrule(name = "x", srcs = ["in.txt"], outs = ["x.txt"], '
            f"cmd = {cmd.format(secret=secret)!r})",
        )
        here.write("in.txt", "hello\n")
        args = ("//:x", "--spawn_strategy=remote") if remote else ("//:x",)
        built = here.build(*args, remote=remote)
        assert built.code == 1, built.err
        assert built.actions()["Genrule //:x"]["strategy"] == ("remote-exec" if remote else "local")
        assert (here.root / "in.txt").read_text() == "hello\n"
        assert not (here.root / "kiln-out/x.txt").exists()
        failed[name] = _error_lines(built.err.replace(str(here.root), "<ws>"))
    assert failed["remote"] == failed["local"] and failed["local"], failed


def test_an_action_no_node_can_run_fails_at_once_naming_what_is_missing(
    driver: Driver,
) -> None:
    driver.write("BUILD", 'genrule(name = "big", outs = ["o"], gpus = 2, cmd = "touch $@")')
    start = time.monotonic()
    built = driver.build("//:big")
    assert built.code == 1
    assert "no node of the cluster can run it" in built.err
    assert "2 GPU (has 1)" in built.err and "2 GPU (has 0)" in built.err
    assert "Traceback" not in built.err
    assert time.monotonic() - start < 60  # never pending forever


def test_dynamic_runs_both_and_keeps_the_first_success(driver: Driver) -> None:
    """--spawn_strategy=dynamic: the same action here and on the cluster; whichever run
    finishes first wins and the other is killed. The command sleeps on the side told to
    lose (TMPDIR says where it runs: a worker's root is <tmp>/worker-<node>)."""
    for slow_side, winner in (("here", "remote-exec"), ("remote", "local")):
        remote_is_slow = "sleep 60" if slow_side == "remote" else ":"
        here_is_slow = "sleep 60" if slow_side == "here" else ":"
        cmd = (
            f'case "$$TMPDIR" in */worker-*) {remote_is_slow} ;; *) {here_is_slow} ;; esac; '
            f"echo {slow_side} > $@"
        )
        driver.write("BUILD", f'genrule(name = "race", outs = ["race.txt"], cmd = {cmd!r})')
        start = time.monotonic()
        built = driver.build("//:race", "--spawn_strategy=dynamic")
        assert built.code == 0, built.err
        assert built.actions()["Genrule //:race"]["strategy"] == winner
        assert driver.out("race.txt") == f"{slow_side}\n".encode()
        assert time.monotonic() - start < 50  # the loser was not waited for


def test_a_worker_killed_mid_action_is_retried_and_leaves_nothing_running(
    driver: Driver, tmp_path: Path, cluster: RayCluster
) -> None:
    marker = tmp_path / "first-attempt"
    driver.write(
        "BUILD",
        f"""
        genrule(name = "slow", outs = ["slow.txt"], cmd = '''
            if [ ! -e {marker} ]; then echo "$$PPID $$$$" > {marker}; sleep 60; fi
            echo done > $@
        ''')
        """,
    )
    # The marker lies outside the execroot, where only an unsandboxed command writes.
    process = driver.start("//:slow", "--spawn_strategy=remote", "--nosandbox")
    start = time.monotonic()
    supervisor, shell = _wait_for_pids(marker, process)
    # The Ray worker running the action dies (every worker of both nodes: one of them).
    for node in ("cpu", "gpu"):
        for pid in cluster.worker_pids(node):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    # Its command dies with it (the supervisor's lifeline), long before its sleep ends.
    deadline = time.monotonic() + 60  # a bound for a failing test, not a claim of speed
    while not (_gone(shell) and _gone(supervisor)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _gone(shell) and _gone(supervisor)
    _, err = process.communicate(timeout=300)
    assert process.returncode == 0, err
    assert driver.out("slow.txt") == b"done\n"  # the second attempt, which found the marker
    assert time.monotonic() - start < 55


def test_ctrl_c_cancels_remote_tasks_and_caches_nothing(
    driver: Driver, tmp_path: Path, cache: NginxCache
) -> None:
    marker = tmp_path / "started"
    driver.write(
        "BUILD",
        f"""
        genrule(name = "long", outs = ["long.txt"],
                cmd = 'echo "$$PPID $$$$" > {marker}; sleep 120; echo late > $@')
        """,
    )
    # The marker lies outside the execroot, where only an unsandboxed command writes.
    process = driver.start("//:long", "--spawn_strategy=remote", "--nosandbox")
    supervisor, shell = _wait_for_pids(marker, process)
    process.send_signal(signal.SIGINT)
    _, err = process.communicate(timeout=60)
    assert process.returncode == 8, err
    assert "interrupted" in err
    deadline = time.monotonic() + 60  # a bound for a failing test, not a claim of speed
    while not (_gone(shell) and _gone(supervisor)) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _gone(shell) and _gone(supervisor)
    instance = cache.root / driver.root.parent.name
    assert not list((instance / "ac").glob("*")) if (instance / "ac").exists() else True
    # Nor in the driver's disk cache (its root is $XDG_CACHE_HOME/kiln), nor kiln-out/.
    disk_entries = (driver.root.parent / "xdg").glob("**/ac/*/*")
    assert not [entry for entry in disk_entries if entry.is_file()]
    assert not (driver.root / "kiln-out" / "long.txt").exists()


def test_ctrl_c_during_dynamic_kills_both_runs(driver: Driver, tmp_path: Path) -> None:
    """Each side sleeps for a length of its own (TMPDIR tells the node's run from the local
    one), found in /proc (a file a run writes may land in a private /tmp, and a shell's $$
    may be a pid of a sandbox's namespace)."""
    token = f"{zlib.crc32(str(tmp_path).encode()) % 10_000:04d}"  # tests may run at once
    lengths = {"remote": f"120.{token}1", "here": f"120.{token}2"}
    cmd = (
        f'case "$$TMPDIR" in */worker-*) t={lengths["remote"]} ;; *) t={lengths["here"]} ;; '
        "esac; sleep $$t; echo late > $@"
    )
    driver.write("BUILD", f'genrule(name = "race", outs = ["race.txt"], cmd = {cmd!r})')
    # Sandboxed: Ray's forced cancel kills the worker and its children, and the node's
    # sandbox host is nobody's child (started detached), so it lives to kill the command.
    process = driver.start("//:race", "--spawn_strategy=dynamic")
    pids: dict[str, int] = {}
    try:
        deadline = time.monotonic() + 120
        while len(pids) < 2 and time.monotonic() < deadline and process.poll() is None:
            for side, length in lengths.items():
                if side not in pids and (found := _sleeping(length)):
                    pids[side] = found
            time.sleep(0.1)
        if len(pids) < 2:
            process.kill()
            pytest.fail(f"both runs never started: {pids}\n{process.communicate()[1]}")
        process.send_signal(signal.SIGINT)
        _, err = process.communicate(timeout=60)
        assert process.returncode == 8, err
        deadline = time.monotonic() + 60  # a bound for a failing test
        while not all(_gone(pid) for pid in pids.values()) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert {side: _gone(pid) for side, pid in pids.items()} == {"here": True, "remote": True}
        assert not (driver.root / "kiln-out" / "race.txt").exists()
    finally:  # a failed assertion leaves nothing running either
        if process.poll() is None:
            process.kill()
            process.communicate()
        for pid in pids.values():
            if not _gone(pid):  # still the command's sleep: it outlived the build
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)


def test_an_unreachable_head_is_a_clear_error_or_a_local_fallback(
    tmp_path: Path, cluster: RayCluster, cache: NginxCache
) -> None:
    driver = _driver(tmp_path / "ws", cluster, cache)
    dead = "ray://127.0.0.1:9"  # discard: nothing listens there
    driver.flags[0] = f"--remote_executor={dead}"
    driver.write(
        "BUILD",
        """
        genrule(name = "a", outs = ["a.txt"], cmd = "echo a > $@")
        genrule(name = "g", outs = ["g.txt"], gpus = 1, cmd = "echo g > $@")
        """,
    )
    failed = driver.build("//:a", "--spawn_strategy=remote")
    assert failed.code == 1
    assert f"the Ray cluster at {dead} is unreachable" in failed.err
    assert "Traceback" not in failed.err

    fallback = driver.build("//:a", "--spawn_strategy=remote", "--remote_local_fallback")
    assert fallback.code == 0, fallback.err
    assert fallback.actions()["Genrule //:a"]["strategy"] == "local"
    assert driver.out("a.txt") == b"a\n"

    # A GPU action cannot fall back to a host without one: the error says why.
    gpu = driver.build("//:g", "--remote_local_fallback")
    assert gpu.code == 1
    assert "unreachable" in gpu.err and "Traceback" not in gpu.err


def test_kiln_info_cluster_lists_the_nodes_and_what_they_offer(
    driver: Driver, cluster: RayCluster
) -> None:
    # --remote_executor from .kilnrc, as a team sets it once (info reads build lines).
    driver.write(".kilnrc", f"build {driver.flags[0]}\n")
    info = subprocess.run(
        [*KILN, "info", "cluster"],
        cwd=driver.root,
        env=driver.env,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert info.returncode == 0, info.stderr
    assert f"cluster: {cluster.address} (Ray 2.60.0, 3 nodes)" in info.stdout
    gpu_node = next(line for line in info.stdout.splitlines() if cluster.nodes["gpu"][:8] in line)
    assert "1 CPU, 1 GPU" in gpu_node
    assert "gpu_name=NVIDIA_H200" in info.stdout and "compute_capability=9.0" in info.stdout
    assert f"GPUs {GPU} (9.0)" in info.stdout  # what kiln found on the node itself


@pytest.mark.torch
def test_mlp_torch_actions_run_on_the_cluster_byte_identical_to_local(
    tmp_path: Path, cluster: RayCluster, cache: NginxCache
) -> None:
    # Both builds at once (the remote one runs on the cluster's node, the local one here).
    started = {}
    for name, remote in (("remote", True), ("local", False)):
        driver = _driver(tmp_path / name / "ws", cluster, cache)
        driver.write(
            "models/BUILD",
            """
            torch_model(
                name = "mlp",
                src = "mlp.py",
                factory = "mlp:build",
                inputs = [{"name": "x", "shape": [8, 10], "dtype": "float32"}],
                dynamic_dims = [{"name": "batch", "min": 1, "max": 64, "axes": {"x": 0}}],
            )
            aoti_package(name = "mlp_pt2", model = ":mlp")
            """,
        )
        shutil.copy(REPO / "models/mlp.py", driver.root / "models/mlp.py")
        args = ["//models:mlp_pt2", "--spawn_strategy=remote"] if remote else ["//models:mlp_pt2"]
        started[name] = (driver, driver.start(*args, remote=remote))
    builds = {name: (driver, driver.finish(process)) for name, (driver, process) in started.items()}
    for _, built in builds.values():
        assert built.code == 0, built.err
    remote_driver, remote_built = builds["remote"]
    local_driver, local_built = builds["local"]
    # Every action that runs a command went to the cluster (whatever steps the rule
    # splits packaging into); only file writes stay on the driver.
    ran = {
        k: a["strategy"]
        for k, a in remote_built.actions().items()
        if not k.startswith("FileWrite ")
    }
    assert {"TorchExport //models:mlp_pt2", "AotiValidate //models:mlp_pt2"} <= set(ran)
    assert set(ran.values()) == {"remote-exec"}, ran
    remote_out, local_out = (d.root / "kiln-out" / "models" for d in (remote_driver, local_driver))
    made = sorted(p.relative_to(local_out) for p in local_out.rglob("*") if p.is_file())
    assert Path("mlp_pt2.pt2") in made and Path("mlp_pt2.validation.json") in made
    for path in made:
        assert (remote_out / path).read_bytes() == (local_out / path).read_bytes(), path
    keys = {k: a["key"] for k, a in remote_built.actions().items()}
    assert keys == {k: a["key"] for k, a in local_built.actions().items()}


TEAM_MODELS = """\
import torch


def team() -> torch.nn.Module:
    import teamlib  # the locked package: importable only in its environment

    return torch.nn.Linear(2, teamlib.WIDTH)
"""
TEAM_BUILD = """\
model_weights(name = "team", src = "m.py", factory = "m:team", deps = ["@pip//teamlib"],
              out = "team.safetensors")
model_weights(name = "team_1", src = "m.py", factory = "m:team", deps = ["@pip//teamlib"],
              seed = 1, out = "team_1.safetensors")
model_weights(name = "team_2", src = "m.py", factory = "m:team", deps = ["@pip//teamlib"],
              seed = 2, out = "team_2.safetensors")
"""


def _team_workspace(driver: Driver, wheelhouse: Path, locked_width: int = 3) -> list[str]:
    """A workspace locking teamlib 1.0 (a team's wheel, in `wheelhouse`), whose targets'
    weights need it; the flag that installs it offline. The lock pins the wheel of
    WIDTH = `locked_width`: another than the wheelhouse's makes its bytes not the lock's."""
    wheel = {"teamlib/__init__.py": "WIDTH = 3\n"}
    make_wheel(wheelhouse, "teamlib", "1.0", wheel)
    locked = {"teamlib/__init__.py": f"WIDTH = {locked_width}\n"}
    _, package = make_wheel(driver.root.parent / "locked", "teamlib", "1.0", locked)
    driver.write("BUILD", 'python_requirements(name = "pip", lock = "requirements_lock.txt")\n')
    driver.write(
        "requirements_lock.txt",
        f"teamlib==1.0 \\\n    --hash={package.hashes[0]}\n    # via -r requirements.in\n",
    )
    driver.write("m/BUILD", TEAM_BUILD)
    driver.write("m/m.py", TEAM_MODELS)
    return [f"--pip_find_links={wheelhouse}"]


def _environments(cluster: RayCluster) -> dict[str, dict[Path, tuple[int, int]]]:
    """The Python environments each node made (their manifests' inode and mtime)."""
    made: dict[str, dict[Path, tuple[int, int]]] = {}
    for name in ("cpu", "gpu"):
        envs = cluster.tmp / f"worker-{name}" / "cache" / "python-envs"
        manifests = envs.glob("*/kiln-env.json")
        made[name] = {m: (m.stat().st_ino, m.stat().st_mtime_ns) for m in manifests}
    return made


def _node_of(cluster: RayCluster, lane: object) -> str:
    return next(name for name, node_id in cluster.nodes.items() if str(lane).endswith(node_id[:8]))


@pytest.mark.torch
def test_an_action_with_pip_packages_runs_on_a_node_in_an_environment_of_the_wheels_sent(
    tmp_path: Path, cluster: RayCluster, cache: NginxCache
) -> None:
    """The node makes the environment of the lock's wheels, which came by digest through
    the remote cache; the weights are a local build's byte for byte, under the same key;
    a node makes one closure's environment once, and every later action reuses it."""
    drivers = {
        name: _driver(tmp_path / name / "ws", cluster, cache) for name in ("remote", "local")
    }
    for driver in drivers.values():
        flags = _team_workspace(driver, tmp_path / "wheelhouse")
    started = {}
    for name, driver in drivers.items():  # both builds at once, as the mlp's above
        strategy = ["--strategy=ModelWeights=remote"] if name == "remote" else []
        started[name] = (
            driver,
            driver.start("//m:team", *flags, *strategy, remote=name == "remote"),
        )
    builds = {name: (driver, driver.finish(process)) for name, (driver, process) in started.items()}
    for _, built in builds.values():
        assert built.code == 0, built.err
    (driver, remote_built), (local_driver, local_built) = builds["remote"], builds["local"]
    first = remote_built.actions()["ModelWeights //m:team"]
    assert first["strategy"] == "remote-exec"
    assert driver.out("m/team.safetensors") == local_driver.out("m/team.safetensors")
    assert first["key"] == local_built.actions()["ModelWeights //m:team"]["key"]
    assert "downloading 1 wheel for the remote executor's nodes" in remote_built.err
    assert remote_built.err.count(": making the Python environment ") == 1, remote_built.err
    made = _environments(cluster)
    assert {n: len(m) for n, m in made.items() if m} == {_node_of(cluster, first["lane"]): 1}

    # Two more actions of the same closure: three on two nodes, so one node runs two.
    more = driver.build("//m:team_1", "//m:team_2", *flags, "--strategy=ModelWeights=remote")
    assert more.code == 0, more.err
    ran = [more.actions()[f"ModelWeights //m:team_{i}"] for i in (1, 2)]
    assert {a["strategy"] for a in ran} == {"remote-exec"}
    nodes = {_node_of(cluster, a["lane"]) for a in (first, *ran)}
    now = _environments(cluster)
    # Each node made the environment once, the first never again: the rest reused it.
    assert {n for n, m in now.items() if m} == nodes
    assert all(len(m) == 1 for m in now.values() if m)
    assert all(now[n] == m for n, m in made.items() if m)
    assert more.err.count(": making the Python environment ") == len(nodes) - 1, more.err
    assert "downloading" not in more.err  # the driver keeps the wheel it fetched


def test_a_wheel_whose_bytes_are_not_the_locks_is_refused_and_nothing_is_stored(
    driver: Driver, tmp_path: Path, cache: NginxCache
) -> None:
    flags = _team_workspace(driver, tmp_path / "wheelhouse", locked_width=4)
    built = driver.build("//m:team", *flags, "--strategy=ModelWeights=remote")
    assert built.code == 1
    assert (
        "cannot fetch the wheels a remote node installs: pip could not download teamlib==1.0:"
        in built.err
    )
    assert "DO NOT MATCH THE HASHES" in built.err and "Traceback" not in built.err
    assert not (driver.root / "kiln-out" / "m" / "team.safetensors").exists()
    key = built.actions()["ModelWeights //m:team"]["key"]
    assert key and not (cache.root / driver.root.parent.name / "ac" / str(key)).exists()
    kept = [p for p in (driver.root.parent / "xdg").glob("**/wheels/*") if p.name != ".lock"]
    assert kept == []


# -- helpers ------------------------------------------------------------------------


def _wait_for_pids(marker: Path, process: subprocess.Popen[str]) -> tuple[int, int]:
    """(supervisor, shell) pids a remote genrule wrote to marker."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if marker.exists() and marker.read_text().strip().count(" ") == 1:
            supervisor, shell = marker.read_text().split()
            return int(supervisor), int(shell)
        if process.poll() is not None:
            pytest.fail(f"kiln ended first:\n{process.communicate()[1]}")
        time.sleep(0.1)
    process.kill()
    pytest.fail("the remote action never started")


def _sleeping(length: str) -> int | None:
    """The pid of a `sleep <length>` running on this machine, if one is."""
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                if (entry / "cmdline").read_bytes() == f"sleep\0{length}\0".encode():
                    return int(entry.name)
    return None


def _gone(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rpartition(")")[2].split()[0] == "Z"  # a zombie: dead, not yet reaped


def test_a_genrule_on_a_node_cannot_write_the_nodes_torch_store_or_python_environments(
    driver: Driver, cluster: RayCluster
) -> None:
    """Issue 20: what a node shares between actions (its disk cache's precompiled headers,
    its Python environments) is read-only to the actions it runs, as here."""
    planted = []
    for name in ("cpu", "gpu"):
        cache = cluster.tmp / f"worker-{name}" / "cache"
        for path in (
            cache / "tmp/torch/precompiled_headers/planted.h",  # where main kept them
            cache / "tmp/torch/published_headers/planted.h",
            cache / "python-envs/planted.txt",
        ):
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text("as kiln made it\n")
            planted.append(path)
    targets = [
        "/tmp/kiln-torch-tmp/precompiled_headers/planted.h",  # main bound the cache's here
        "/tmp/kiln-torch-store/published_headers/planted.h",
        "/tmp/kiln-torch-store/published_headers/new.h",
        *(str(p) for p in planted),
        *(str(p.parent / "new.txt") for p in planted),
    ]
    cmd = "".join(f"(echo poisoned > {t}) 2>/dev/null && echo wrote {t}; " for t in targets)
    driver.write(
        "BUILD", f'genrule(name = "poison", outs = ["poison.log"], cmd = {cmd + "touch $@"!r})'
    )
    built = driver.build("//:poison", "--spawn_strategy=remote")
    assert built.code == 0, built.err
    assert built.actions()["Genrule //:poison"]["strategy"] == "remote-exec"
    for path in planted:
        assert path.read_text() == "as kiln made it\n", path
        assert not (path.parent / "new.txt").exists()
        assert not (path.parent / "new.h").exists()
    # The store is at the same path on every node, read-only there.
    assert "kiln-torch-store" not in driver.out("poison.log").decode()
