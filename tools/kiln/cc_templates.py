"""Rendering the C++ (and CMake, Bazel, Python) files kiln generates from rules/*/templates.

Shared by the aoti_package loader (rendered at analysis) and the TensorRT
loader (rendered in an action, once the engine's bindings are known), so
both name classes and quote strings the same way.
"""

from __future__ import annotations

import json
import re
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import jinja2

# Each feature folder of the catalogue keeps its templates in its templates/ folder
# (rules/aoti/templates, rules/tensorrt/templates); their names do not collide.
RULES = Path(__file__).resolve().parent / "rules"
# What this module reads besides code: the digests of everything that renders
# templates (the analysis cache, the TrtLoader action's key) include them.
__data_files__ = ("rules/*/templates/*.j2",)


def class_name(target: str) -> str:
    """The C++ class of a target: resnet_pt2 -> ResnetPt2, mlp-v2.cpu -> MlpV2Cpu."""
    parts = [p for p in re.split(r"[^A-Za-z0-9]+", target) if p]
    name = "".join(p[0].upper() + p[1:] for p in parts) or "Model"
    return f"Model{name}" if name[0].isdigit() else name


def cxx_string(text: object) -> str:
    """A C++ string literal for text: printable ASCII as is, everything else octal-escaped."""
    out = []
    for byte in str(text).encode():
        char = chr(byte)
        if char in '"\\?':
            out.append("\\" + char)
        elif 0x20 <= byte < 0x7F:
            out.append(char)
        else:
            out.append(f"\\{byte:03o}")
    return '"' + "".join(out) + '"'


def py_string(text: object) -> str:
    """A Python string literal for text."""
    return repr(str(text))


@cache
def environment() -> jinja2.Environment:
    """The jinja2 environment for rules/*/templates; jinja2 is imported only here, on use.

    One per process: it keeps the compiled templates (30 ms each to compile, against
    a millisecond to render), and reloads one whose file changed.
    """
    import jinja2

    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader([str(p) for p in sorted(RULES.glob("*/templates"))]),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
        autoescape=False,
    )
    env.filters["cxx_string"] = cxx_string
    env.filters["py_string"] = py_string
    # a JSON string literal (also valid Python): TensorRT's loading example writes these
    env.filters["json_string"] = json.dumps
    return env
