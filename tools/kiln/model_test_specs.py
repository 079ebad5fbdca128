"""The records model_test hands its actions (kiln.actions.model_test, model_eager).

Kept out of kiln.action_specs on purpose: every Python action's key holds the digest of
the kiln modules it imports, and the packaging actions import action_specs, so a record
added there would rebuild every package. These import it (its Record and Spec bases).

    model_test(artifact, data, metrics = {"top1": ">= 0.70"}, eager = ":mlp", ...)
      -> EagerOutputsSpec   ModelEager: the torch_model over the dataset -> outputs file
      -> ModelTestSpec      model_test under the test runner: the artifact (through its
                            generated Python loader) over the dataset, metrics, gates
"""

from __future__ import annotations

from typing import Literal

from kiln.action_specs import ModelSpec, Record, Spec

DatasetFormat = Literal["npz", "safetensors", "folder"]
Comparison = Literal[">=", "<=", ">", "<", "=="]

# Metrics kiln computes; `top<K>` for any K, and user metrics by their function's name.
ERROR_METRICS = ("max_abs_error", "max_rel_error", "mean_abs_error", "cosine")
LABEL_METRIC_PREFIX = "top"


class DatasetSpec(Record):
    """A model_dataset: the files, how to read them, which arrays are the inputs and labels."""

    label: str
    files: tuple[str, ...]
    format: DatasetFormat
    reader: str | None  # "path/reader.py:function" (format folder): files -> {name: array}
    inputs: tuple[str, ...]  # the arrays fed to the model, in its inputs' order
    labels: str | None  # the array of class labels (for top-k)


class ArtifactSpec(Record):
    """An aoti_package as model_test runs it: through its generated Python loader."""

    label: str
    package: str
    loader: str  # <name>_loader.py
    weights: str | None  # weights = "separate": the weights file
    cc_header: str | None  # the generated C++ loader library: <name>_loader/<name>.h
    cc_source: str | None  # ... and its <name>.cpp
    cc_class: str  # its class


class Bound(Record):
    """A gate: `metric op value`, as written in `metrics = {"top1": ">= 0.70"}`."""

    metric: str
    op: Comparison
    value: float
    text: str  # as the BUILD file wrote it, for the table


class EagerOutputsSpec(Spec):
    """ModelEager: run the torch_model over the dataset; its outputs, for error metrics."""

    model: ModelSpec
    dataset: DatasetSpec
    output: str  # a safetensors file: "output" [N, ...]


class ModelTestSpec(Spec):
    """model_test: the artifact over the dataset; metrics against labels, eager's outputs
    or a reference artifact, and user functions; gates and drops against a baseline."""

    label: str
    artifact: ArtifactSpec
    dataset: DatasetSpec
    eager_outputs: str | None  # EagerOutputsSpec.output
    reference: ArtifactSpec | None
    baseline: ArtifactSpec | None
    bounds: tuple[Bound, ...]
    max_drop: tuple[tuple[str, float], ...]
    metric_src: str | None  # a workspace file defining the user metrics
    user_metrics: tuple[str, ...]  # function names in metric_src
    runtime: Literal["python", "cc"]  # through the generated Python or C++ loader


class BenchmarkSpec(Spec):
    """model_benchmark: latency and throughput of the artifact through its C++ loader."""

    label: str
    artifact: ArtifactSpec
    # Each shape point: (input name, shape) for every input, in the model's order.
    shapes: tuple[tuple[tuple[str, tuple[int, ...]], ...], ...]
    warmup: int
    repeats: int
    iterations: int
    max_p50_ms: float | None
    max_regression: float | None
    baseline: str | None  # the JSON file of timings the user keeps (--update_baselines)
    machine: str  # what the timings are keyed on, as the table says it
