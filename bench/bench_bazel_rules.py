"""kiln beside Bazel building kiln's own rules, on the same models/ in one workspace.

    flock /tmp/kiln-heavy.lock .venv/bin/python bench/bench_bazel_rules.py     # 3 runs
    .venv/bin/python bench/bench_bazel_rules.py --runs 5 --targets //models:mlp_pt2

A copy of the repository in a temporary folder (which also holds HOME, kiln's
disk cache, Bazel's --output_user_root and an nginx) is one workspace for both
tools: the same BUILD files, the same action modules, kiln-out/ beside
bazel-out/. Each measurement runs both tools in turn, kiln first on even runs
and Bazel first on odd ones (the machine is shared and noisy), and the table
shows the median of --runs:

    cold            kiln: `kiln clean` and its disk cache emptied; Bazel: `bazel clean`
                    (server kept). Then build the targets (--jobs=2).
    no-op           the same build again: kiln is a fresh process every time; Bazel with
                    its server warm, and right after `bazel shutdown`.
    comment edit    a new comment line at the end of every model's source (models/*.py):
                    the export runs again and gives the same program, so the packaging is a
                    cache hit in both (early cutoff); validation and, for resnet, the
                    weights also read the source. The actions each tool ran are shown.
    remote hit      an empty local state (as for cold), then the build with
                    --remote_cache=<nginx>, which an earlier build of the same tool
                    filled: every action a remote hit.

Bazel runs with the repository's .bazelrc (processwrapper-sandbox, strict action env)
and KILN_PYTHON set to this interpreter; both tools run the same torch. Where
`bazel` is not installed the script says so and stops (tools/bazel.sh installs it).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PYTHON = sys.executable
KILN = [PYTHON, "-m", "kiln", "--nohome_rc"]
JOBS = "--jobs=2"
TARGETS = ["//models:mlp_pt2", "//models:resnet_pt2"]
COLD, NOOP, NOOP_COLD, EDIT, REMOTE = (
    "cold build",
    "no-op (Bazel warm server)",
    "no-op (Bazel after shutdown)",
    "comment edit",
    "remote cache hit build",
)
SKIP = {".git", ".venv", "kiln-out", "__pycache__", ".mypy_cache", ".ruff_cache", ".pytest_cache"}
SKIP |= {".hypothesis", "user.bazelrc", "gpu-check-out", ".device", ".whl"}


@dataclass
class Sample:
    seconds: float
    ran: int  # actions executed (not cache hits)


def run(argv: list[str], cwd: Path, env: dict[str, str]) -> tuple[float, str]:
    start = time.perf_counter()
    done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed:\n{done.stderr[-4000:]}")
    return seconds, done.stderr


def _count(pattern: str, text: str) -> int:
    found = re.findall(pattern, text)
    return int(found[-1]) if found else 0


class Kiln:
    name = "kiln"

    def __init__(self, root: Path, env: dict[str, str], targets: list[str]):
        self.root, self.env, self.targets = root, env, targets

    def build(self, *flags: str) -> Sample:
        seconds, err = run([*KILN, "build", JOBS, *flags, *self.targets], self.root, self.env)
        return Sample(seconds, _count(r"(\d+) executed", err))

    def clean(self) -> None:
        run([*KILN, "clean"], self.root, self.env)
        for part in ("cas", "ac"):
            shutil.rmtree(Path(self.env["XDG_CACHE_HOME"]) / "kiln" / part, True)

    def shutdown(self) -> None:
        """kiln has no server."""


class Bazel:
    name = "Bazel"

    def __init__(self, root: Path, env: dict[str, str], targets: list[str], user_root: Path):
        self.root, self.env, self.targets = root, env, targets
        self.startup = ["bazel", f"--output_user_root={user_root}", "--nohome_rc"]

    def build(self, *flags: str) -> Sample:
        argv = [*self.startup, "build", JOBS, "--color=no", "--curses=no", *flags, *self.targets]
        seconds, err = run(argv, self.root, self.env)
        return Sample(seconds, _count(r"(\d+) processwrapper-sandbox", err))

    def clean(self) -> None:
        run([*self.startup, "clean"], self.root, self.env)

    def shutdown(self) -> None:
        run([*self.startup, "shutdown"], self.root, self.env)


Tool = Kiln | Bazel


@dataclass
class Table:
    rows: dict[str, dict[str, list[Sample]]] = field(default_factory=dict)

    def add(self, row: str, tool: str, sample: Sample) -> None:
        self.rows.setdefault(row, {}).setdefault(tool, []).append(sample)


def interleaved(
    table: Table, row: str, tools: list[Tool], runs: int, measure: Callable[[Tool], Sample]
) -> None:
    for i in range(runs):
        for tool in tools if i % 2 == 0 else list(reversed(tools)):
            table.add(row, tool.name, measure(tool))
        print(f"  {row}: run {i + 1}/{runs}", file=sys.stderr, flush=True)


def copy_repository(target: Path) -> Path:
    def ignore(directory: str, names: list[str]) -> list[str]:
        del directory
        return [n for n in names if n in SKIP or n.startswith("bazel-") or n.endswith(".egg-info")]

    shutil.copytree(REPO, target, symlinks=True, ignore=ignore)
    shutil.rmtree(target / "bench" / "out", ignore_errors=True)
    return target


def start_nginx(directory: Path) -> tuple[subprocess.Popen[bytes], str]:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen(
        ["bash", str(REPO / "tools" / "nginx_cache.sh"), "serve", str(directory), str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return server, f"http://127.0.0.1:{port}"
        time.sleep(0.1)
    server.terminate()
    raise SystemExit("nginx did not start (tools/nginx_cache.sh)")


def report(table: Table, runs: int, targets: list[str]) -> None:
    print(f"\nkiln vs Bazel 4.2.3 on kiln's rules: {' '.join(targets)}")
    print(f"median of {runs} runs, {JOBS}; actions run: not cache hits\n")
    head = f"{'measurement':<30} {'kiln':>9} {'Bazel':>9} {'kiln/Bazel':>11}  actions run"
    print(head)
    print("-" * len(head))
    for row, by_tool in table.rows.items():
        kiln = statistics.median(s.seconds for s in by_tool["kiln"])
        bazel = statistics.median(s.seconds for s in by_tool["Bazel"])
        ran = [statistics.median(s.ran for s in by_tool[t]) for t in ("kiln", "Bazel")]
        ratio = f"{kiln / bazel:.2f}"
        print(f"{row:<30} {_fmt(kiln):>9} {_fmt(bazel):>9} {ratio:>11}  {ran[0]:g} / {ran[1]:g}")


def _fmt(seconds: float) -> str:
    return f"{seconds * 1000:.0f} ms" if seconds < 1 else f"{seconds:.2f} s"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--targets", nargs="+", default=TARGETS)
    parser.add_argument("--keep", action="store_true", help="keep the temporary folder")
    args = parser.parse_args(argv)
    if shutil.which("bazel") is None:
        print("bazel is not installed: tools/bazel.sh install (Debian's bazel-bootstrap)")
        return 1
    scratch = Path(tempfile.mkdtemp(prefix="kiln-bench-bazel-rules-"))
    root = copy_repository(scratch / "kiln")
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(scratch / "home"),
        "XDG_CACHE_HOME": str(scratch / "cache"),
        "KILN_PYTHON": PYTHON,
        "LANG": "C.UTF-8",
    }
    kiln = Kiln(root, env, args.targets)
    bazel = Bazel(root, env, args.targets, scratch / "bazel-root")
    tools: list[Tool] = [kiln, bazel]
    server, url = start_nginx(scratch / "nginx")
    table = Table()
    edits = 0

    def cold(tool: Tool) -> Sample:
        tool.clean()
        return tool.build()

    def noop_cold(tool: Tool) -> Sample:
        tool.shutdown()
        return tool.build()

    def edit(tool: Tool) -> Sample:
        nonlocal edits
        edits += 1
        for source in sorted((root / "models").glob("*.py")):
            with source.open("a") as f:
                f.write(f"# edit {edits}\n")
        return tool.build()

    def remote(tool: Tool) -> Sample:
        tool.clean()
        return tool.build(f"--remote_cache={url}")

    try:
        print(f"warming up in {scratch} ...", file=sys.stderr, flush=True)
        for tool in tools:  # repositories fetched, caches and the remote filled
            tool.build(f"--remote_cache={url}")
        interleaved(table, COLD, tools, args.runs, cold)
        interleaved(table, NOOP, tools, args.runs, lambda tool: tool.build())
        interleaved(table, NOOP_COLD, tools, args.runs, noop_cold)
        # Each tool's own edit: the other then builds one edit behind, which also counts.
        for i in range(args.runs):
            for tool in tools if i % 2 == 0 else list(reversed(tools)):
                tool.build()  # up to date with the previous edit
                table.add(EDIT, tool.name, edit(tool))
            print(f"  {EDIT}: run {i + 1}/{args.runs}", file=sys.stderr, flush=True)
        # The remote holds what the warm-up built, from sources the edits changed since:
        # fill it with the current ones, or the first remote run misses (all of it with --runs 1).
        for tool in tools:
            tool.build(f"--remote_cache={url}")
        interleaved(table, REMOTE, tools, args.runs, remote)
    finally:
        bazel.shutdown()
        server.terminate()
        server.wait(10)
        if not args.keep:
            shutil.rmtree(scratch, ignore_errors=True)
    report(table, args.runs, args.targets)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
