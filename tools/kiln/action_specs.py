"""The records rules hand to actions: typed, versioned, torch-free.

    rule, at analysis                          action, in its own process
    spec = ExportSpec(model=..., ...)          spec = ExportSpec.read("mlp.export.json")
    ctx.actions.write_spec(file, spec)   -->   spec.model.signature.ranges()

A record is a frozen pydantic model. Top-level specs (`Spec`) are written as
canonical JSON (sorted keys, two-space indent, plus their `kind` and `format`),
so equal specs are equal bytes and a spec is an ordinary content-addressed
input of the action that reads it. `from_json` refuses unknown and missing
keys and wrong types with one message naming the path, so a renamed field is a
mypy error where a rule builds the record and a clear error, never a KeyError
traceback, where an action reads it. Meson's ExecutableSerialisation and
Pants' Process are the models.

Defaults live in the rules' attribute schemas, once: the records only have
defaults where a record doubles as an attribute type (TensorSpec and
DynamicDim are what `torch_model(inputs = ..., dynamic_dims = ...)` takes),
and even those must be present in JSON. Derived facts that two actions need
(the min/opt/max shape of every input, the shape points validation runs at)
are methods here, so there is one policy, not one per action.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal, Self

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    JsonValue,
    ValidationError,
    model_validator,
)

FORMAT = 1

DType = Literal["float32", "float16", "bfloat16", "float64", "int64", "int32", "int8", "bool"]
Device = Literal["cpu", "cuda"]
Backend = Literal["inductor", "tensorrt"]
CpuTarget = Literal["native", "x86-64", "x86-64-v2", "x86-64-v3", "x86-64-v4"]
TargetPlatform = Literal["linux_x86_64", "windows_x86_64"]
Point = Literal["example", "min", "opt", "max"]
# How an AOTInductor package holds its weights: inside the .pt2, or in a weights file
# beside a .pt2 of the program alone, loaded at start.
WeightsForm = Literal["packaged", "separate"]
# A value of a factory's keyword argument, as a BUILD file can write it.
FactoryValue = int | float | str | bool


class SpecError(ValueError):
    """A spec file that is not the record its action expects."""


def _tuple(value: Any) -> Any:
    # Starlark hands lists; records hold tuples (frozen all the way down).
    return tuple(value) if isinstance(value, list) else value


Shape = Annotated[tuple[int, ...], BeforeValidator(_tuple)]
# A shape of an output whose dimensions may not follow from the inputs' (None).
PartialShape = Annotated[tuple[int | None, ...], BeforeValidator(_tuple)]


class Record(BaseModel):
    """A frozen, strict record; in JSON every field must be present (see Spec.from_json)."""

    model_config = ConfigDict(strict=True, extra="forbid", frozen=True)


class Spec(Record):
    """A top-level record: one JSON file, read by one action (or by a deployment)."""

    kind: ClassVar[str] = ""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls.kind = cls.__name__

    def to_json(self) -> str:
        data = {"kind": self.kind, "format": FORMAT, **self.model_dump(mode="json", by_alias=True)}
        return json.dumps(data, indent=2, sort_keys=True) + "\n"

    @classmethod
    def from_json(cls, text: str, *, source: str = "spec") -> Self:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as error:
            raise SpecError(f"{source} is not JSON: {error}") from None
        if not isinstance(data, dict):
            raise SpecError(f"{source} holds {type(data).__name__}, not a {cls.kind} object")
        kind, version = data.pop("kind", None), data.pop("format", None)
        if kind != cls.kind:
            found = f"a {kind} record" if kind else "a record without a kind"
            article = "an" if cls.kind[0] in "AEIOU" else "a"
            raise SpecError(f"{source} holds {found} where {article} {cls.kind} was expected")
        if version != FORMAT:
            raise SpecError(
                f"{source} is {cls.kind} format {version}; this kiln reads format {FORMAT} "
                "(written by another kiln version: rebuild it)"
            )
        try:
            # In JSON mode, so that arrays are tuples and nothing else is coerced.
            record = cls.model_validate_json(json.dumps(data))
        except ValidationError as error:
            raise SpecError(f"{source} is not a valid {cls.kind}: {_describe(error)}") from None
        missing = list(_defaulted(record, ""))
        if missing:
            raise SpecError(f"{source} is not a valid {cls.kind}: missing {', '.join(missing)}")
        return record

    @classmethod
    def read(cls, path: str | Path) -> Self:
        try:
            text = Path(path).read_text(encoding="utf-8")
        except OSError as error:
            raise SpecError(f"cannot read {cls.kind} {path}: {error.strerror}") from None
        return cls.from_json(text, source=str(path))


def _defaulted(value: Any, path: str) -> Iterator[str]:
    """The paths of fields a record in `value` took a default for: keys missing in JSON."""
    if isinstance(value, BaseModel):
        for name, field in type(value).model_fields.items():
            key = field.alias or name
            if name not in value.model_fields_set:
                yield f"{path}{key}"
            else:
                yield from _defaulted(getattr(value, name), f"{path}{key}.")
    elif isinstance(value, tuple):
        for i, item in enumerate(value):
            yield from _defaulted(item, f"{path.rstrip('.')}[{i}].")
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _defaulted(item, f"{path}{key}.")


def _describe(error: ValidationError) -> str:
    problems = []
    for item in error.errors():
        where = "".join(
            f"[{part}]" if isinstance(part, int) else f".{part}" for part in item["loc"]
        ).lstrip(".")
        problems.append(
            f"missing {where}" if item["type"] == "missing" else f"{where}: {item['msg']}"
        )
    return "; ".join(problems)


# -- the model ---------------------------------------------------------------------


INTEGER_DTYPES = frozenset({"int64", "int32", "int8"})
_INTEGER_BOUNDS = {
    "int64": (-(2**63), 2**63 - 1),
    "int32": (-(2**31), 2**31 - 1),
    "int8": (-128, 127),
}


class TensorSpec(Record):
    """One example input of a model: what torch.export traces with.

    An integer input may declare the values it takes, `low` (inclusive) to `high`
    (exclusive) as torch.randint counts them: token ids of a vocabulary of 50257
    are `low = 0, high = 50257`. Export and validation sample the whole range
    (both ends included), and the generated loaders refuse values outside it.
    Without a range, integer inputs are sampled from [0, 10) and not checked.
    """

    name: str = Field(description="the input's name (forward()'s argument at that position)")
    shape: Shape = Field(description="the example's shape; a dynamic dim widens one axis")
    dtype: DType = Field(default="float32", description="torch dtype name")
    low: int | None = Field(
        default=None, description="integer inputs: the smallest value (inclusive)"
    )
    high: int | None = Field(
        default=None,
        description="integer inputs: the end of the values, exclusive (e.g. the vocabulary size)",
    )

    @model_validator(mode="after")
    def _value_range(self) -> Self:
        if self.low is None and self.high is None:
            return self
        if self.dtype not in INTEGER_DTYPES:
            raise ValueError(
                f"input '{self.name}' is {self.dtype}: low/high apply to integer inputs "
                f"({', '.join(sorted(INTEGER_DTYPES))}) only"
            )
        if self.low is None or self.high is None:
            raise ValueError(f"input '{self.name}': give both low and high, or neither")
        if self.low >= self.high:
            raise ValueError(
                f"input '{self.name}': low {self.low} must be below high {self.high} "
                "(high is exclusive, as in torch.randint)"
            )
        lo, hi = _INTEGER_BOUNDS[self.dtype]
        if self.low < lo or self.high - 1 > hi:
            raise ValueError(
                f"input '{self.name}': [{self.low}, {self.high}) does not fit {self.dtype} "
                f"([{lo}, {hi + 1}))"
            )
        return self

    @property
    def value_range(self) -> tuple[int, int] | None:
        """[low, high) of an integer input that declares one."""
        if self.low is None or self.high is None:
            return None
        return (self.low, self.high)


class DynamicDim(Record):
    """A dimension that varies at run time: torch.export.Dim(name, min=, max=)."""

    name: str = Field(description="the torch.export.Dim name")
    min: int = Field(ge=0, description="smallest size")
    max: int = Field(ge=1, description="largest size")
    opt: int | None = Field(
        default=None, description="the size to optimize for (TensorRT); default: the example's"
    )
    axes: dict[str, int] = Field(
        description="input name -> the axis of that input this dimension binds, e.g. {'x': 0}"
    )

    @model_validator(mode="after")
    def _range(self) -> Self:
        if self.min > self.max:
            raise ValueError(f"dynamic dim '{self.name}': min {self.min} > max {self.max}")
        if self.opt is not None and not self.min <= self.opt <= self.max:
            raise ValueError(
                f"dynamic dim '{self.name}': opt {self.opt} is outside [{self.min}, {self.max}]"
            )
        if not self.axes:
            raise ValueError(f"dynamic dim '{self.name}' binds no input axis")
        return self

    def opt_for(self, example: int) -> int:
        """The size to optimize for: the declared opt, else the example's size."""
        return example if self.opt is None else self.opt


