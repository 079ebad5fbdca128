"""kiln beside Bazel on the same synthetic monorepo of genrules running Python.

    .venv/bin/python bench/bench_bazel.py                  # 100, 500 and 1,000 targets
    .venv/bin/python bench/bench_bazel.py --targets 1000 --runs 5

For each size, bench/twin_workspace.py writes one description twice, as a
kiln and as a Bazel workspace, in a temporary directory that also holds
HOME, kiln's cache and Bazel's --output_user_root. Every measurement runs
both tools in turn, kiln first on even runs and Bazel first on odd ones, and
the table shows the median of --runs runs:

    full build      kiln: `kiln clean` and its disk cache emptied; Bazel: `bazel
                    clean` (server kept). Then `build --jobs=2 //...`.
    no-op           the same build again. kiln has no server: every run is a
                    fresh process. Bazel twice: with its server warm, and right
                    after `bazel shutdown` (a cold start, not timed itself).
    one change      edit the source of a genrule nothing depends on: one action
    disk cache      `--disk_cache=DIR` filled once by a build, then per run:
                    clean, and build everything again from DIR
    peak memory     MB, the most any run of that size used: kiln's process and
                    the largest of its actions (ru_maxrss from wait4, what
                    /usr/bin/time -f %M prints); for Bazel the client's
                    ru_maxrss plus the server JVM's peak RSS (VmHWM in
                    /proc/PID/status, read before each shutdown and at the end)

Bazel runs with --incompatible_strict_action_env (a fixed PATH, as kiln's
genrules have) and --spawn_strategy=processwrapper-sandbox: a symlink tree
per action without namespaces, like kiln's execroots. Both tools run the
same /usr/bin/python3 on the same tool.py. Where `bazel` is not on PATH the
Bazel columns are left out, with a message saying so; nothing is installed.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import twin_workspace

REPO = Path(__file__).resolve().parent.parent
KILN = str(REPO / ".venv" / "bin" / "kiln")
JOBS = "--jobs=2"
BAZEL_FLAGS = [
    JOBS,
    "--incompatible_strict_action_env",
    "--spawn_strategy=processwrapper-sandbox",
    "--color=no",
    "--curses=no",
]
FULL = "full build"
NOOP = "no-op (Bazel warm server)"
NOOP_COLD = "no-op (Bazel after shutdown)"
CHANGE = "one changed source"
DISK_CACHE = "clean build from disk cache"
# Goals for kiln: the most kiln/Bazel may be (a no-op 5x faster than a cold Bazel: 0.2).
GOALS = {FULL: 1.0, NOOP: 1.0, NOOP_COLD: 0.2, DISK_CACHE: 1.0}


@dataclass
class Sample:
    seconds: float
    peak_kb: int


class Tool:
    """One tool on its workspace: how to build, clean and what it used."""

    name = ""

    def __init__(self, root: Path, scratch: Path, env: dict[str, str]):
        self.root = root
        self.scratch = scratch
        self.env = env
        self.disk_cache = scratch / f"{self.name}-disk-cache"
        self.peak_kb = 0

    def build(self, *flags: str) -> Sample:
        sample = run(self.build_argv(*flags), self.root, self.env)
        self.peak_kb = max(self.peak_kb, sample.peak_kb)
        return sample

    def build_argv(self, *flags: str) -> list[str]:
        raise NotImplementedError

    def clean(self, *, everything: bool = False) -> None:
        raise NotImplementedError


class Kiln(Tool):
    name = "kiln"

    def build_argv(self, *flags: str) -> list[str]:
        return [KILN, "build", JOBS, *flags, "//..."]

    def clean(self, *, everything: bool = False) -> None:
        run([KILN, "clean"], self.root, self.env)
        if everything:
            # The default disk cache; the loading and analysis caches stay, as
            # a Bazel server keeps its packages in memory across `bazel clean`.
            for part in ("cas", "ac"):
                shutil.rmtree(Path(self.env["XDG_CACHE_HOME"]) / "kiln" / part, True)


class Bazel(Tool):
    name = "bazel"

    def __init__(self, root: Path, scratch: Path, env: dict[str, str]):
        super().__init__(root, scratch, env)
        self.user_root = scratch / "bazel-root"
        self.server_kb = 0

    def startup(self) -> list[str]:
        return ["bazel", f"--output_user_root={self.user_root}", "--nohome_rc"]

    def build_argv(self, *flags: str) -> list[str]:
        return [*self.startup(), "build", *BAZEL_FLAGS, *flags, "//..."]

    def build(self, *flags: str) -> Sample:
        sample = super().build(*flags)
        self._read_server_peak()
        return sample

    def clean(self, *, everything: bool = False) -> None:
        del everything  # `bazel clean` empties the action cache; there is no disk cache
        run([*self.startup(), "clean"], self.root, self.env)

    def shutdown(self) -> None:
        self._read_server_peak()
        run([*self.startup(), "shutdown"], self.root, self.env)

    def _read_server_peak(self) -> None:
        for pid_file in self.user_root.glob("*/server/server.pid.txt"):
            with contextlib.suppress(OSError, ValueError):
                status = Path(f"/proc/{int(pid_file.read_text())}/status").read_text()
                for line in status.splitlines():
                    if line.startswith("VmHWM:"):
                        self.server_kb = max(self.server_kb, int(line.split()[1]))


def run(argv: list[str], cwd: Path, env: dict[str, str]) -> Sample:
    """Run to completion; wall-clock seconds and peak RSS (the process or a descendant)."""
    with tempfile.TemporaryFile() as output:
        start = time.perf_counter()
        process = subprocess.Popen(argv, cwd=cwd, env=env, stdout=output, stderr=output)
        _, status, usage = os.wait4(process.pid, 0)
        seconds = time.perf_counter() - start
        process.returncode = os.waitstatus_to_exitcode(status)
        if process.returncode:
            output.seek(0)
            tail = output.read()[-4000:].decode(errors="replace")
            raise SystemExit(f"{' '.join(argv)} failed ({process.returncode}) in {cwd}:\n{tail}")
    return Sample(seconds, usage.ru_maxrss)


@dataclass
class Row:
    name: str
    kiln: list[float] = field(default_factory=list)
    bazel: list[float] = field(default_factory=list)
    unit: str = "s"


def measure(tools: list[Tool], runs: int, leaf: dict[str, Path]) -> list[Row]:
    """Every row for one size; `leaf` is the source to edit, per tool."""
    kiln = tools[0]
    bazel = tools[1] if len(tools) > 1 else None
    rows = {name: Row(name) for name in (FULL, NOOP, NOOP_COLD, CHANGE, DISK_CACHE)}

    def alternate(step: Callable[[Tool, int], None]) -> None:
        for i in range(runs):
            for tool in tools if i % 2 == 0 else tools[::-1]:
                step(tool, i)

    def record(row: Row, tool: Tool, sample: Sample) -> None:
        (row.kiln if tool is kiln else row.bazel).append(sample.seconds)

    for tool in tools:  # warm-up, untimed: bytecode, Bazel's server, the OS caches
        tool.build()

    def full(tool: Tool, _: int) -> None:
        tool.clean(everything=True)
        record(rows[FULL], tool, tool.build())

    def noop(tool: Tool, _: int) -> None:
        record(rows[NOOP], tool, tool.build())
        if isinstance(tool, Bazel):
            tool.shutdown()
            record(rows[NOOP_COLD], tool, tool.build())

    def change(tool: Tool, i: int) -> None:
        leaf[tool.name].write_text(f"edit {i}\n")
        record(rows[CHANGE], tool, tool.build())

    def disk_cache(tool: Tool, _: int) -> None:
        tool.clean()
        record(rows[DISK_CACHE], tool, tool.build(f"--disk_cache={tool.disk_cache}"))

    alternate(full)
    alternate(noop)
    rows[NOOP_COLD].kiln = list(rows[NOOP].kiln)  # kiln always starts cold
    alternate(change)
    for tool in tools:  # fill each disk cache, untimed
        tool.clean()
        tool.build(f"--disk_cache={tool.disk_cache}")
    alternate(disk_cache)

    memory = Row("peak memory", [kiln.peak_kb / 1024], unit="MB")
    if bazel is not None:
        assert isinstance(bazel, Bazel)
        bazel.shutdown()
        memory.bazel = [(bazel.peak_kb + bazel.server_kb) / 1024]
    return [*rows.values(), memory]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument(
        "--targets", type=int, action="append", help="workspace size(s) (default 100 500 1000)"
    )
    parser.add_argument("--runs", type=int, default=5, help="timed runs per measurement")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--keep", action="store_true", help="keep the generated workspaces")
    options = parser.parse_args(argv)

    have_bazel = shutil.which("bazel") is not None
    if not have_bazel:
        print(
            "bazel is not on PATH: measuring kiln alone, the Bazel columns stay empty.\n"
            "  (On Debian: apt-get install bazel-bootstrap; this script installs nothing.)\n",
            flush=True,
        )
    load = os.getloadavg()[0]
    tables: list[tuple[int, list[Row]]] = []
    for size in options.targets or [100, 500, 1000]:
        start = time.perf_counter()
        print(f"{size} targets: measuring ...", file=sys.stderr, flush=True)
        scratch = Path(tempfile.mkdtemp(prefix=f"kiln-vs-bazel-{size}-"))
        try:
            tables.append((size, _one_size(scratch, size, options, have_bazel)))
        finally:
            if options.keep:
                print(f"kept {scratch}", file=sys.stderr)
            else:
                shutil.rmtree(scratch, ignore_errors=True)
        print(f"{size} targets: {time.perf_counter() - start:.0f} s", file=sys.stderr, flush=True)
    print_table(tables, options.runs)
    print(f"\n{os.cpu_count()} CPUs; load average (1 min) before the runs: {load:.2f}")
    return 0


def _one_size(scratch: Path, size: int, options: argparse.Namespace, have_bazel: bool) -> list[Row]:
    home = scratch / "home"
    env = {**os.environ, "HOME": str(home), "XDG_CACHE_HOME": str(home / ".cache")}
    # Bytecode is cached, as on a user's machine, but out of the source tree.
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPYCACHEPREFIX"] = str(scratch / "pycache")
    targets = twin_workspace.describe(size, options.seed)
    tools: list[Tool] = []
    leaf = {}
    for kind in (Kiln, Bazel) if have_bazel else (Kiln,):
        root = scratch / kind.name
        twin_workspace.write(root, targets, "kiln" if kind is Kiln else "bazel")
        leaf[kind.name] = twin_workspace.leaf_source(root, targets)
        tools.append(kind(root, scratch, env))
    try:
        return measure(tools, options.runs, leaf)
    finally:
        for tool in tools:
            if isinstance(tool, Bazel):
                with contextlib.suppress(SystemExit):
                    tool.shutdown()


def print_table(tables: list[tuple[int, list[Row]]], runs: int) -> None:
    print(f"kiln vs Bazel, genrules running python3; median of {runs} runs, --jobs=2\n")
    header = f"{'targets':>7}  {'measurement':<30} {'kiln':>9} {'Bazel':>9} {'kiln/Bazel':>10}"
    print(header + "  goal")
    print("-" * (len(header) + 16))
    for size, rows in tables:
        for row in rows:
            kiln = statistics.median(row.kiln)
            shown = [_value(kiln, row.unit)]
            ratio = goal = ""
            if row.bazel:
                bazel = statistics.median(row.bazel)
                shown.append(_value(bazel, row.unit))
                ratio = f"{kiln / bazel:.2f}"
                if row.name in GOALS:
                    most = GOALS[row.name]
                    goal = f"<= {most:.2f} " + ("met" if kiln / bazel <= most else "MISSED")
            else:
                shown.append("-")
            print(f"{size:>7}  {row.name:<30} {shown[0]:>9} {shown[1]:>9} {ratio:>10}  {goal}")


def _value(value: float, unit: str) -> str:
    if unit == "MB":
        return f"{value:.0f} MB"
    return f"{value * 1000:.0f} ms" if value < 1 else f"{value:.2f} s"


if __name__ == "__main__":
    raise SystemExit(main())
