"""Remote execution on a real GPU (issue 15, deliverable 8): run by tools/gpu_ray_check.sh.

On the GPU machine, everything on 127.0.0.1 and stopped by PID at the end:

    cluster   a Ray head with no CPUs and one worker node holding the real GPU, with
              the labels `python -m kiln.remote_exec.ray_start` gives this machine
              (tests/ray_cluster.py: ray.cluster_utils.Cluster in a child process)
    cache     nginx WebDAV (tools/nginx_cache.sh) if nginx is installed, else a small
              Python PUT/GET/HEAD server (this file's `serve`), as the remote cache
    remote    `kiln build --gpus=0 --remote_executor=... --remote_cache=...` of
              //models:mlp_trt (trt_engine) and //models:mlp_cuda (aoti_package,
              device = "cuda") in a copy of models/: every GPU action must run on the node
    local     the same targets in a fresh copy with this machine's GPU, no cluster, no
              cache: each action's key must equal the remote build's (the key a GPU
              machine computes for itself); outputs are compared byte for byte (a
              TensorRT engine may differ: tactic selection is timed; reported, not failed,
              with what differs in differ.txt)
    hits      a third copy with the GPU and --remote_cache only: every action a remote hit

Prints PASS / FAIL / INFO lines (also into $OUT/summary.txt); exit 1 if any failed.
$OUT gets summary.txt, env.log and install.log (from the .sh), info-cluster.txt,
remote.log, remote.events.json, local.log, hits.log and, where outputs differ,
differ.txt: the members of each package that differ, a text one's diff shortened.
"""

from __future__ import annotations

import contextlib
import difflib
import json
import os
import shutil
import subprocess
import sys
import threading
import time
import zipfile
from collections.abc import Iterable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

# cpu_target = "native": the GPU machine's torch 2.11 has no inductor cpp.march, so its
# wrapper is always compiled for the host, and the x86-64-v3 default's disassembly check
# rightly refuses it (seen on the H100, 2026-12-05). Native is what 2.11 can build.
EXTRA_BUILD = """
aoti_package(
    name = "mlp_cuda",
    model = ":mlp",
    device = "cuda",
    cpu_target = "native",
)
"""
TARGETS = ("//models:mlp_trt", "//models:mlp_cuda")
results: list[str] = []


def report(verdict: str, what: str, detail: str = "") -> None:
    line = f"{verdict:<5} {what}" + (f": {detail}" if detail else "")
    results.append(line)
    print(line, flush=True)


# -- a minimal HTTP cache, for a machine without nginx ------------------------------


