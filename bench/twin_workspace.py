"""One synthetic monorepo, written twice: as a kiln workspace and as a Bazel one.

    .venv/bin/python bench/twin_workspace.py /tmp/twin --targets 1000

describe() makes the description: `targets` genrules in packages `p000/`,
`p001/`, ... of five each. Genrule `gK` of package `pN` reads its own
source `srcK.txt`, the same-named genrule of a package 1 to 4 below it, and
every second one also a random genrule of any lower package: about 1.5
cross-package edges per target, only towards lower packages (no cycle), so
nothing depends on the last package. Every action is the same small Python
program, `//tools:tool.py OUT IN...`, which reads each input and writes one
line per input: its SHA-256, size and name.

write() turns a description into files. The BUILD files, the sources and
the tool are byte for byte the same for both tools, since kiln reads
Bazel's genrule; only the name of the workspace file's comment differs. The
output depends only on the arguments of describe().
"""

from __future__ import annotations

import argparse
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

PER_PACKAGE = 5

Flavor = Literal["kiln", "bazel"]

TOOL_PY = '''\
"""tool.py OUT IN...: one line per input, its SHA-256, size and name."""

import hashlib
import os
import sys

out, inputs = sys.argv[1], sys.argv[2:]
lines = []
for path in inputs:
    with open(path, "rb") as f:
        data = f.read()
    lines.append(f"{hashlib.sha256(data).hexdigest()} {len(data)} {os.path.basename(path)}\\n")
with open(out, "w") as f:
    f.writelines(lines)
'''

TOOLS_BUILD = """\
package(default_visibility = ["//visibility:public"])

exports_files(["tool.py"])
"""

GENRULE = """\
genrule(
    name = "{name}",
    srcs = [{srcs}],
    outs = ["{name}.out"],
    cmd = "python3 $(location //tools:tool.py) $@ $(SRCS)",
    tools = ["//tools:tool.py"],
)
"""


@dataclass(frozen=True)
class Target:
    package: str
    name: str
    deps: tuple[str, ...]  # labels of genrules in lower packages

    @property
    def source(self) -> str:
        return f"src{self.name[1:]}.txt"


def package_name(index: int) -> str:
    return f"p{index:03d}"


def describe(targets: int, seed: int = 0) -> list[Target]:
    """`targets` genrules (a multiple of five), dependencies first."""
    if targets <= 0 or targets % PER_PACKAGE:
        raise ValueError(f"targets must be a positive multiple of {PER_PACKAGE}: {targets}")
    rng = random.Random(seed)
    found = []
    for index in range(targets // PER_PACKAGE):
        for rule in range(PER_PACKAGE):
            deps = []
            if index:
                near = package_name(max(0, index - rng.randint(1, 4)))
                deps.append(f"//{near}:g{rule}")
                if rng.random() < 0.5:
                    far = package_name(rng.randrange(index))
                    deps.append(f"//{far}:g{rng.randrange(PER_PACKAGE)}")
            found.append(Target(package_name(index), f"g{rule}", tuple(dict.fromkeys(deps))))
    return found


def leaf_source(root: Path, targets: list[Target]) -> Path:
    """The source of a target nothing depends on: editing it reruns one action."""
    last = targets[-1]
    return root / last.package / last.source


def write(root: Path, targets: list[Target], flavor: Flavor) -> None:
    """The workspace of `targets` under `root` (created), for kiln or for Bazel."""
    root.mkdir(parents=True)
    tool = "kiln" if flavor == "kiln" else "Bazel"
    _write(root / "WORKSPACE", f'# A synthetic {tool} workspace.\nworkspace(name = "twin")\n')
    _write(root / "BUILD", "")
    _write(root / "tools" / "BUILD", TOOLS_BUILD)
    _write(root / "tools" / "tool.py", TOOL_PY)
    by_package: dict[str, list[Target]] = {}
    for target in targets:
        by_package.setdefault(target.package, []).append(target)
    for package, members in by_package.items():
        rules = ['package(default_visibility = ["//visibility:public"])\n']
        for target in members:
            _write(root / package / target.source, f"{package}:{target.name} source\n")
            srcs = ", ".join(f'"{s}"' for s in (target.source, *target.deps))
            rules.append(GENRULE.format(name=target.name, srcs=srcs))
        _write(root / package / "BUILD", "\n".join(rules))


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("directory", type=Path, help="gets kiln/ and bazel/ (must not exist)")
    parser.add_argument("--targets", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    options = parser.parse_args(argv)
    targets = describe(options.targets, options.seed)
    for flavor in ("kiln", "bazel"):
        write(options.directory / flavor, targets, flavor)
    print(f"wrote {len(targets)} targets to {options.directory}/kiln and /bazel")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
