"""A fuzz of kiln's loading and query: random labels, query expressions and mutated
BUILD and .bzl files, each run through `kiln query` in this process.

    .venv/bin/python -m tests.fuzz_loading --cases 20000 --seed 11

Every case must end in exit code 0 or 1 with no Python traceback (a bug in
kiln exits 2 and prints one); the counts are printed as one JSON line. A
crash of the interpreter itself (a segfault) ends the run: the last case
started is in `<workdir>/current-case.txt`. tests/e2e/test_fuzz_loading.py
runs it in the slow tier; README.md ("Robustness") has the figures.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import random
import sys
import tempfile
from collections import Counter
from pathlib import Path

from kiln.cli import main

# -- the workspace every case runs in ------------------------------------------

LIB_BUILD = """\
package(default_visibility = ["//visibility:public"])

exports_files(["data.txt"])

filegroup(name = "common", srcs = ["common.py"])
filegroup(name = "layers", srcs = ["layers.py", ":common"])
"""

MACROS = """\
def group(name, srcs = [], **kwargs):
    native.filegroup(name = name, srcs = srcs, **kwargs)

def gen(name, out = None, **kwargs):
    native.genrule(name = name, outs = [out or name + ".txt"], cmd = "echo > $@", **kwargs)
"""

# Valid BUILD files the mutations start from.
SEEDS = [
    """\
load("//tools:macros.bzl", "gen", "group")

genrule(
    name = "report",
    srcs = ["//lib:data.txt", ":notes"],
    outs = ["report.txt"],
    cmd = "cat $(SRCS) > $@",
)

group(name = "notes", srcs = glob(["*.md"], allow_empty = True))
gen(name = "stamp", out = "stamp.txt", tags = ["manual"])
""",
    """\
package(default_visibility = ["//visibility:public"])

torch_model(
    name = "mlp",
    src = "mlp.py",
    deps = ["//lib:layers"],
    factory = "mlp:build",
    inputs = [{"name": "x", "shape": [8, 10], "dtype": "float32"}],
    dynamic_dims = [{"name": "batch", "min": 1, "max": 64, "axes": {"x": 0}}],
)

aoti_package(name = "mlp_pt2", model = ":mlp")
""",
    """\
filegroup(
    name = "srcs",
    srcs = glob(["**/*.py"], exclude = ["skip/**"]) + ["mlp.py"],
    visibility = ["//app:__subpackages__"],
)

genrule(
    name = "tool",
    outs = ["tool.sh"],
    cmd = "printf '#!/bin/sh\\\\n' > $@",
    executable = True,
)
""",
]

# What mutations insert: pieces of Starlark, of labels, and the shapes that once
# crashed (deep nesting, long chains) at sizes around the guard's limit.
FRAGMENTS = [
    "(",
    ")",
    "[",
    "]",
    "{",
    "}",
    ",",
    ":",
    "=",
    "==",
    "+",
    "-",
    "*",
    "%",
    ".",
    "\\",
    "\n",
    "\n    ",
    '"',
    "'",
    '"""',
    "#",
    "name",
    "srcs",
    "outs",
    "glob(",
    "load(",
    "package(",
    "exports_files(",
    "native.",
    "//",
    "//lib:common",
    ":mlp",
    "//visibility:public",
    "__pkg__",
    "None",
    "True",
    "1",
    "-1",
    "0",
    "[]",
    "{}",
    "lambda: 1",
    "def f():\n  pass\n",
    "if True:\n  x = 1\n",
    "for x in []:\n  pass\n",
    "\x00",
    "\udcff",
    "é",
    "$(location :x)",
    "$(",
    "$@",
    "outs = []",
    "visibility = ['//b:y']",
    "x = 1 / 0\n",
    "fail('x')\n",
    "[" * 1100,
    "]" * 1100,
    " + 1" * 1100,
    '{"k": ' * 600,
    "not " * 1100,
    "struct(a = 1).a",
    "range(10)",
    "'%s' % (1,)",
    "'a' * 1000",
]

