"""Attribute schemas: the typed keyword arguments of every rule.

Each rule declares a pydantic model deriving from RuleAttrs. Values arrive
from Starlark as plain Python data; the model rejects unknown attributes,
wrong types (strictly: "1" is not an int) and missing mandatory ones.

Attributes that hold labels are marked with LabelAttr / LabelListAttr so
loading can resolve them against the package and add graph edges; attributes
naming files a rule creates are marked with OutputListAttr.
"""

from __future__ import annotations

from typing import Annotated, Any, get_args, get_origin

from pydantic import BaseModel, ConfigDict, Field


class _Marker:
    __slots__ = ("kind",)

    def __init__(self, kind: str) -> None:
        self.kind = kind

    def __repr__(self) -> str:
        return f"<{self.kind}>"


LABEL = _Marker("label")
OUTPUT = _Marker("output")

LabelAttr = Annotated[str, LABEL]
LabelListAttr = Annotated[list[str], LABEL]
OutputAttr = Annotated[str, OUTPUT]
OutputListAttr = Annotated[list[str], OUTPUT]


class RuleAttrs(BaseModel):
    """Attributes every rule has, as in Bazel."""

    model_config = ConfigDict(strict=True, extra="forbid", frozen=True)

    name: str = Field(description="the target's name, unique in its package")
    visibility: list[str] | None = Field(
        default=None, description="who may depend on it; default: the package's"
    )
    tags: list[str] = Field(
        default_factory=list, description="'manual' keeps it out of wildcards such as //..."
    )
    testonly: bool = Field(default=False, description="only test targets may depend on it")
    deprecation: str | None = Field(
        default=None, description="a warning shown to targets that depend on it"
    )

    @classmethod
    def fields_marked(cls, marker: _Marker) -> tuple[str, ...]:
        """Names of the attributes annotated with `marker` (LABEL or OUTPUT)."""
        key = (cls, marker.kind)
        if key not in _MARKED:
            _MARKED[key] = tuple(
                name
                for name, info in cls.model_fields.items()
                if marker in info.metadata or _marked(info.annotation, marker)
            )
        return _MARKED[key]


def _marked(annotation: Any, marker: _Marker) -> bool:
    """Whether `marker` annotates `annotation` or a member of it (`LabelAttr | None`)."""
    if get_origin(annotation) is Annotated:
        return marker in annotation.__metadata__
    return any(_marked(arg, marker) for arg in get_args(annotation))


_MARKED: dict[tuple[type[RuleAttrs], str], tuple[str, ...]] = {}


def example_value(annotation: Any) -> str:
    """A short name for an attribute's type, for error messages."""
    origin = getattr(annotation, "__origin__", None)
    if origin is Annotated:
        return example_value(annotation.__args__[0])
    return getattr(annotation, "__name__", str(annotation))
