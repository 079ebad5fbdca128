"""model_dataset: data a model_test runs a model over, as a target.

One `.npz` or `.safetensors` file whose arrays are named (the model's inputs, and the
labels), or any files with a `reader`: a Python file of the workspace whose function
(`reader_function`, default `read`) takes the list of files and returns {name: array}.
The files are the test's inputs, so a changed dataset runs the test again.
"""

from __future__ import annotations

from dataclasses import dataclass

from kiln.rule_api import (
    DatasetFormat,
    DatasetSpec,
    DefaultInfo,
    File,
    LabelAttr,
    LabelListAttr,
    Rule,
    RuleAttrs,
    RuleContext,
)
from pydantic import Field


class ModelDatasetAttrs(RuleAttrs):
    srcs: LabelListAttr = Field(
        description="the data: one .npz or .safetensors file, or files a reader reads",
        examples=[["data.npz"]],
    )
    inputs: list[str] = Field(
        min_length=1,
        description="the arrays fed to the model, in the order of its inputs",
        examples=[["x"]],
    )
    labels: str | None = Field(
        default=None, description="the array of class labels (top-k metrics)"
    )
    reader: LabelAttr | None = Field(
        default=None, description="a Python file whose reader_function turns srcs into arrays"
    )
    reader_function: str = Field(
        default="read", description="the reader's function: (files) -> {name: array}"
    )


@dataclass(frozen=True)
class DatasetInfo:
    spec: DatasetSpec
    files: tuple[File, ...]  # the data and the reader


def implementation(ctx: RuleContext[ModelDatasetAttrs]) -> list[object]:
    attrs = ctx.attrs
    files = ctx.files(attrs.srcs)
    reader = ctx.file("reader", attrs.reader) if attrs.reader else None
    fmt: DatasetFormat
    if reader is not None:
        fmt = "folder"
    elif len(files) == 1 and files[0].path.endswith((".npz", ".safetensors")):
        fmt = "npz" if files[0].path.endswith(".npz") else "safetensors"
    else:
        raise ctx.error(
            f"srcs of a model_dataset without a reader must be one .npz or .safetensors file; "
            f"it has {', '.join(f.path.rsplit('/', 1)[-1] for f in files) or 'none'}",
            hint='give a reader = "reader.py" whose read(files) returns {name: array}',
        )
    if attrs.labels is not None and attrs.labels in attrs.inputs:
        raise ctx.error(f"'{attrs.labels}' is both an input and the labels")
    spec = DatasetSpec(
        label=ctx.label,
        files=tuple(f.path for f in files),
        format=fmt,
        reader=f"{reader.path}:{attrs.reader_function}" if reader else None,
        inputs=tuple(attrs.inputs),
        labels=attrs.labels,
    )
    all_files = (*files, *([reader] if reader else []))
    return [DefaultInfo(all_files), DatasetInfo(spec, all_files)]


RULE = Rule(
    name="model_dataset",
    attrs=ModelDatasetAttrs,
    doc="Named arrays (a .npz, a .safetensors, or files and a reader) for model_test.",
    impl=implementation,
)
