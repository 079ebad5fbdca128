"""A real multi-node Ray cluster on 127.0.0.1 for the tests, started and stopped by PID.

    cluster = RayCluster.start(tmp, [NodeSpec("cpu"), NodeSpec("gpu", gpus=1, ...)])
    cluster.address            ray://127.0.0.1:PORT (Ray Client, as --remote_executor takes it)
    cluster.kill_node("gpu")   the node's processes killed at once (a machine that died)
    cluster.kill_head()        the head's processes killed at once: the cluster is lost
    cluster.stop()

The cluster lives in a child process (`python -m tests.ray_cluster SPEC`) that
holds ray.cluster_utils.Cluster: a head plus one Ray node per NodeSpec, each
with its own labels (what ray_start.py would advertise for the node's facts),
environment and kiln worker root (so each has its own CAS). The child answers
commands on stdin; on `stop`, or when its stdin closes (the test process is
gone), it shuts the cluster down: Cluster.shutdown() kills each node's
processes by the PIDs it started them with. Never `ray stop`, which kills every
Ray process on the machine by name. RAY_TMPDIR keeps Ray's session files in
the test's folder, and RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 keeps every
address on loopback (otherwise Ray advertises the machine's own address).

A fake GPU is a stand-in, named so: a node started with `num_gpus` and a
directory holding a fake `nvidia-smi` first on its PATH, so machine.nvidia_gpus()
on that node (and only there) reports the GPU the test chose.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from kiln.exec.platform_match import MachineOffer
from kiln.host_facts import HostFacts
from kiln.machine import Gpu
from kiln.process_tree import descendants
from kiln.remote_exec.routing import node_labels

from tests.loopback_ports import free_port, owns_port

ROOT = Path(__file__).resolve().parent.parent
FAKE_SMI = """#!/bin/sh
# A stand-in for nvidia-smi on a test node without a GPU: the GPU the test gave it.
case "$*" in
  *-L*) echo "GPU 0: {name} (UUID: GPU-fake)" ;;
  *) echo "0, {name}, {cc}, {memory} MiB" ;;
