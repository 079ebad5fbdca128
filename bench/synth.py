"""A synthetic kiln workspace: N packages of realistic BUILD files, for benchmarks.

    python bench/synth.py /tmp/ws --packages 1000

Each package `pkgNNNN/` gets a BUILD file of 30 to 60 lines declaring
`targets_per_package` (5) rules, and the source files they read:

    srcs      filegroup over glob(["src/**/*.txt"])
    concat    genrule: this package's sources plus a nearby package's `concat`
    stamp     genrule run by the shared tool //tools:stamp.py
    summary   genrule, in every third package through the macro text_summary()
              loaded from //tools:macros.bzl (a .bzl calling native.genrule)
    bundle    filegroup over the outputs above

and one package in ten (`model_every`; 0: none, as building them needs torch
and a minute each) replaces `summary` and `bundle` by a torch_model and the
aoti_package that exports it. Dependencies go only to lower-numbered
packages (so there is no cycle), about two cross-package edges per package.
Beyond five targets a package gets extra `stepN` genrules chained on `concat`.

Every genrule runs a cheap, real shell command that reads its inputs and
writes its outputs, so the same workspace can benchmark `kiln build //...`.
The output depends only on the arguments of generate().
"""

from __future__ import annotations

import argparse
import random
from pathlib import Path

MACROS_BZL = '''\
"""Macros shared by the synthetic packages."""

def text_summary(name, srcs, out = None, **kwargs):
    """A genrule writing the line, word and byte counts of `srcs` to `out`."""
    native.genrule(
        name = name,
        srcs = srcs,
        outs = [out or name + ".txt"],
        cmd = "cat $(SRCS) | wc > $@",
        message = "Summarising %d inputs of %s" % (len(srcs), native.package_name()),
        **kwargs
    )
'''

TOOLS_BUILD = """\
# Tools shared by every synthetic package.

package(default_visibility = ["//visibility:public"])

exports_files(["stamp.py"])
"""

STAMP_PY = '''\
"""Writes the name and size of each input, then their contents: stamp.py OUT IN..."""

import sys

out, inputs = sys.argv[1], sys.argv[2:]
with open(out, "w") as f:
    for path in inputs:
        with open(path) as src:
            text = src.read()
        f.write(f"== {path} ({len(text)} bytes)\\n{text}")
'''

MODEL_PY = '''\
"""A small MLP for package {package}."""

import torch
from torch import nn

from layers import block


class Model(nn.Module):
    def __init__(self, width: int = {width}, hidden: int = {hidden}) -> None:
        super().__init__()
        self.body = nn.Sequential(block(width, hidden), nn.Linear(hidden, width))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x)


def build(hidden: int = {hidden}) -> nn.Module:
    return Model(hidden=hidden)
'''

LAYERS_PY = '''\
"""Building blocks shared by the model of package {package}."""

from torch import nn


def block(width: int, hidden: int) -> nn.Module:
    return nn.Sequential(nn.Linear(width, hidden), nn.ReLU())
'''

WORDS = [
    *("alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india"),
    *("juliet", "kilo", "lima", "mike", "november", "oscar", "papa", "quebec", "romeo"),
    *("sierra", "tango", "uniform", "victor", "whiskey", "xray"),
]


def package_name(index: int) -> str:
    return f"pkg{index:04d}"


def is_model_package(index: int, model_every: int = 10) -> bool:
    return model_every > 0 and index % model_every == model_every // 2


def uses_macro(index: int) -> bool:
    return index % 3 == 1


def generate(
    root: Path,
    packages: int,
    *,
    seed: int = 0,
    targets_per_package: int = 5,
    model_every: int = 10,
) -> None:
    """Write a workspace of `packages` packages under `root` (created if missing)."""
    if targets_per_package < 5:
        raise ValueError("targets_per_package must be at least 5")
    rng = random.Random(seed)
    root.mkdir(parents=True, exist_ok=True)
    _write(root / "WORKSPACE", 'workspace(name = "synth")\n')
    _write(root / "BUILD", "# The root package of the synthetic workspace.\n")
    _write(root / "tools/BUILD", TOOLS_BUILD)
    _write(root / "tools/macros.bzl", MACROS_BZL)
    _write(root / "tools/stamp.py", STAMP_PY)
    for index in range(packages):
        _write_package(root, index, rng, targets_per_package, model_every)


