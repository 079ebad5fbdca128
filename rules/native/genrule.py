"""genrule: a shell command from declared inputs to declared outputs, as in Bazel.

`cmd` runs under bash in a private execroot that holds only `srcs` and
`tools`, with this "Make variable" expansion:

    $(SRCS) $(OUTS)        all input / output paths, space separated
    $< $@                  the single input / output
    $(location L)          the one file of label L (in srcs, tools or outs)
    $(locations L)         all files of label L
    $(execpath L)          same as location
    $(RULEDIR) $(@D)       the directory outputs are written to
    $$                     a literal $

`gpus = N` makes it a GPU action: it holds N GPU slots, and its key names the
GPU it runs on (the GPUS toolchain: model and compute capability), so a
result made on one GPU model is never reused on another. Without enough GPUs
here, --remote_executor runs it on a GPU node of the cluster.
"""

from __future__ import annotations

import re
import shlex

from kiln.rule_api import (
    GPUS,
    DefaultInfo,
    File,
    Label,
    LabelListAttr,
    OutputListAttr,
    Resources,
    Rule,
    RuleAttrs,
    RuleContext,
)
from pydantic import Field


class GenruleAttrs(RuleAttrs):
    srcs: LabelListAttr = Field(default_factory=list, description="the command's inputs")
    outs: OutputListAttr = Field(description="the files the command writes, in this package")
    cmd: str = Field(description="a bash command; $(SRCS), $(OUTS), $@, $<, $(location L), ...")
    tools: LabelListAttr = Field(
        default_factory=list, description="programs and scripts the command runs"
    )
    message: str | None = Field(default=None, description="the progress message")
    executable: bool = Field(default=False, description="the output is a program")
    gpus: int = Field(
        default=0,
        ge=0,
        description="GPUs the command needs; its key then names the GPU it runs on",
    )


# Bazel's --incompatible_strict_action_env: a fixed PATH, so keys never depend
# on the user's shell setup.
ACTION_PATH = "/usr/local/bin:/usr/bin:/bin"

_VARIABLE = re.compile(r"\$(\$|@|<|\(([^)]*)\))")
# A `$(` that no `)` closes (`$$(` is the shell's own and passes).
_UNCLOSED = re.compile(r"(?<!\$)(?:\$\$)*\$\((?![^)]*\))")


def implementation(ctx: RuleContext[GenruleAttrs]) -> list[object]:
    attrs = ctx.attrs
    srcs = ctx.files(attrs.srcs)
    tools = ctx.files(attrs.tools)
    outs = [ctx.declare_file(name) for name in attrs.outs]
    command = _expand(ctx, attrs.cmd, srcs, tools, outs)
    ctx.actions.run(
        mnemonic="Genrule",
        argv=["/bin/bash", "-c", f"set -e -o pipefail\n{command}"],
        inputs=[*srcs, *tools],
        outputs=outs,
        env={"PATH": ACTION_PATH, "LANG": "C.UTF-8"},
        platform={"os": ctx.host.os, "arch": ctx.host.arch, **_gpu_properties(ctx)},
        resources=Resources(cpu=1, gpu=attrs.gpus),
        progress_message=attrs.message or f"Executing genrule {ctx.label}",
    )
    return [DefaultInfo(tuple(outs))]


def _gpu_properties(ctx: RuleContext[GenruleAttrs]) -> dict[str, str]:
    """The GPU a GPU genrule runs on (where GPU actions run: maybe a cluster's node)."""
    if not ctx.attrs.gpus:
        return {}
    gpus = ctx.toolchain(GPUS)
    if not gpus:
        return {}
    return {"gpu_name": gpus[0].name, "compute_capability": gpus[0].compute_capability}


def _expand(
    ctx: RuleContext[GenruleAttrs], cmd: str, srcs: list[File], tools: list[File], outs: list[File]
) -> str:
    def paths(files: list[File]) -> str:
        return " ".join(shlex.quote(f.path) for f in files)

    def single(files: list[File], what: str, variable: str) -> str:
        if len(files) != 1:
            raise ctx.error(f"'{variable}' in cmd needs exactly one {what}, there are {len(files)}")
        return shlex.quote(files[0].path)

    def location(text: str, many: bool) -> str:
        label = str(Label.parse(text.strip(), ctx.package))
        candidates = [*ctx.attrs.srcs, *ctx.attrs.tools]
        if label in candidates:
            files = ctx.files(label)
        else:
            files = [o for o in outs if f"//{ctx.package}:{o.path.rsplit('/', 1)[-1]}" == label]
            if not files:
                raise ctx.error(
                    f"$(location {text}): '{label}' is not in srcs, tools or outs",
                    hint="add it to srcs or tools",
                )
        if not many and len(files) != 1:
            raise ctx.error(f"$(location {text}) names {len(files)} files; use $(locations {text})")
        return paths(files)

    ruledir = ctx.bin_dir

    def replace(match: re.Match[str]) -> str:
        whole = match.group(1)
        if whole == "$":
            return "$"
        if whole == "@":
            return single(outs, "output", "$@")
        if whole == "<":
            return single(srcs, "input in srcs", "$<")
        inner = match.group(2) or ""
        name, _, arg = inner.partition(" ")
        if name == "SRCS":
            return paths(srcs)
        if name == "OUTS":
            return paths(outs)
        if name in ("RULEDIR", "@D"):
            return ruledir
        if name in ("location", "execpath", "rootpath"):
            return location(arg, many=False)
        if name in ("locations", "execpaths", "rootpaths"):
            return location(arg, many=True)
        raise ctx.error(
            f"$({inner}) in cmd is not a known variable",
            hint="known: $(SRCS) $(OUTS) $@ $< $(location L) $(locations L) $(RULEDIR); "
            "write $$ for a literal $",
        )

    unclosed = _UNCLOSED.search(cmd)
    if unclosed is not None:  # bash would say "unexpected EOF" when the action ran
        raise ctx.error(
            f"'$(' without its ')' in cmd: {cmd[unclosed.start() : unclosed.start() + 30]!r}",
            hint="close it, as in $(SRCS); write $$( for a shell command substitution",
        )
    return _VARIABLE.sub(replace, cmd)


RULE = Rule(
    name="genrule",
    attrs=GenruleAttrs,
    doc="Runs `cmd` with bash in a private execroot holding only `srcs` and `tools`.",
    impl=implementation,
    toolchains=(GPUS,),
)