LABEL_PARTS = [
    "//",
    "/",
    ":",
    "...",
    "*",
    "all",
    "all-targets",
    "lib",
    "app",
    "p",
    "models",
    "common",
    "mlp",
    "data.txt",
    "@",
    "@@",
    "@repo",
    "-",
    "..",
    ".",
    " ",
    "\t",
    "\n",
    "a b",
    "é",
    "$",
    "\\",
    '"',
    "'",
    "(",
    ")",
    "+",
    "^",
    "[",
    "]",
    "~",
    "x" * 300,
    "__pkg__",
    "BUILD",
]

QUERY_FUNCTIONS = [
    "deps({e})",
    "deps({e}, {n})",
    "rdeps(//..., {e})",
    "rdeps({e}, {e}, {n})",
    "kind({w}, {e})",
    "filter({w}, {e})",
    "attr({a}, {w}, {e})",
    "labels({a}, {e})",
    "tests({e})",
    "somepath({e}, {e})",
    "allpaths({e}, {e})",
    "set({words})",
    "({e})",
]
QUERY_WORDS = [
    "//...",
    "//lib:all",
    "//lib:*",
    "//app:all",
    "//lib:common",
    "//lib:layers",
    "//lib:common.py",
    "//nowhere:x",
    ":common",
    "lib",
    "//lib:all-targets",
    "'//lib:common'",
    '"//lib/..."',
    "//app/...",
    "//:all",
]
REGEXES = [
    "'.*'",
    "genrule",
    "'(a+)+$'",
    "'((((.*)*)*)*)*x'",
    "'('",
    "'[a-'",
    "'(a)\\1'",
    "'a(?=b)'",
    "'x{1000}{1000}'",
    "py$",
    "'^//lib'",
    "'\\\\'",
    "''",
    "rule",
]


def _workspace(root: Path) -> None:
    files = {
        "WORKSPACE": "",
        "lib/BUILD": LIB_BUILD,
        "lib/common.py": "",
        "lib/layers.py": "",
        "lib/data.txt": "",
        "tools/BUILD": "",
        "tools/macros.bzl": MACROS,
        "app/BUILD": SEEDS[0],
        "app/mlp.py": "",
        "app/notes.md": "",
        "app/sub/BUILD": 'filegroup(name = "s", srcs = ["//lib:common"])\n',
    }
    for path, text in files.items():
        target = root / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)


# -- generators -----------------------------------------------------------------


VALID_LABELS = ["//lib:common", "//app:report", "//lib:data.txt", "//app/...", "//lib:all", "lib"]


def random_label(rng: random.Random) -> str:
    if rng.random() < 0.15:
        return rng.choice(VALID_LABELS)
    return "".join(rng.choice(LABEL_PARTS) for _ in range(rng.randint(1, 7)))


def random_query(rng: random.Random, depth: int = 0) -> str:
    roll = rng.random()
    if depth > 3 or roll < 0.3:
        return rng.choice([*QUERY_WORDS, random_label(rng)])
    if roll < 0.45:
        ops = [" + ", " - ", " ^ ", " union ", " except ", " intersect ", "+", " "]
        return rng.choice(ops).join(random_query(rng, depth + 1) for _ in range(rng.randint(2, 4)))
    if roll < 0.5:  # the shapes of issue 11, B9: long chains, deep nesting
        n = rng.choice([50, 99, 100, 101, 200, 1000, 3000])
        shape = rng.choice(["(" * n + "//lib:common" + ")" * n, " + ".join(["//lib:common"] * n)])
        return shape if rng.random() < 0.9 else shape[: rng.randrange(len(shape))]
    template = rng.choice(QUERY_FUNCTIONS)
    text = template.format(
        e="{e}",
        n=rng.choice(["0", "1", "2", "-1", "x", "99999999999999999999"]),
        w=rng.choice(REGEXES),
        a=rng.choice(["srcs", "visibility", "name", "cmd", "tags", "nothing", "deps"]),
        words=" ".join(rng.choice(QUERY_WORDS) for _ in range(rng.randint(0, 3))),
    )
    while "{e}" in text:
        text = text.replace("{e}", random_query(rng, depth + 1), 1)
    if rng.random() < 0.1:  # cut short or garbled
        cut = rng.randrange(len(text) + 1)
        text = text[:cut] + rng.choice(["", ")", "(", ",", "'", "$", "\x00"]) + text[cut:]
    return text


