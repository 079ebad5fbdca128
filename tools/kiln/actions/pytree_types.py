"""The pytree node types an exported program names, registered from what the export recorded.

    pytree_types.register_recorded(Path("m.structure.pt2"))   # before torch.export.load

A program whose inputs or outputs are a library's own types (transformers' ModelOutput
subclasses, a dataclass passed to torch.export.register_dataclass) records each type's
serialized name (`module.Class`) in its treespecs, and torch.export.load can rebuild
them only once the type is registered again, which happens when its module is
imported. The export imported it (the model did); the compile never imports the
model. It loaded only when the export had run just before in the same worker, so
a compile of an export from the cache failed with torch's 53-line traceback (issue
20). So the compile reads the names from the archive's serialized program
(`<archive>/models/<name>.json`: module_call_graph's in_spec and out_spec) and
imports each one's module: from the action's environment, which holds the target's
locked packages. A type no import registers is one ActionError naming it.

A type of the model's own source (a dataclass in models/lm.py) cannot be imported by
the compile, which does not read the model's source (a comment edit must not
recompile). The compile never builds nor takes apart a value of that type: it only
carries the treespec into the package. So such a type is registered as a stand-in
under the recorded name, whose context is kept as the serialized text it was: the
package's treespec comes out as the export wrote it, and the loader, which imports
the model, rebuilds the real type. (test_python_loader's structured outputs.)
"""

from __future__ import annotations

import importlib
import json
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from kiln.actions.errors import ActionError

_SPEC_KEYS = ("in_spec", "out_spec")


def recorded_type_names(archive: Path) -> list[str]:
    """The serialized type names of every treespec the archive's programs record."""
    names: dict[str, None] = {}
    with zipfile.ZipFile(archive) as z:
        for member in z.namelist():
            parts = member.split("/")
            if len(parts) >= 2 and parts[-2] == "models" and member.endswith(".json"):
                for spec in _treespecs(json.loads(z.read(member))):
                    names.update(dict.fromkeys(_types(spec)))
    return list(names)


def register_recorded(archive: Path) -> None:
    """Import the module of every type the archive's treespecs name that torch does not
    know yet; ActionError for one that stays unknown."""
    from torch.utils import _pytree

    for name in recorded_type_names(archive):
        if name in _pytree.SERIALIZED_TYPE_TO_PYTHON_TYPE:
            continue
        error = _import_module_of(name)
        if name not in _pytree.SERIALIZED_TYPE_TO_PYTHON_TYPE and error.startswith(_MISSING):
            _register_stand_in(name)
        if name not in _pytree.SERIALIZED_TYPE_TO_PYTHON_TYPE:
            raise ActionError(
                f"the exported program's inputs or outputs are of type {name}, which "
                f"{error or 'importing its module does not register as a pytree node'}",
                hint="declare the package that defines it in the model's deps, and check "
                "that importing its module registers the type (torch.export."
                "register_dataclass, or torch.utils._pytree.register_pytree_node with "
                "serialized_type_name)",
            )


class _StandIn:
    """A value of a type the compile cannot import: never made (see the module's doc)."""

    def __init__(self, children: list[Any], context: Any) -> None:
        self.children, self.context = children, context


def _register_stand_in(name: str) -> None:
    """Register `module.Class` as a pytree node that round-trips its treespec verbatim."""
    from torch.utils import _pytree

    module, _, short = name.rpartition(".")
    stand_in = type(short, (_StandIn,), {"__module__": f"kiln_stand_in.{module}"})
    _pytree.register_pytree_node(
        stand_in,
        lambda value: (value.children, value.context),
        lambda children, context: stand_in(list(children), context),
        serialized_type_name=name,
        to_dumpable_context=lambda context: context,  # the text the export wrote
        from_dumpable_context=lambda text: text,
    )


_MISSING = "cannot be imported here ("  # no such module in the action's environment


def _import_module_of(name: str) -> str:
    """Import the longest importable module prefix of `module.Class`; "" or why not."""
    parts = name.split(".")
    first_error = ""
    for end in range(len(parts) - 1, 0, -1):
        module = ".".join(parts[:end])
        try:
            importlib.import_module(module)
        except ImportError as e:
            first_error = first_error or f"{_MISSING}{e})"
            continue
        except Exception as e:  # the library's own failure at import
            return f"cannot be imported here: importing {module} failed: {e}"
        return ""
    return first_error


def _treespecs(value: Any) -> Iterator[Any]:
    """Every treespec (decoded) under the serialized program's in_spec/out_spec keys."""
    if isinstance(value, dict):
        for key, item in value.items():
            if key in _SPEC_KEYS and isinstance(item, str):
                with_protocol = json.loads(item)  # [protocol, treespec]
                if isinstance(with_protocol, list) and len(with_protocol) == 2:
                    yield with_protocol[1]
            else:
                yield from _treespecs(item)
    elif isinstance(value, list):
        for item in value:
            yield from _treespecs(item)


def _types(spec: Any) -> Iterator[str]:
    if not isinstance(spec, dict):
        return
    kind = spec.get("type")
    if isinstance(kind, str):
        yield kind
    for child in spec.get("children_spec") or ():
        yield from _types(child)
