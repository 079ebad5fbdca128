"""The remote cache's goals, against a real nginx (WebDAV, Bazel's HTTP cache protocol).

    .venv/bin/python bench/bench_remote_cache.py [--workspace models|genrules] [--runs 3] [--mb 500]

The server: nginx on a loopback port (tools/nginx_cache.sh serve), storing
under a temporary directory. Every kiln run is a fresh process of
`.venv/bin/kiln` in a fresh copy of the workspace, with its own HOME,
XDG_CACHE_HOME and empty local cache.

    remote hit vs local rebuild   `kiln build` of //models/... less its TensorRT targets,
                   which need a CUDA GPU (the repo's models/: mlp and resnet, exported
                   and AOTInductor-packaged on the CPU; or, with --workspace genrules,
                   200 genrules that sleep 0.2 s each): one copy builds with
                   --remote_cache and fills the server; then, alternately, a copy
                   builds with no remote (the local rebuild: every action runs) and a
                   copy builds with --remote_cache (every action a remote hit).
    download vs curl   a genrule writing --mb MB of random bytes, built once with
                   --remote_cache; then, alternately:
                     curl    `curl -sS -o FILE <server>/cas/<hash>`: wall time of the process
                     kiln    a fresh copy's `kiln build` of it, a remote hit: the action's
                             own seconds from --build_event_json_file (GET /ac, download
                             into the CAS hashing as it writes, fsync, verify, hard link
                             into kiln-out/)
                     client  kiln.cache.remote.RemoteCache.download into an empty CAS,
                             in this process (the transfer alone)
                   Goal: kiln >= 80 % of curl's throughput. curl neither hashes nor
                   fsyncs; kiln does both before a byte is used.
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
KILN = str(REPO / ".venv" / "bin" / "kiln")
SCRIPT = REPO / "tools" / "nginx_cache.sh"
MB = 1_000_000


@contextlib.contextmanager
def nginx(directory: Path) -> Iterator[str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    process = subprocess.Popen(["bash", str(SCRIPT), "serve", str(directory), str(port)])
    try:
        deadline = time.monotonic() + 30  # the first call may install nginx
        while True:
            try:
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=1)
                conn.request("HEAD", "/")
                conn.getresponse()
                conn.close()
                break
            except OSError:
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("nginx did not start") from None
                time.sleep(0.05)
        yield f"http://127.0.0.1:{port}"
    finally:
        process.terminate()
        process.wait()


class Copies:
    """Fresh copies of one workspace, each with its own home and local cache."""

    def __init__(self, tmp: Path, write: dict[str, str] | None = None, models: bool = False):
        self.tmp = tmp
        self.count = 0
        self.template = tmp / "template"
        self.template.mkdir()
        (self.template / "WORKSPACE").write_text("")
        if models:
            shutil.copytree(REPO / "models", self.template / "models")
        for path, text in (write or {}).items():
            (self.template / path).parent.mkdir(parents=True, exist_ok=True)
            (self.template / path).write_text(text)

    def new(self) -> tuple[Path, dict[str, str]]:
        self.count += 1
        root = self.tmp / f"copy{self.count}"
        shutil.copytree(self.template, root)
        home = self.tmp / f"home{self.count}"
        home.mkdir()
        env = dict(os.environ, HOME=str(home), XDG_CACHE_HOME=str(home / "cache"))
        return root, env


def build(root: Path, env: dict[str, str], *args: str) -> tuple[float, str]:
    """Seconds of one `kiln build` process, and its summary line."""
    start = time.perf_counter()
    run = subprocess.run(
        [KILN, "build", *args], cwd=root, env=env, capture_output=True, text=True, check=False
    )
    seconds = time.perf_counter() - start
    if run.returncode != 0:
        raise RuntimeError(f"kiln build {' '.join(args)} failed:\n{run.stderr}")
    return seconds, next(line for line in run.stderr.splitlines() if " actions: " in line)


def kiln(root: Path, env: dict[str, str], *args: str) -> float:
    return build(root, env, *args)[0]


def genrules() -> dict[str, str]:
    files = {}
    for p in range(40):
        rules = []
        for r in range(5):
            files[f"p{p:02d}/src{r}.txt"] = f"package {p} rule {r}\n"
            dep = f'"//p{p - 1:02d}:g{r}", ' if p else ""
            rules.append(
                f'genrule(name = "g{r}", srcs = [{dep}"src{r}.txt"], outs = ["g{r}.out"], '
                'cmd = "cat $(SRCS) > $@; sleep 0.2")'
            )
        files[f"p{p:02d}/BUILD"] = "\n".join(rules) + "\n"
    return files


def bench_builds(tmp: Path, url: str, kind: str, runs: int) -> None:
    models = kind == "models"
    copies = Copies(tmp, None if models else genrules(), models=models)
    root, env = copies.new()
    targets = ["//..."]
    if models:  # //models/... less what needs a CUDA GPU and torch_tensorrt
        query = "//models/... except kind('trt_.*', //models/...)"
        listed = subprocess.run(
            [KILN, "query", query], cwd=root, env=env, capture_output=True, text=True, check=True
        )
        targets = listed.stdout.split()
    fill = kiln(root, env, *targets, f"--remote_cache={url}")
    print(f"{kind}: {' '.join(targets)}")
    print(f"  first build with --remote_cache (runs, uploads): {fill:.2f}s")
    local, remote = [], []
    for _ in range(runs):
        root, env = copies.new()
        local.append(kiln(root, env, *targets))
        root, env = copies.new()
        remote.append(kiln(root, env, *targets, f"--remote_cache={url}"))
    root, env = copies.new()
    print(f"  a remote-hit build says: {build(root, env, *targets, f'--remote_cache={url}')[1]}")
    for name, seconds in (("local rebuild", local), ("remote-hit build", remote)):
        runs_text = ", ".join(f"{s:.2f}" for s in seconds)
        print(f"  {name:<22} {statistics.median(seconds):8.2f}s   (runs: {runs_text})")
    speedup = statistics.median(local) / statistics.median(remote)
    print(f"  the remote-hit build is {speedup:.1f}x faster than a local rebuild")


def bench_download(tmp: Path, url: str, megabytes: int, runs: int) -> None:
    from kiln.cache.cas import ContentStore
    from kiln.cache.digest import digest_file
    from kiln.cache.remote import RemoteCache

    size = megabytes * MB
    build = (
        f'genrule(name = "blob", outs = ["blob.bin"], cmd = "head -c {size} /dev/urandom > $@")\n'
    )
    copies = Copies(tmp, {"big/BUILD": build})
    root, env = copies.new()
    upload = kiln(root, env, "//big:blob", f"--remote_cache={url}")
    digest = digest_file(root / "kiln-out/big/blob.bin")
    print(f"\ndownload of a {megabytes} MB blob (first build + upload: {upload:.2f}s)")

    def with_curl(run: int) -> float:
        target = tmp / f"curl-{run}.bin"
        start = time.perf_counter()
        subprocess.run(["curl", "-sS", "-o", str(target), f"{url}/cas/{digest.hash}"], check=True)
        seconds = time.perf_counter() - start
        assert target.stat().st_size == size
        target.unlink()
        return seconds

    def with_kiln(run: int) -> float:
        root, env = copies.new()
        events = tmp / f"events-{run}.json"
        kiln(root, env, "//big:blob", f"--remote_cache={url}", f"--build_event_json_file={events}")
        finished = [
            e
            for e in map(json.loads, events.read_text().splitlines())
            if e["type"] == "action_finished"
        ]
        assert finished[0]["cache"] == "remote", finished
        shutil.rmtree(root)
        shutil.rmtree(env["HOME"])
        return float(finished[0]["seconds"])

    def with_client(run: int) -> float:
        remote = RemoteCache(url)
        cas = ContentStore(tmp / f"client-cas-{run}")
        start = time.perf_counter()
        remote.download(digest, cas)
        seconds = time.perf_counter() - start
        remote.close()
        shutil.rmtree(tmp / f"client-cas-{run}")
        return seconds

    curl: list[float] = []
    action: list[float] = []
    client: list[float] = []
    for run in range(runs):
        # Alternate, each from a quiet disk: the previous one's writes flushed first.
        for measure, into in ((with_curl, curl), (with_kiln, action), (with_client, client)):
            os.sync()
            into.append(measure(run))

    report(
        size,
        {
            "curl -o FILE": curl,
            "kiln build, remote-hit action": action,
            "RemoteCache.download": client,
        },
    )


def report(size: int, figures: dict[str, list[float]]) -> None:
    """Median seconds and MB/s of each, and each as a share of the first's throughput."""
    base = 0.0
    for name, seconds in figures.items():
        median = statistics.median(seconds)
        rate = size / median / MB
        runs_text = ", ".join(f"{s:.3f}" for s in seconds)
        share = f"{rate / base * 100:4.0f} % of curl" if base else ""
        print(f"  {name:<31} {median:7.3f}s {rate:6.0f} MB/s {share:>13}   (runs: {runs_text})")
        base = base or rate


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--workspace", choices=["models", "genrules"], default="models")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--mb", type=int, default=500)
    parser.add_argument("--skip", choices=["builds", "download"], default=None)
    args = parser.parse_args(argv)
    sys.path.insert(0, str(REPO / "tools"))
    tmp = Path(tempfile.mkdtemp(prefix="kiln-bench-remote-"))
    try:
        with nginx(tmp / "nginx") as url:
            if args.skip != "builds":
                (tmp / "builds").mkdir()
                bench_builds(tmp / "builds", url, args.workspace, args.runs)
            if args.skip != "download":
                (tmp / "download").mkdir()
                bench_download(tmp / "download", url, args.mb, args.runs)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