def _write_package(
    root: Path, index: int, rng: random.Random, targets: int, model_every: int
) -> None:
    name = package_name(index)
    directory = root / name
    sources = ["src/a.txt", "src/b.txt", f"src/data/{rng.choice(WORDS)}.txt"]
    for source in sources:
        words = " ".join(rng.choice(WORDS) for _ in range(rng.randint(5, 20)))
        _write(directory / source, f"{name} {source}: {words}\n")
    # Two cross-package edges: one to a neighbour, one anywhere below.
    near = package_name(max(0, index - rng.randint(1, 8))) if index else None
    far = package_name(rng.randrange(index)) if index else None
    far_stamp = f', "//{far}:stamp.txt"' if far else ""
    model = is_model_package(index, model_every)
    if model:
        width, hidden = rng.choice((8, 16, 32)), rng.choice((32, 64, 128))
        _write(directory / "model.py", MODEL_PY.format(package=name, width=width, hidden=hidden))
        _write(directory / "layers.py", LAYERS_PY.format(package=name))
    lines = [
        f"# Package {name}: synthetic sources, generated text, "
        + ("and a model." if model else "and a bundle."),
        "",
    ]
    if uses_macro(index) and not model:
        lines += ['load("//tools:macros.bzl", "text_summary")', ""]
    lines += [
        'package(default_visibility = ["//visibility:public"])',
        "",
        "filegroup(",
        '    name = "srcs",',
        '    srcs = glob(["src/**/*.txt"]),',
        ")",
        "",
        "genrule(",
        '    name = "concat",',
        "    srcs = [",
        '        ":srcs",',
        *([f'        "//{near}:concat",'] if near else []),
        "    ],",
        '    outs = ["concat.txt"],',
        '    cmd = "cat $(SRCS) > $@",',
        f'    message = "Concatenating the sources of {name}",',
        ")",
        "",
        "genrule(",
        '    name = "stamp",',
        f'    srcs = [":concat.txt"{far_stamp}],',
        '    outs = ["stamp.txt"],',
        '    cmd = "python3 $(location //tools:stamp.py) $@ $(SRCS)",',
        '    tools = ["//tools:stamp.py"],',
        f'    tags = ["{rng.choice(WORDS)}", "stamp"],',
        ")",
    ]
    if model:
        lines += _model_targets(name, width, hidden, rng)
    else:
        lines += _summary_and_bundle(index)
    for step in range(targets - 5):
        lines += [
            "",
            "genrule(",
            f'    name = "step{step}",',
            f'    srcs = [":{"concat" if step == 0 else f"step{step - 1}"}"],',
            f'    outs = ["step{step}.txt"],',
            '    cmd = "python3 -c \'import sys; open(sys.argv[2], \\"w\\").write('
            "open(sys.argv[1]).read().upper())' $< $@\",",
            ")",
        ]
    _write(directory / "BUILD", "\n".join(lines) + "\n")


def _summary_and_bundle(index: int) -> list[str]:
    lines = [""]
    if uses_macro(index):
        lines += [
            "text_summary(",
            '    name = "summary",',
            '    srcs = [":concat.txt", ":stamp.txt"],',
            '    tags = ["summary"],',
            ")",
        ]
    else:
        lines += [
            "genrule(",
            '    name = "summary",',
            '    srcs = [":concat.txt", ":stamp.txt"],',
            '    outs = ["summary.txt"],',
            "    cmd = \"python3 -c 'import sys; print(sum(len(open(p).read()) for p in "
            "sys.argv[1:]))' $(SRCS) > $@\",",
            ")",
        ]
    lines += [
        "",
        "filegroup(",
        '    name = "bundle",',
        '    srcs = [":summary", ":stamp"],',
        '    data = ["src/a.txt"],',
        ")",
    ]
    return lines


def _model_targets(name: str, width: int, hidden: int, rng: random.Random) -> list[str]:
    return [
        "",
        "torch_model(",
        '    name = "model",',
        '    src = "model.py",',
        '    deps = ["layers.py"],',
        '    factory = "model:build",',
        f'    factory_kwargs = {{"hidden": {hidden}}},',
        f'    inputs = [{{"name": "x", "shape": [{rng.choice((2, 4, 8))}, {width}]}}],',
        "    dynamic_dims = [",
        '        {"name": "batch", "min": 1, "max": 64, "axes": {"x": 0}},',
        "    ],",
        ")",
        "",
        "aoti_package(",
        '    name = "model_pt2",',
        '    model = ":model",',
        '    inductor_configs = {"max_autotune": False},',
        f"    rtol = {rng.choice(('1e-4', '1e-3'))},",
        f'    tags = ["{name}", "model"],',
        ")",
    ]


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("directory", type=Path, help="where to write the workspace")
    parser.add_argument("--packages", type=int, default=1000)
    parser.add_argument("--targets_per_package", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--model_every", type=int, default=10, help="one model package in N (0: none)"
    )
    options = parser.parse_args(argv)
    generate(
        options.directory,
        options.packages,
        seed=options.seed,
        targets_per_package=options.targets_per_package,
        model_every=options.model_every,
    )
    print(f"wrote {options.packages} packages to {options.directory}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