class ShapeRange(Record):
    """The shapes one input may take: torch_tensorrt.Input(min_shape, opt_shape, max_shape)."""

    name: str
    dtype: DType
    min: Shape
    opt: Shape
    max: Shape

    def at(self, point: Point) -> tuple[int, ...]:
        return self.opt if point == "example" else getattr(self, point)


class ModelSignature(Record):
    """What a model takes: example inputs and the dimensions that vary."""

    inputs: tuple[TensorSpec, ...]
    dynamic_dims: tuple[DynamicDim, ...]

    def ranges(self) -> tuple[ShapeRange, ...]:
        """min/opt/max of every input: the example shape, widened on each dynamic dim.

        opt is the dim's opt, else the example's size (never min by default: an
        opt equal to min has failed in some Torch-TensorRT versions,
        pytorch/TensorRT#4103).
        """
        out = []
        for spec in self.inputs:
            lo, opt, hi = list(spec.shape), list(spec.shape), list(spec.shape)
            for dim in self.dynamic_dims:
                axis = dim.axes.get(spec.name)
                if axis is not None:
                    lo[axis], hi[axis] = dim.min, dim.max
                    opt[axis] = dim.opt_for(spec.shape[axis])
            out.append(
                ShapeRange(
                    name=spec.name, dtype=spec.dtype, min=tuple(lo), opt=tuple(opt), max=tuple(hi)
                )
            )
        return tuple(out)

    def shape_points(self) -> tuple[tuple[Point, dict[str, tuple[int, ...]]], ...]:
        """(point, input name -> shape) at which a package is checked: the example
        alone for a static model, else the min, opt and max of the dynamic dims."""
        ranges = self.ranges()
        points: tuple[Point, ...] = ("min", "opt", "max") if self.dynamic_dims else ("example",)
        return tuple((point, {r.name: r.at(point) for r in ranges}) for point in points)


