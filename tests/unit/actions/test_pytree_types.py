"""The compile registers the pytree types an exported program records, from the archive
(kiln.actions.pytree_types), never from what ran before it in the same process."""

from __future__ import annotations

import json
import sys
import zipfile
from pathlib import Path

import pytest
from kiln.actions.errors import ActionError
from kiln.actions.pytree_types import recorded_type_names, register_recorded

pytestmark = pytest.mark.torch

OUTPUT_TYPE = """
import dataclasses

import torch
from torch.utils import _pytree


@dataclasses.dataclass
class Out:
    y: torch.Tensor


_pytree.register_pytree_node(
    Out, lambda o: ([o.y], None), lambda v, _: Out(*v), serialized_type_name=__name__ + ".Out"
)
"""


def _leaf() -> dict[str, object]:
    return {"type": None, "context": None, "children_spec": []}


def _archive(tmp_path: Path, out_type: str) -> Path:
    """A program's archive as torch.export.save lays it out, its out_spec naming out_type."""
    spec = {"type": out_type, "context": "null", "children_spec": [_leaf()]}
    inputs = {"type": "builtins.tuple", "context": "null", "children_spec": [_leaf()]}
    program = {
        "graph_module": {
            "module_call_graph": [
                {
                    "fqn": "",
                    "signature": {
                        "in_spec": json.dumps([1, inputs]),
                        "out_spec": json.dumps([1, spec]),
                    },
                }
            ]
        }
    }
    path = tmp_path / "m.structure.pt2"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("m/models/model.json", json.dumps(program))
        z.writestr("m/data/weights/model_weights_config.json", "{}")
    return path


def test_the_recorded_names_are_read_from_the_serialized_program(tmp_path: Path) -> None:
    archive = _archive(tmp_path, "teamlib.outputs.Out")
    assert recorded_type_names(archive) == ["builtins.tuple", "teamlib.outputs.Out"]


def test_a_library_type_is_registered_by_importing_its_module(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from torch.utils import _pytree

    library = tmp_path / "lib"
    (library / "kiln_test_outputs").mkdir(parents=True)
    (library / "kiln_test_outputs/__init__.py").write_text("")
    (library / "kiln_test_outputs/modeling.py").write_text(OUTPUT_TYPE)
    monkeypatch.syspath_prepend(str(library))
    name = "kiln_test_outputs.modeling.Out"
    assert name not in _pytree.SERIALIZED_TYPE_TO_PYTHON_TYPE
    try:
        register_recorded(_archive(tmp_path, name))
        assert name in _pytree.SERIALIZED_TYPE_TO_PYTHON_TYPE
    finally:
        if name in _pytree.SERIALIZED_TYPE_TO_PYTHON_TYPE:
            _pytree._deregister_pytree_node(_pytree.SERIALIZED_TYPE_TO_PYTHON_TYPE[name])
        for module in ("kiln_test_outputs.modeling", "kiln_test_outputs"):
            sys.modules.pop(module, None)


def test_a_type_no_import_registers_is_one_error_naming_it(tmp_path: Path) -> None:
    with pytest.raises(ActionError) as error:
        register_recorded(_archive(tmp_path, "kiln_no_such_package.outputs.Out"))
    assert error.value.message == (
        "the exported program's inputs or outputs are of type kiln_no_such_package.outputs.Out, "
        "which cannot be imported here (No module named 'kiln_no_such_package')"
    )
    assert error.value.hint is not None and "deps" in error.value.hint