def mutate(rng: random.Random, text: str) -> str:
    for _ in range(rng.randint(1, 4)):
        where = rng.randrange(len(text) + 1)
        roll = rng.random()
        if roll < 0.35:
            text = text[:where] + rng.choice(FRAGMENTS) + text[where:]
        elif roll < 0.6:
            text = text[:where] + text[where + rng.randint(1, 20) :]
        elif roll < 0.8:  # duplicate a stretch (a target declared twice, a repeated argument)
            end = min(len(text), where + rng.randint(1, 200))
            text = text[:end] + text[where:end] + text[end:]
        else:  # swap two lines
            lines = text.split("\n")
            i, j = rng.randrange(len(lines)), rng.randrange(len(lines))
            lines[i], lines[j] = lines[j], lines[i]
            text = "\n".join(lines)
    return text


# -- running ----------------------------------------------------------------------


def _run(args: list[str]) -> tuple[int, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(args)
        except BaseException as error:  # escaping main() is what is counted
            print(f"Traceback (escaped main): {error!r}", file=err)
            code = 2
    return code, err.getvalue()


def fuzz(
    cases: int, seed: int, workdir: Path, shard: tuple[int, int] = (0, 1)
) -> dict[str, object]:
    """Runs the cases whose number is `index` modulo `count` (shard = (index, count)); every
    case is made all the same, so the shards of one seed together run its whole set."""
    index, count = shard
    rng = random.Random(seed)
    root = workdir / "ws"
    _workspace(root)
    os.chdir(root)
    progress = workdir / "current-case.txt"
    counts: Counter[str] = Counter()
    exits: Counter[str] = Counter()
    failures: list[dict[str, object]] = []
    for number in range(cases):
        kind = ("label", "query", "build_file")[number % 3]
        if kind == "label":
            args = ["query", random_label(rng)]
        elif kind == "query":
            args = ["query", random_query(rng)]
        else:
            target = "app/BUILD" if rng.random() < 0.8 else "tools/macros.bzl"
            seed_text = rng.choice(SEEDS) if target == "app/BUILD" else MACROS
            mutated = mutate(rng, seed_text)
            args = ["query", rng.choice(["//...", "deps(//app:all)", "//app:*"])]
        if number % count != index:
            continue
        if kind == "build_file":
            (root / target).write_text(mutated, errors="surrogateescape")
        progress.write_text(json.dumps({"case": number, "kind": kind, "args": args}))
        code, err = _run(args)
        counts[kind] += 1
        exits[f"{kind} exit {code}"] += 1
        traceback = "Traceback" in err
        if traceback:
            counts["tracebacks"] += 1
        if code not in (0, 1):
            counts["other exit codes"] += 1
        if (traceback or code not in (0, 1)) and len(failures) < 20:
            failures.append({"case": number, "args": args, "code": code, "stderr": err[-2000:]})
        if kind == "build_file":  # the next case starts from the valid file again
            (root / target).write_text(SEEDS[0] if target == "app/BUILD" else MACROS)
    return {
        "cases": sum(counts[k] for k in ("label", "query", "build_file")),
        "seed": seed,
        "tracebacks": counts["tracebacks"],
        "other_exit_codes": counts["other exit codes"],
        "by_kind": {k: counts[k] for k in ("label", "query", "build_file")},
        "exits": dict(sorted(exits.items())),
        "failures": failures,
    }


def main_cli(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=20_000)
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument("--workdir", type=Path, default=None)
    parser.add_argument(
        "--shard",
        default="0/1",
        help="K/N: only the cases whose number is K modulo N (N processes run one seed's set)",
    )
    options = parser.parse_args(argv)
    index, count = (int(part) for part in options.shard.split("/"))
    with tempfile.TemporaryDirectory(prefix="kiln-fuzz-") as scratch:
        workdir = options.workdir or Path(scratch)
        workdir.mkdir(parents=True, exist_ok=True)
        os.environ["XDG_CACHE_HOME"] = str(workdir / "cache")
        os.environ["HOME"] = str(workdir / "home")
        result = fuzz(options.cases, options.seed, workdir, (index, count))
    print(json.dumps(result))
    return 0 if not result["tracebacks"] and not result["other_exit_codes"] else 1


if __name__ == "__main__":
    sys.exit(main_cli())
