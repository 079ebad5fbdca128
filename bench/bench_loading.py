"""How long `kiln query` takes in a fresh process, on a synthetic workspace.

    .venv/bin/python bench/bench_loading.py                # 1,000 packages
    .venv/bin/python bench/bench_loading.py --packages 100 --packages 1000 --runs 7

For each size it generates a workspace (bench/synth.py) in a temporary
directory and times, as separate processes of `.venv/bin/kiln` run from the
workspace root (HOME and XDG_CACHE_HOME pointed at a temporary directory):

    cold      `kiln query //...`, graph cache deleted before each run: every
              BUILD file is evaluated
    warm      `kiln query //...` served from the graph cache
    deps      `kiln query 'deps(//pkgNNNN:stamp)'` of the last package, warm

beside two baselines in the same venv: `python -c pass` and
`python -c "import kiln.cli"`. Figures are wall-clock seconds, median and
minimum of --runs runs, each after one untimed warm-up run. Bytecode is
cached (under the temporary directory, PYTHONPYCACHEPREFIX) as it would be
on a user's machine, even where PYTHONDONTWRITEBYTECODE is set.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import synth

REPO = Path(__file__).resolve().parent.parent
VENV_BIN = REPO / ".venv" / "bin"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument(
        "--packages", type=int, action="append", help="workspace size(s) (default 1000)"
    )
    parser.add_argument("--runs", type=int, default=7, help="timed runs per measurement")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--keep", action="store_true", help="keep the generated workspaces")
    options = parser.parse_args(argv)

    load = os.getloadavg()[0]
    scratch = Path(tempfile.mkdtemp(prefix="kiln-bench-"))
    try:
        home = scratch / "home"
        home.mkdir()
        env = {**os.environ, "HOME": str(home), "XDG_CACHE_HOME": str(home / ".cache")}
        # Bytecode is cached, as on a user's machine, but out of the source tree.
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = str(scratch / "pycache")
        python = str(VENV_BIN / "python")
        kiln = str(VENV_BIN / "kiln")
        cache_dir = home / ".cache" / "kiln"

        rows: list[tuple[str, str, list[float]]] = []
        for name, command in (
            ("python -c pass", [python, "-c", "pass"]),
            ("python -c 'import kiln.cli'", [python, "-c", "import kiln.cli"]),
        ):
            rows.append((name, "", _time(command, REPO, env, options.runs)))

        for packages in options.packages or [1000]:
            workspace = scratch / f"ws{packages}"
            synth.generate(workspace, packages, seed=options.seed)
            everything = [kiln, "query", "//..."]
            last = synth.package_name(packages - 1)
            deps = [kiln, "query", f"deps(//{last}:stamp)"]

            def clear_cache() -> None:
                shutil.rmtree(cache_dir, ignore_errors=True)

            count = _count(everything, workspace, env)
            rows.append(
                (
                    f"{packages} pkgs: query //... cold",
                    f"{count} targets",
                    _time(everything, workspace, env, options.runs, before=clear_cache),
                )
            )
            _run(everything, workspace, env)  # fill the graph cache
            rows.append(
                (
                    f"{packages} pkgs: query //... warm",
                    f"{count} targets",
                    _time(everything, workspace, env, options.runs),
                )
            )
            rows.append(
                (
                    f"{packages} pkgs: query 'deps(//{last}:stamp)' warm",
                    f"{_count(deps, workspace, env)} targets",
                    _time(deps, workspace, env, options.runs),
                )
            )
            if options.keep:
                print(f"kept {workspace}")

        _print_table(rows, options.runs)
        # Other work on the machine shows in the medians first: say how busy it was.
        print(f"load average (1 min) before the runs: {load:.2f}")
    finally:
        if not options.keep:
            shutil.rmtree(scratch, ignore_errors=True)
    return 0


def _run(command: list[str], cwd: Path, env: dict[str, str]) -> str:
    result = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed ({result.returncode}):\n{result.stderr}")
    return result.stdout


def _count(command: list[str], cwd: Path, env: dict[str, str]) -> int:
    return len(_run(command, cwd, env).splitlines())


def _time(
    command: list[str],
    cwd: Path,
    env: dict[str, str],
    runs: int,
    before: Callable[[], None] | None = None,
) -> list[float]:
    times: list[float] = []
    for run in range(runs + 1):
        if before is not None:
            before()
        start = time.perf_counter()
        result = subprocess.run(command, cwd=cwd, env=env, stdout=subprocess.DEVNULL, check=False)
        elapsed = time.perf_counter() - start
        if result.returncode != 0:
            raise SystemExit(f"{' '.join(command)} failed ({result.returncode})")
        if run:  # the first run only warms the OS caches
            times.append(elapsed)
    return times


def _print_table(rows: list[tuple[str, str, list[float]]], runs: int) -> None:
    width = max(len(name) for name, _, _ in rows)
    print(f"{'':{width}}  {'median':>8}  {'min':>8}  result   ({runs} runs, {os.cpu_count()} CPUs)")
    for name, note, times in rows:
        median, best = statistics.median(times), min(times)
        print(f"{name:{width}}  {median:7.3f}s  {best:7.3f}s  {note}")


if __name__ == "__main__":
    raise SystemExit(main())
