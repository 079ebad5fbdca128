"""The record of one invocation, as `--report` renders it and the output base keeps it.

Plain frozen dataclasses; to_json / from_json round-trip them (a record written by
another kiln, or damaged, reads as None: `kiln report` then says there is none).
"""

from __future__ import annotations

import dataclasses
import json
import types
import typing
from dataclasses import dataclass, field
from typing import Any, TypeVar

FORMAT = 1

_T = TypeVar("_T")


@dataclass(frozen=True)
class Phase:
    name: str  # loading, analysis, execution
    start: float  # seconds since the invocation started
    end: float


@dataclass(frozen=True)
class ActionRecord:
    """One action the scheduler finished: where it ran, when, and why it was not a hit."""

    label: str  # its owner
    mnemonic: str
    output: str  # its first output, a workspace path
    status: str  # executed, cached, failed
    source: str  # local, worker, remote-exec, write, disk, remote, up-to-date ("": never ran)
    lane: str
    start: float  # seconds since the invocation started
    seconds: float
    reason: str = ""  # --explain's: why an executed action was not a cache hit
    failure: str = ""


@dataclass(frozen=True)
class FileSize:
    path: str  # workspace path
    kind: str  # program (.pt2), weights (*.weights.safetensors), output
    bytes: int


@dataclass(frozen=True)
class ValidationPoint:
    point: str  # example, min, opt, max
    shapes: str  # "x=1x8"
    max_abs_error: float
    max_relative_error: float | None
    cosine: float
    ok: bool


@dataclass(frozen=True)
class Validation:
    """An aoti_package's <name>.validation.json: the package against eager at each point."""

    file: str
    atol: float
    rtol: float
    min_cosine: float
    points: tuple[ValidationPoint, ...]


@dataclass(frozen=True)
class Metric:
    """A model_test metric and its gate (bound "" and ok None: no gate)."""

    name: str
    value: float
    bound: str = ""
    ok: bool | None = None


@dataclass(frozen=True)
class Latency:
    """A model_benchmark shape point: its p50 against the baseline file's."""

    point: str
    p50_ms: float
    p90_ms: float
    p99_ms: float
    baseline_ms: float | None = None
    max_p50_ms: float | None = None
    max_regression: float | None = None


@dataclass(frozen=True)
class TestRecord:
    """How a test target's runs ended (the worst run's status, as the summary says)."""

    __test__ = False  # not a pytest class

    status: str  # PASSED, FLAKY, FAILED, TIMEOUT, NO STATUS
    cached: bool
    seconds: float
    runs: int
    log: str = ""  # kiln-testlogs/.../test.log
    kind: str = ""  # sh_test, model_test, model_benchmark
    metrics: tuple[Metric, ...] = ()
    latencies: tuple[Latency, ...] = ()


@dataclass(frozen=True)
class TargetRecord:
    label: str
    files: tuple[FileSize, ...] = ()
    validation: Validation | None = None
    test: TestRecord | None = None


@dataclass(frozen=True)
class Invocation:
    command: str  # build, test
    patterns: tuple[str, ...]
    started: str  # UTC, ISO 8601
    seconds: float
    exit_code: int
    workspace: str
    phases: tuple[Phase, ...] = ()
    actions: tuple[ActionRecord, ...] = ()
    targets: tuple[TargetRecord, ...] = ()
    errors: tuple[str, ...] = ()  # what failed before execution (loading, analysis)
    format: int = field(default=FORMAT)

    @property
    def success(self) -> bool:
        return self.exit_code == 0

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), indent=1, sort_keys=True) + "\n"

    @classmethod
    def from_json(cls, text: str) -> Invocation | None:
        try:
            data = json.loads(text)
            if not isinstance(data, dict) or data.get("format") != FORMAT:
                return None
            record: Invocation = _decode(cls, data)
            return record
        except (ValueError, TypeError, KeyError):
            return None


def _decode(kind: Any, value: Any) -> Any:
    """`value` (parsed JSON) as `kind`: a dataclass, tuple[X, ...], X | None, a scalar."""
    if dataclasses.is_dataclass(kind) and isinstance(kind, type):
        if not isinstance(value, dict):
            raise TypeError(f"{kind.__name__}: not an object")
        hints = typing.get_type_hints(kind)
        names = {f.name for f in dataclasses.fields(kind)}
        if set(value) - names:
            raise KeyError(f"{kind.__name__}: unknown fields {sorted(set(value) - names)}")
        return kind(**{name: _decode(hints[name], v) for name, v in value.items()})
    origin = typing.get_origin(kind)
    if origin is tuple:
        if not isinstance(value, list):
            raise TypeError("not a list")
        (item, _) = typing.get_args(kind)
        return tuple(_decode(item, v) for v in value)
    if origin in (types.UnionType, typing.Union):
        if value is None:
            return None
        (inner,) = [a for a in typing.get_args(kind) if a is not type(None)]
        return _decode(inner, value)
    if kind is float and isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    if kind in (str, int, bool) and type(value) is kind:
        return value
    raise TypeError(f"{value!r} is not {kind}")