class ModelSource(Record):
    """How an action builds the nn.Module: import `factory` from `src`'s folder, call it."""

    src: str  # the model's source file, as the action's execroot holds it
    factory: str  # "module:function"
    factory_kwargs: dict[str, FactoryValue]
    weights: str | None  # safetensors or a torch state dict, loaded strictly
    seed: int  # torch's seed before the factory runs (models without weights)
    # The third-party packages the target declares (`@pip//timm`), for the hint when an
    # import fails; what the environment holds is the action's business, not the spec's.
    python_deps: tuple[str, ...]
    # Define torchvision's operator schemas before importing the model when its C++
    # extension cannot load (python_requirements(torchvision_cpu_ops = True)).
    torchvision_cpu_ops: bool


class ModelSpec(Record):
    """A torch_model as the actions see it."""

    label: str  # the torch_model target, for messages
    source: ModelSource
    signature: ModelSignature


# -- the actions' specs --------------------------------------------------------------


class WeightsSpec(Spec):
    """ModelWeights: build the module with a seeded generator, save its state dict."""

    source: ModelSource
    output: str


class ExportSpec(Spec):
    """TorchExport: torch.export the model, save the program without stack traces, and
    (when `goldens` is set) record eager's outputs at every shape point for validation.

    With `weights` set the program is saved as its structure: every parameter and
    buffer replaced by a placeholder of the same dtype, shape and strides
    (kiln.actions.weights_split), so its bytes do not depend on weight values, and the
    real values go to `weights` (safetensors, by FQN).
    """

    model: ModelSpec
    device: Device
    output: str
    goldens: str | None  # <name>.golden.safetensors; None: the package is not validated
    weights: str | None  # <name>.weights.safetensors; None: the program keeps its weights
    needs: str  # <name>.needs.json: what loading the program imports (a ProgramNeeds)