esac
"""


@dataclass
class NodeSpec:
    name: str
    cpus: int = 1
    gpus: int = 0
    gpu_name: str = "NVIDIA H200"
    compute_capability: str = "9.0"
    memory_mb: int = 16000
    env: dict[str, str] = field(default_factory=dict)
    labels: dict[str, str] | None = None  # None: what this machine's facts give
    # False: a real GPU (tools/gpu_ray_check.py on the GPU machine): no stand-in
    # nvidia-smi, and the labels ray_start.py would give this machine
    fake_gpu: bool = True


def host_env(tmp: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update(RAY_TMPDIR=str(tmp), RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER="0")
    env.pop("CUDA_VISIBLE_DEVICES", None)
    return env


def node_setup(spec: NodeSpec, tmp: Path) -> dict[str, Any]:
    """What the cluster host passes to Cluster.add_node for `spec`."""
    env = {"KILN_WORKER_ROOT": str(tmp / f"worker-{spec.name}"), **spec.env}
    gpus: tuple[Gpu, ...] = ()
    if spec.gpus and not spec.fake_gpu:
        from kiln.remote_exec.facts import this_node

        return {
            "num_cpus": spec.cpus,
            "num_gpus": spec.gpus,
            "memory": spec.memory_mb * 2**20,
            "labels": spec.labels if spec.labels is not None else node_labels(this_node()),
            "env_vars": env,
        }
    if spec.gpus:
        bin_dir = tmp / f"bin-{spec.name}"
        bin_dir.mkdir(parents=True, exist_ok=True)
        smi = bin_dir / "nvidia-smi"
        smi.write_text(
            FAKE_SMI.format(name=spec.gpu_name, cc=spec.compute_capability, memory=80000)
        )
        smi.chmod(0o755)
        env["PATH"] = f"{bin_dir}:{os.environ.get('PATH', '/usr/bin:/bin')}"
        gpus = (Gpu(spec.gpu_name, spec.compute_capability),)
    labels = spec.labels
    if labels is None:
        labels = node_labels(MachineOffer(HostFacts.of_this_machine(), gpus, {}))
    return {
        "num_cpus": spec.cpus,
        "num_gpus": spec.gpus,
        "memory": spec.memory_mb * 2**20,
        "labels": labels,
        "env_vars": env,
    }


@dataclass
class RayCluster:
    process: subprocess.Popen[str]
    address: str
    nodes: dict[str, str]  # name -> node id
    tmp: Path

    @staticmethod
    def start(tmp: Path, specs: list[NodeSpec], head_cpus: int = 0) -> RayCluster:
        tmp.mkdir(parents=True, exist_ok=True)
        spec_file = tmp / "cluster.json"
        spec_file.write_text(
            json.dumps({"head_cpus": head_cpus, "nodes": [asdict(s) for s in specs]})
        )
        process = subprocess.Popen(
            [sys.executable, "-m", "tests.ray_cluster", str(spec_file)],
            cwd=ROOT,
            env=host_env(tmp),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=(tmp / "cluster.log").open("w"),
            text=True,
        )
        assert process.stdout is not None
        line = process.stdout.readline()
        if not line:
            process.wait(timeout=30)
            raise RuntimeError(
                f"the Ray cluster did not start:\n{(tmp / 'cluster.log').read_text()}"
            )
        ready = json.loads(line)
        return RayCluster(process, ready["address"], ready["nodes"], tmp)

    def _command(self, text: str) -> dict[str, Any]:
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write(text + "\n")
        self.process.stdin.flush()
        answer: dict[str, Any] = json.loads(self.process.stdout.readline())
        return answer

    def kill_node(self, name: str) -> None:
        """Kill every process of one node at once, as if its machine died."""
        self._command(f"kill {name}")

    def kill_head(self) -> None:
        """Kill the head's processes (GCS, Ray Client server, its raylet) at once, by the
        PIDs they were started with: the cluster is lost to every driver."""
        self._command("kill-head")

    def worker_pids(self, name: str) -> list[int]:
        """The PIDs of the Ray worker processes of a node (children of its raylet)."""
        answer = self._command(f"workers {name}")
        return [int(pid) for pid in answer["pids"]]

    def stop(self) -> None:
        if self.process.poll() is None:
            with contextlib.suppress(BrokenPipeError, OSError):
                assert self.process.stdin is not None
                self.process.stdin.write("stop\n")
                self.process.stdin.close()
            try:
                self.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.process.kill()  # its nodes' reapers then end them
                self.process.wait()


# -- the cluster host: `python -m tests.ray_cluster SPEC` -----------------------------


def _head(head_cpus: int, tmp: Path) -> tuple[Any, int]:
    """A cluster of its head alone, and the port of its Ray Client server. The port is
    chosen free and bound by Ray later: a head whose Ray Client server did not get it
    (another suite's server took it, and would then answer this suite's drivers) is shut
    down and started again on another."""
    from ray.cluster_utils import Cluster

    for _ in range(5):
        port = free_port()
        cluster = Cluster(
            initialize_head=True,
            head_node_args={
                "num_cpus": head_cpus,
                "node_ip_address": "127.0.0.1",
                "ray_client_server_port": port,
                "include_dashboard": False,
                "env_vars": {"KILN_WORKER_ROOT": str(tmp / "worker-head")},
            },
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if owns_port(os.getpid(), port):
                return cluster, port
            time.sleep(0.1)
        cluster.shutdown()
    raise RuntimeError("the head's Ray Client server never listened on its port")


def _host(spec_file: Path) -> None:
    spec = json.loads(spec_file.read_text())
    tmp = spec_file.parent
    cluster, port = _head(spec["head_cpus"], tmp)
    nodes = {}
    ids = {}
    orphans: set[int] = set()  # processes that outlive the head killed: killed at the end
    try:
        for item in spec["nodes"]:
            node_spec = NodeSpec(**item)
            node = cluster.add_node(node_ip_address="127.0.0.1", **node_setup(node_spec, tmp))
            nodes[node_spec.name] = node
            ids[node_spec.name] = node.node_id
        cluster.wait_for_nodes()
        print(json.dumps({"address": f"ray://127.0.0.1:{port}", "nodes": ids}), flush=True)
        for line in sys.stdin:
            command, _, name = line.strip().partition(" ")
            if command == "stop":
                break
            if command == "kill":
                cluster.remove_node(nodes.pop(name), allow_graceful=False)
                print(json.dumps({"ok": True}), flush=True)
            elif command == "kill-head":
                # Every raylet's agents outlive their raylet killed at once (the head's now,
                # the nodes' once they find the head gone), for minutes: killed by PID too.
                for node in [cluster.head_node, *nodes.values()]:
                    orphans.update(descendants(node.all_processes["raylet"][0].process.pid))
                cluster.remove_node(cluster.head_node, allow_graceful=False)
                print(json.dumps({"ok": True}), flush=True)
            elif command == "workers":
                raylet = nodes[name].all_processes["raylet"][0].process.pid
                pids = [p for p in descendants(raylet) if _is_worker(_cmdline(p))]
                print(json.dumps({"pids": pids}), flush=True)
    finally:
        cluster.shutdown()
        for pid in orphans:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        shutil.rmtree(tmp / "ray", ignore_errors=True)


def _is_worker(cmdline: str) -> bool:
    """A Ray worker (`ray::IDLE`, `ray::run_task`), not one of the raylet's agents
    (`ray::DashboardAgent`, `ray::RuntimeEnvAgent`), whose death takes the raylet along."""
    title = cmdline.split(" ", 1)[0]
    return (title.startswith("ray::") and not title.endswith("Agent")) or (
        "default_worker.py" in cmdline
    )


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


if __name__ == "__main__":
    _host(Path(sys.argv[1]))
