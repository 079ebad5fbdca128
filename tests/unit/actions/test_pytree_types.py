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


def test_a_type_of_the_models_own_source_is_carried_through_as_recorded(
    tmp_path: Path,
) -> None:
    """The compile does not read the model's source: its types are stand-ins that write
    the treespec back as the export recorded it (the loader imports the real ones)."""
    from torch.utils import _pytree

    name = "kiln_no_such_package.outputs.Out"
    context = '{"fields": ["logits"], "kept": [1, "two"]}'
    try:
        register_recorded(_archive(tmp_path, name))
        assert name in _pytree.SERIALIZED_TYPE_TO_PYTHON_TYPE
        spec = [1, {"type": name, "context": context, "children_spec": [_leaf()]}]
        text = json.dumps(spec)
        assert json.loads(_pytree.treespec_dumps(_pytree.treespec_loads(text))) == spec
    finally:
        if name in _pytree.SERIALIZED_TYPE_TO_PYTHON_TYPE:
            _pytree._deregister_pytree_node(_pytree.SERIALIZED_TYPE_TO_PYTHON_TYPE[name])


def test_a_module_that_imports_but_registers_no_such_type_is_one_error_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    library = tmp_path / "lib"
    (library / "kiln_test_plain").mkdir(parents=True)
    (library / "kiln_test_plain/__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(library))
    try:
        with pytest.raises(ActionError) as error:
            register_recorded(_archive(tmp_path, "kiln_test_plain.Out"))
    finally:
        sys.modules.pop("kiln_test_plain", None)
    assert error.value.message == (
        "the exported program's inputs or outputs are of type kiln_test_plain.Out, "
        "which importing its module does not register as a pytree node"
    )
    assert error.value.hint is not None and "deps" in error.value.hint