class ProgramNeeds(Spec):
    """TorchExport's <name>.needs.json: what loading its program imports besides torch
    (kiln.actions.program_needs). The actions that load the program hold it in their
    key in place of the model environment's locked packages: a library bump that
    leaves the program and this record alone re-runs none of them."""

    modules: tuple[str, ...]  # modules defining the pytree node types of inputs and outputs
    custom_ops: tuple[str, ...]  # operator namespaces that are not torch's
    # `name==version --hash=...` of the locked packages providing those, with their
    # locked dependencies (every locked package where there is a custom op)
    packages: tuple[str, ...]


class TensorRTSettings(Record):
    """aoti_package(backend = "tensorrt")'s settings of torch_tensorrt.dynamo.compile."""

    min_block_size: int
    workspace_size: int  # bytes; 0: TensorRT's default
    optimization_level: int | None
    hardware_compatible: bool
    version_compatible: bool
    use_explicit_typing: bool | None  # removed in Torch-TensorRT 2.13; None: not passed

    def compile_kwargs(self) -> dict[str, Any]:
        """The settings to pass: those left unset (None, a workspace of 0) are not."""
        kwargs = self.model_dump(exclude_none=True)
        if not self.workspace_size:
            kwargs.pop("workspace_size")
        return kwargs


class TrtRefit(Record):
    """TrtEngine's (or a Torch-TensorRT AotiPackage's) inputs when it refits instead of
    building: the refittable program TrtCompile built from the structure, and the
    weights to put into it."""

    compiled: str  # <name>.refittable.ep
    structure: str  # <name>.structure.pt2 (placeholders for weights)
    weights: str  # <name>.weights.safetensors


class PackageSpec(Spec):
    """AotiPackage: an exported program into an AOTInductor .pt2 (or through Torch-TensorRT).

    It holds the model's signature, not its source: an edit of the model that keeps
    the exported program leaves this spec, and so the packaging, untouched.
    """

    program: str
    output: str
    device: Device
    backend: Backend
    cpu_target: CpuTarget
    inductor_configs: dict[str, JsonValue]
    signature: ModelSignature
    tensorrt: TensorRTSettings | None  # backend = "tensorrt" only
    # backend = "tensorrt" where the toolchain can refit: `program` is then TrtCompile's
    # refittable program, and the weights are refit into it (no engine build)
    refit: TrtRefit | None


class ValidateSpec(Spec):
    """AotiValidate: the package against eager's golden outputs at every shape point.

    It holds no model source: the goldens (written by TorchExport) are the reference,
    so an edit of the model that keeps the exported program re-runs neither the
    packaging nor this check.
    """

    label: str  # the aoti_package's, for messages
    model: str  # the torch_model's label, for messages
    signature: ModelSignature  # regenerates the inputs the goldens were computed on
    goldens: str
    package: str
    weights: str | None  # weights = "separate": the file loaded into the package first
    output: str
    device: Device
    backend: Backend
    rtol: float  # relative to the largest magnitude of each eager output
    atol: float  # an absolute floor, for outputs that are (nearly) all zero
    min_cosine: float  # per output, of the package's values against eager's


# -- golden outputs ------------------------------------------------------------------


class GoldenOutput(Record):
    """One output tensor of the eager model at one shape point."""

    path: str  # its place in the model's output, as torch's pytree writes it: "", "[0]", ".logits"
    tensor: str  # its name in the safetensors file: "<point>/<index>"
    shape: Shape
    dtype: str  # torch's name without "torch.", e.g. "float32"


