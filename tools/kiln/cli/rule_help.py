"""`kiln help <rule>`: a rule's doc and every attribute, from its schema (rules/<folder>/<rule>.py).

    aoti_package(name, model, device = "cpu", ...)

      Exports `model` with torch.export and packages it with AOTInductor ...

    Attributes:
      model (label, mandatory)
          the torch_model to export and package
      device ("cpu" | "cuda", default "cpu")
          'cpu' or 'cuda'

The text comes from the pydantic attribute models' field descriptions, so what
`kiln help` says and what loading checks are one definition.
"""

from __future__ import annotations

import json
import textwrap
import types
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from kiln.rule_api import Rule
from kiln.rule_api.attrs import LABEL, OUTPUT, RuleAttrs
from kiln.rules import CATALOGUE, load_rule

WIDTH = 100


def rule_names() -> list[str]:
    return sorted(CATALOGUE)


def describe(name: str) -> str | None:
    """The help text of rule `name`, or None if the catalogue has no such rule."""
    if name not in CATALOGUE:
        return None
    return render(load_rule(name))


def render(rule: Rule) -> str:
    fields = rule.attrs.model_fields
    common = set(RuleAttrs.model_fields) - {"name"}
    own = [key for key in fields if key not in common]
    # No line break inside `name = default` (a no-break space until wrapped).
    call = ", ".join(_signature_part(key, fields[key]).replace(" ", "\u00a0") for key in own)
    signature = textwrap.wrap(f"{rule.name}({call})", WIDTH, subsequent_indent="    ")
    lines = [line.replace("\u00a0", " ") for line in signature]
    lines.append("")
    lines += textwrap.wrap(rule.doc, WIDTH - 2, initial_indent="  ", subsequent_indent="  ")
    lines += ["", "Attributes:"]
    for key in [*own, *sorted(common)]:
        info = fields[key]
        default = _default(info)
        given = "mandatory" if default is None else f"default {default}"
        lines.append(f"  {_alias(key, info)} ({_type(info)}, {given})")
        lines += textwrap.wrap(
            info.description or "", WIDTH - 6, initial_indent="      ", subsequent_indent="      "
        )
    return "\n".join(lines) + "\n"


def _alias(key: str, info: FieldInfo) -> str:
    return info.alias or key


def _signature_part(key: str, info: FieldInfo) -> str:
    default = _default(info)
    return _alias(key, info) if default is None else f"{_alias(key, info)} = {default}"


def _default(info: FieldInfo) -> str | None:
    """The default as a BUILD file would write it; None for a mandatory attribute."""
    if info.default_factory is not None:
        value: Any = info.default_factory()  # type: ignore[call-arg]
    elif info.default is PydanticUndefined:
        return None
    else:
        value = info.default
    if value is None:
        return "None"
    if isinstance(value, bool):
        return "True" if value else "False"
    return json.dumps(value)


def _type(info: FieldInfo) -> str:
    if LABEL in info.metadata or OUTPUT in info.metadata:
        kind = "label" if LABEL in info.metadata else "output"
        return f"list of {kind}s" if get_origin(info.annotation) is list else kind
    return _annotation(info.annotation)


def _annotation(annotation: Any) -> str:
    origin = get_origin(annotation)
    if origin is Annotated:
        base, *meta = get_args(annotation)
        if LABEL in meta or OUTPUT in meta:
            kind = "label" if LABEL in meta else "output"
            return f"list of {kind}s" if get_origin(base) is list else kind
        return _annotation(base)
    if origin in (Union, types.UnionType):
        members = [a for a in get_args(annotation) if a is not type(None)]
        text = " | ".join(_annotation(a) for a in members)
        return f"{text} | None" if len(members) < len(get_args(annotation)) else text
    if origin is Literal:
        return " | ".join(json.dumps(v) for v in get_args(annotation))
    if origin is list or origin is tuple:
        (item, *_) = get_args(annotation) or (Any,)
        return f"list of {_annotation(item)}"
    if origin is dict:
        return "dict"
    return getattr(annotation, "__name__", str(annotation))