class _Cache(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    root = Path()

    def log_message(self, format: str, *args: object) -> None:
        del format, args

    def _file(self) -> Path:
        return self.root / self.path.lstrip("/").replace("..", "_")

    def do_HEAD(self) -> None:
        path = self._file()
        self._answer(
            200 if path.is_file() else 404, size=path.stat().st_size if path.is_file() else 0
        )

    def do_GET(self) -> None:
        path = self._file()
        if not path.is_file():
            self._answer(404)
            return
        data = path.read_bytes()
        self._answer(200, data)

    def do_PUT(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        path = self._file()
        path.parent.mkdir(parents=True, exist_ok=True)
        temp = path.with_name(path.name + f".tmp{threading.get_ident()}")
        with temp.open("wb") as f:
            left = length
            while left:
                chunk = self.rfile.read(min(left, 1 << 20))
                if not chunk:
                    temp.unlink()
                    return
                f.write(chunk)
                left -= len(chunk)
        temp.replace(path)
        self._answer(201)

    def _answer(self, status: int, data: bytes = b"", size: int | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Length", str(len(data) if size is None else size))
        self.end_headers()
        if data and self.command != "HEAD":
            self.wfile.write(data)


@contextlib.contextmanager
def remote_cache(tmp: Path) -> Iterator[str]:
    if shutil.which("nginx") or Path("/usr/sbin/nginx").exists():
        from tests.nginx_cache import NginxCache

        server = NginxCache.start(tmp / "nginx")
        try:
            yield server.url
        finally:
            server.stop()
        return
    (tmp / "http-cache").mkdir(parents=True)
    _Cache.root = tmp / "http-cache"
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Cache)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()


# -- builds ---------------------------------------------------------------------------


def workspace(root: Path) -> Path:
    shutil.copytree(REPO / "models", root / "models", ignore=shutil.ignore_patterns("kiln-out"))
    (root / "WORKSPACE").write_text("")
    build = (REPO / "models" / "BUILD").read_text()
    (root / "models" / "BUILD").write_text(build + EXTRA_BUILD)
    return root


def build(root: Path, out: Path, name: str, *flags: str) -> tuple[int, list[dict[str, object]]]:
    # $OUT brings back 8 files at most: the remote build's events, no other build's.
    events = (out if name == "remote" else root.parent) / f"{name}.events.json"
    env = dict(os.environ, XDG_CACHE_HOME=str(root.parent / "xdg"))
    preload = os.environ.get("KILN_ACTION_PRELOAD", "")
    extra = [f"--action_env=LD_PRELOAD={preload}"] if preload else []
    argv = [sys.executable, "-m", "kiln", "build", *TARGETS, "--verbose_failures"]
    argv += [f"--build_event_json_file={events}", *extra, *flags]
    with (out / f"{name}.log").open("w") as log:
        log.write(" ".join(argv) + "\n")
        log.flush()
        code = subprocess.run(
            argv, cwd=root, env=env, stdout=log, stderr=log, check=False
        ).returncode
    lines = events.read_text().splitlines() if events.exists() else []
    finished = [json.loads(line) for line in lines]
    return code, [e for e in finished if e.get("type") == "action_finished"]


def by_action(events: list[dict[str, object]]) -> dict[str, dict[str, object]]:
    """The actions by mnemonic, label and first output (a target has several FileWrites)."""
    return {f"{e['mnemonic']} {e['label']} {_first(e.get('outputs'))}": e for e in events}


def _first(outputs: object) -> str:
    return str(outputs[0]) if isinstance(outputs, list) and outputs else ""


TEXT = (".cpp", ".h", ".json", ".py", ".txt", ".cmake")


def what_differs(local: Path, remote: Path, lines: int = 80) -> str:
    """The members of two packages (zip files) that differ, a text member's diff
    shortened; for other files the diff itself, or their sizes."""
    head = f"=== {local.name}\n"
    if not remote.is_file():
        return head + "missing from the remote build\n"
    if not (zipfile.is_zipfile(local) and zipfile.is_zipfile(remote)):
        return head + _diff(local.name, local.read_bytes(), remote.read_bytes(), lines)
    with zipfile.ZipFile(local) as a, zipfile.ZipFile(remote) as b:
        ours = {i.filename: i for i in a.infolist()}
        theirs = {i.filename: i for i in b.infolist()}
        parts = [head]
        for name in sorted(ours.keys() - theirs.keys()):
            parts.append(f"only local:  {name}\n")
        for name in sorted(theirs.keys() - ours.keys()):
            parts.append(f"only remote: {name}\n")
        for name in sorted(ours.keys() & theirs.keys()):
            mine, other = a.read(name), b.read(name)
            if mine != other:
                parts.append(f"--- member {name}\n" + _diff(name, mine, other, lines))
        # Members named by a hash of their content (<hash>.wrapper.cpp, <hash>.kernel.cpp):
        # pair them by what follows the hash to show how they differ.
        mine_by_role = _by_role(ours.keys() - theirs.keys())
        other_by_role = _by_role(theirs.keys() - ours.keys())
        for role in sorted(mine_by_role.keys() & other_by_role.keys()):
            mine, other = mine_by_role[role], other_by_role[role]
            parts.append(f"--- {mine} vs {other}\n")
            parts.append(_diff(role, a.read(mine), b.read(other), lines))
    return "".join(parts)


def _by_role(names: Iterable[str]) -> dict[str, str]:
    """Members by their name without the leading hash ("wrapper.cpp"), where one has it."""
    found: dict[str, list[str]] = {}
    for name in names:
        role = name.rsplit("/", 1)[-1].partition(".")[2]
        found.setdefault(role, []).append(name)
    return {role: names[0] for role, names in found.items() if len(names) == 1}


def _diff(name: str, mine: bytes, other: bytes, lines: int) -> str:
    if not name.endswith(TEXT):
        return f"binary: {len(mine)} bytes local, {len(other)} remote\n"
    diff = difflib.unified_diff(
        mine.decode(errors="replace").splitlines(),
        other.decode(errors="replace").splitlines(),
        "local",
        "remote",
        lineterm="",
        n=1,
    )
    return "\n".join(list(diff)[:lines]) + "\n"


def builds(url: str, address: str, tmp: Path, out: Path) -> None:
    """The remote, local and remote-hit builds, compared."""
    remote_flags = (
        "--gpus=0",
        f"--remote_executor={address}",
        f"--remote_cache={url}",
    )
    t = time.monotonic()
    code, remote = build(workspace(tmp / "remote" / "ws"), out, "remote", *remote_flags)
    seconds = time.monotonic() - t
    if code != 0:
        report("FAIL", "remote build (--gpus=0)", f"exit {code}, see {out}/remote.log")
        return
    ran = {k: str(e["strategy"]) for k, e in by_action(remote).items()}
    # The actions that need the GPU: the engine, and every step of the CUDA package.
    gpu_actions = [
        k
        for k in ran
        if k.startswith("TrtEngine") or ("mlp_cuda" in k and not k.startswith("FileWrite"))
    ]
    remote_ok = all(ran[k] == "remote-exec" for k in gpu_actions)
    report(
        "PASS" if remote_ok else "FAIL",
        "remote build (--gpus=0)",
        f"{seconds:.0f} s; " + ", ".join(f"{k}: {v}" for k, v in sorted(ran.items())),
    )
    local_root = workspace(tmp / "local" / "ws")
    code, local = build(local_root, out, "local")
    if code != 0:
        report("FAIL", "local GPU build", f"exit {code}, see {out}/local.log")
        return
    keys_remote = {k: e["key"] for k, e in by_action(remote).items()}
    keys_local = {k: e["key"] for k, e in by_action(local).items()}
    differ = sorted(k for k in keys_local if keys_local[k] != keys_remote.get(k))
    report(
        "PASS" if not differ else "FAIL",
        "keys: remote build == local GPU build",
        f"{len(keys_local)} actions" + (f"; differ: {differ}" if differ else ""),
    )
    remote_out = tmp / "remote" / "ws" / "kiln-out" / "models"
    local_out = local_root / "kiln-out" / "models"
    same, other = [], []
    for path in sorted(p for p in local_out.rglob("*") if p.is_file()):
        twin = remote_out / path.relative_to(local_out)
        (same if twin.is_file() and twin.read_bytes() == path.read_bytes() else other).append(
            str(path.relative_to(local_out))
        )
    report("INFO", "bytes equal", ", ".join(same))
    if other:
        report("INFO", "bytes differ (see differ.txt)", ", ".join(other))
        differences = [what_differs(local_out / name, remote_out / name) for name in other]
        (out / "differ.txt").write_text("\n".join(differences))
    code, hits = build(workspace(tmp / "hits" / "ws"), out, "hits", f"--remote_cache={url}")
    sources = {str(e["strategy"]) for e in hits}
    all_hits = code == 0 and sources <= {"remote", "write"} and "remote" in sources
    report(
        "PASS" if all_hits else "FAIL",
        "a GPU machine's build is all remote hits",
        f"exit {code}, {sorted(sources)}",
    )


def main() -> int:
    out = Path(os.environ.get("OUT") or Path.cwd() / "gpu-ray-check-out").resolve()
    out.mkdir(parents=True, exist_ok=True)
    tmp = Path(f"/tmp/kiln-gpu-ray-{os.getpid()}")  # short: Ray's socket paths
    shutil.rmtree(tmp, ignore_errors=True)
    os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
    from tests.ray_cluster import NodeSpec, RayCluster

    cpus = max(1, (os.cpu_count() or 2) - 2)
    start = time.monotonic()
    try:
        cluster = RayCluster.start(
            tmp / "ray", [NodeSpec("gpu", cpus=cpus, gpus=1, memory_mb=64000, fake_gpu=False)]
        )
    except Exception as error:
        report("FAIL", "cluster", str(error)[-2000:])
        return 1
    report("PASS", "cluster", f"{cluster.address}, up in {time.monotonic() - start:.1f} s")
    try:
        info = subprocess.run(
            [
                sys.executable,
                "-m",
                "kiln",
                "info",
                "cluster",
                f"--remote_executor={cluster.address}",
            ],
            cwd=workspace(tmp / "info" / "ws"),
            capture_output=True,
            text=True,
            check=False,
        )
        (out / "info-cluster.txt").write_text(info.stdout + info.stderr)
        report(
            "PASS" if info.returncode == 0 else "FAIL",
            "kiln info cluster",
            info.stdout.strip()[-600:],
        )
        with remote_cache(tmp) as url:
            builds(url, cluster.address, tmp, out)
    finally:
        cluster.stop()
        if os.environ.get("KILN_GPU_RAY_KEEP"):
            print(f"kept {tmp} (KILN_GPU_RAY_KEEP)")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    with (out / "summary.txt").open("a") as summary:  # after gpu_ray_check.sh's lines
        summary.write("\n".join(results) + "\n")
    return 1 if any(line.startswith("FAIL") for line in results) else 0


if __name__ == "__main__":
    raise SystemExit(main())