class GoldenPoint(Record):
    point: Point
    shapes: dict[str, Shape]
    outputs: tuple[GoldenOutput, ...]


class GoldenOutputs(Spec):
    """What TorchExport's <name>.golden.safetensors holds, kept as that file's metadata.

    The inputs are not stored: they are example_inputs(signature.inputs, shapes,
    seed=input_seed), deterministic on one torch version, so validation regenerates them.
    """

    model: str  # the torch_model's label
    input_seed: int
    points: tuple[GoldenPoint, ...]


# -- what validation found -------------------------------------------------------------


class OutputCheck(Record):
    """One output at one shape point: the package against eager."""

    output: str  # GoldenOutput.path, or "output" for a model's single tensor
    shape: Shape
    max_abs_error: float
    reference_max: float  # max |eager|: the scale rtol applies to
    relative_error: float | None  # max_abs_error / reference_max; None where eager is all 0
    cosine: float  # of the flattened values; 1.0 where both are all zero
    ok: bool


class CompileSpec(Spec):
    """AotiCompile: a program's structure into an AOTInductor program whose weights are data.

    Its input is the structure TorchExport writes (placeholders for weights), so the
    compile is keyed on the graph, the parameters' names, dtypes, shapes and strides,
    the settings and the toolchain, never on weight values. It writes the constant
    layout (a ConstantLayout) the join needs.
    """

    structure: str
    output: str
    layout: str
    device: Device
    cpu_target: CpuTarget
    # What cpu_target resolved to at analysis (kiln.cpu_isa's name; `native`: the
    # analyzing host's): the compile uses this, never the host it runs on. None: a
    # `native` compile off x86-64, which inductor compiles for its host.
    cpu_isa: str | None
    inductor_configs: dict[str, JsonValue]


ConstantKind = Literal["weight", "constant"]


class ConstantEntry(Record):
    """One constant of a compiled program, in the order of its weights blob."""

    name: str  # AOTInductor's name for it, e.g. "l1_weight"
    fqn: str  # its original name, e.g. "l1.weight": the key in the weights file
    # weight: a parameter or buffer (from the weights file); constant: a tensor of the
    # code (a literal or a plain tensor attribute), which stays with the program
    kind: ConstantKind
    dtype: str  # torch dtype name, e.g. "float32"
    shape: Shape
    stride: Shape
    data_size: int  # the bytes it takes in the blob: its storage, padded as AOTInductor pads
    # Other names of the same tensor (tied weights, e.g. an embedding and an output
    # layer): AOTInductor keeps one constant for them, and a weights file must give
    # them equal values.
    aliases: tuple[str, ...]


class ConstantLayout(Spec):
    """AotiCompile's <name>.layout.json: what a join needs to know of a compiled program."""

    blob: str | None  # the weights blob's record in the program's archive (None: no constants)
    constants: tuple[ConstantEntry, ...]

    def weights(self) -> tuple[ConstantEntry, ...]:
        return tuple(entry for entry in self.constants if entry.kind == "weight")


class Provenance(Record):
    """What the rule knows of a package's origin; the join adds the digests and keys."""

    target: str  # the aoti_package's label
    model: str  # the torch_model's label
    device: Device
    cpu_target: CpuTarget
    cpu_isa: str | None  # what cpu_target resolved to (CompileSpec.cpu_isa)
    toolchain: dict[str, str]  # torch, python, os, arch: the versions the actions' key holds


class JoinSpec(Spec):
    """AotiJoin: a compiled program and its weights into the package a deployment loads.

    packaged: the .pt2 holds the weights (plain aoti_load_package loads it);
    separate: the .pt2 holds the program alone, and `weights` is loaded at start.
    Either way the package's metadata names its target, keys, digests and toolchain.
    """

    program: str
    layout: str
    weights: str
    output: str
    form: WeightsForm
    provenance: Provenance


class ValidationCheck(Record):
    point: Point
    shapes: dict[str, Shape]
    max_abs_error: float
    max_relative_error: float | None
    min_cosine: float
    outputs: tuple[OutputCheck, ...]
    ok: bool


class ValidationReport(Spec):
    """What AotiValidate found: <name>.validation.json."""

    package: str  # its file name (mlp_pt2.pt2): a path would name the output root
    rtol: float
    atol: float
    min_cosine: float  # the threshold; each check records the lowest cosine it saw
    max_abs_error: float
    max_relative_error: float | None
    checks: tuple[ValidationCheck, ...]


# -- TensorRT engines ----------------------------------------------------------------


class BuildGpu(Record):
    name: str
    compute_capability: str  # "9.0"


class TrtCompileSpec(Spec):
    """TrtCompile: a program's structure into a refittable Torch-TensorRT program (Linux).

    Its inputs hold no weight values (TorchExport's split), so it is built once per
    architecture; TrtEngine refits each weights change into it.
    """

    label: str
    structure: str
    device: Device
    signature: ModelSignature  # the example inputs and dynamic dims the program is saved with
    ranges: tuple[ShapeRange, ...]
    settings: dict[str, JsonValue]  # torch_tensorrt.dynamo.compile's, immutable_weights False
    output: str


class TrtEngineSpec(Spec):
    """TrtEngine: export, compile (or cross-compile for Windows), save, write the engines.

    With `refit` set it neither exports nor compiles: it refits TrtCompile's program
    with the weights (or, where this Torch-TensorRT cannot refit, compiles the program
    with its weights put back), then saves and writes the engines as before.
    """

    label: str
    name: str
    model: ModelSpec
    device: Device
    target_platform: TargetPlatform
    ranges: tuple[ShapeRange, ...]
    # torch_tensorrt.dynamo.compile keyword arguments, by name (the rule checked them)
    settings: dict[str, JsonValue]
    build_gpu: BuildGpu  # the GPU the analysis expects (the action records the real one)
    program: str
    manifest: str
    engines: str
    refit: TrtRefit | None


class TrtLoaderSpec(Spec):
    """TrtLoader: render the raw-engine loader from the engine's manifest."""

    label: str
    name: str
    manifest: str
    output: str
    cc_loader: bool


class Binding(Record):
    """An engine's input or output tensor: dtype and min/opt/max shape where known."""

    name: str
    dtype: str | None
    min: PartialShape | None
    opt: PartialShape | None
    max: PartialShape | None


class EngineRecord(Record):
    file: str  # <name>.engines/<file>.engine
    submodule: str  # _run_on_acc_N
    bytes: int
    sha256: str
    inputs: tuple[Binding, ...]
    outputs: tuple[Binding, ...]


class SavedProgram(Record):
    file: str
    saved_with: str
    load: str  # the Python call that loads it on the target
    load_on: str
    documented_save_error: str | None = None  # set when the documented save failed


class RawEngine(Record):
    deployable: bool  # one engine, no PyTorch fallback ops
    problems: tuple[str, ...]


class Compatibility(Record):
    hardware_compatible: bool
    version_compatible: bool
    gpus: str
    tensorrt: str


class TrtWeights(Record):
    """How the engines got their weights."""

    refit: bool  # refit into a program built from the structure (no engine build)
    how: str  # what ran, in words
    weights_sha256: str | None  # the weights file refit in (None: the model's own)


class TrtToolchain(Record):
    """What the TrtEngine action found in its own process."""

    torch: str | None
    cuda: str | None
    torch_tensorrt: str | None
    flavour: str | None  # "standard" | "rtx"
    tensorrt: str | None
    torch_tensorrt_abi: str | None


class TrtManifest(Spec):
    """How an engine was built and how to load it: <name>.manifest.json."""

    label: str
    name: str
    model: str  # the torch_model's label
    platform: TargetPlatform
    compile_api: str
    program: SavedProgram
    engines: tuple[EngineRecord, ...]
    inputs: tuple[ShapeRange, ...]
    fallback_ops: dict[str, int]
    fallback_op_count: int
    raw_engine: RawEngine
    toolchain: TrtToolchain
    build_gpu: BuildGpu
    compatibility: Compatibility
    settings: dict[str, JsonValue]
    settings_not_accepted: tuple[str, ...]
    forced_off: dict[str, bool]
    timing_cache: str
    weights: TrtWeights
