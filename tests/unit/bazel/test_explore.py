"""The shape of each rule's action graph, found by running the rule (kiln.bazel.explore)."""

from __future__ import annotations

import pytest
from kiln.bazel.explore import Explorer, Ref, RuleShape, RuleTable, ShapeError
from kiln.rule_api import (
    DefaultInfo,
    LabelAttr,
    Resources,
    Rule,
    RuleAttrs,
    RuleContext,
    WeightsSpec,
)
from kiln.rules import all_rules
from pydantic import Field


@pytest.fixture(scope="module")
def tables() -> dict[str, RuleTable]:
    registry = all_rules()
    explorer = Explorer(registry)
    return {name: explorer.table(registry[name]) for name in ("aoti_package", "torch_model")}


def _mnemonics(shape: RuleShape) -> list[str]:
    return [a.mnemonic for a in shape.actions]


PACKAGED = '["cpu","inductor","linux_x86_64","packaged",true]'


def test_aoti_package_shape_depends_on_device_backend_platform_weights_and_validate(
    tables: dict[str, RuleTable],
) -> None:
    table = tables["aoti_package"]
    assert table.key == ("device", "backend", "target_platform", "weights", "validate")
    assert table.defaults == {
        "device": "cpu",
        "backend": "inductor",
        "target_platform": "linux_x86_64",
        "weights": "packaged",
        "validate": True,
    }
    # TensorRT needs cuda and holds its weights in its engines; Windows packages are CPU
    # packages with their weights inside: no other shapes of either.
    linux = [
        f'["{device}","inductor","linux_x86_64","{form}",{validate}]'
        for device in ("cpu", "cuda")
        for form in ("packaged", "separate")
        for validate in ("false", "true")
    ]
    windows = [f'["cpu","inductor","windows_x86_64","packaged",{v}]' for v in ("false", "true")]
    tensorrt = [f'["cuda","tensorrt","linux_x86_64","packaged",{v}]' for v in ("false", "true")]
    assert sorted(table.shapes) == sorted([*linux, *windows, *tensorrt])
    full = table.shapes[PACKAGED]
    bare = table.shapes['["cpu","inductor","linux_x86_64","packaged",false]']
    assert _mnemonics(full) == [
        "TorchExport",
        "AotiCompile",
        "AotiJoin",
        "AotiValidate",
        "AotiManifest",
    ]
    assert _mnemonics(bare) == ["TorchExport", "AotiCompile", "AotiJoin", "AotiManifest"]
    trt = table.shapes['["cuda","tensorrt","linux_x86_64","packaged",true]']
    assert _mnemonics(trt) == ["TorchExport", "AotiPackage", "AotiValidate"]
    assert Ref("out", "{name}.validation.json") in full.files
    assert Ref("out", "{name}.validation.json") not in bare.files
    assert not full.gpu and table.shapes['["cuda","inductor","linux_x86_64","packaged",true]'].gpu


def test_inputs_are_found_through_the_model_target(tables: dict[str, RuleTable]) -> None:
    export, compile_, join, validate, _ = tables["aoti_package"].shapes[PACKAGED].actions
    model = [Ref("attr", f"model.{a}") for a in ("deps", "src", "weights")]
    assert export.inputs == (*model, Ref("out", "{name}.export.json"))
    assert export.outputs == (
        Ref("out", "{name}.golden.safetensors"),
        Ref("out", "{name}.needs.json"),
        Ref("out", "{name}.structure.pt2"),
        Ref("out", "{name}.weights.safetensors"),
    )
    # The compile reads the structure alone (no weights, no model source) and the record
    # of what loading it imports, validation no model source: both early cutoffs, under
    # Bazel too.
    assert compile_.inputs == (
        Ref("out", "{name}.compile.json"),
        Ref("out", "{name}.needs.json"),
        Ref("out", "{name}.structure.pt2"),
    )
    assert Ref("out", "{name}.weights.safetensors") in join.inputs
    assert not set(model) & set(validate.inputs)
    assert Ref("out", "{name}.golden.safetensors") in validate.inputs
    assert [a.data() for a in compile_.argv] == [
        {"python": True},
        {"text": "-m"},
        {"text": "kiln.actions.aoti_compile"},
        {"file": {"kind": "out", "value": "{name}.compile.json"}},
    ]


def test_a_loader_among_the_outputs_gives_a_cc_library(tables: dict[str, RuleTable]) -> None:
    assert tables["aoti_package"].shapes[PACKAGED].cc() == {
        "srcs": ["{name}_loader/{name}.cpp"],
        "hdrs": ["{name}_loader/{name}.h"],
        "includes": ["{name}_loader"],
        "data": ["{name}.pt2"],
    }


def test_optional_labels_left_out_need_no_shape_of_their_own(
    tables: dict[str, RuleTable],
) -> None:
    table = tables["torch_model"]
    assert (table.key, list(table.shapes)) == ((), ["[]"])
    shape = table.shapes["[]"]
    assert shape.actions == () and shape.writes == ()
    assert shape.files == (Ref("attr", "deps"), Ref("attr", "src"), Ref("attr", "weights"))
    assert table.labels == {"src": "label", "deps": "label_list", "weights": "label"}


# -- a rule that changes: what issue 16 will do to aoti_package -------------------------


class JoinAttrs(RuleAttrs):
    src: LabelAttr = Field(description="a file")
    join: bool = Field(default=False, description="add a second action")


def _join(ctx: RuleContext[JoinAttrs]) -> list[object]:
    src = ctx.file("src", ctx.attrs.src)
    spec = ctx.declare_file(f"{ctx.name}.json")
    out = ctx.declare_file(f"{ctx.name}.bin")
    source = {
        "src": src.path,
        "factory": "m:f",
        "factory_kwargs": {},
        "weights": None,
        "seed": 0,
        "python_deps": (),
        "torchvision_cpu_ops": False,
    }
    ctx.actions.write_spec(spec, WeightsSpec(source=source, output=out.path))  # type: ignore[arg-type]
    ctx.actions.run_python(
        mnemonic="Compile",
        module="compile",
        spec=spec,
        inputs=[src],
        outputs=[out],
        resources=Resources(),
    )
    outputs = [out]
    if ctx.attrs.join:
        joined = ctx.declare_file(f"{ctx.name}.joined")
        ctx.actions.run_python(
            mnemonic="Join",
            module="join",
            spec=spec,
            inputs=[out],
            outputs=[joined],
            resources=Resources(),
        )
        outputs.append(joined)
    return [DefaultInfo(tuple(outputs))]


JOIN = Rule(name="join_rule", attrs=JoinAttrs, doc="A test rule.", impl=_join)


def test_a_new_action_reaches_the_shape_without_any_starlark() -> None:
    table = Explorer({"join_rule": JOIN}).table(JOIN)
    assert table.key == ("join",)
    assert _mnemonics(table.shapes["[true]"]) == ["Compile", "Join"]
    assert _mnemonics(table.shapes["[false]"]) == ["Compile"]
    join = table.shapes["[true]"].actions[1]
    assert (join.module, join.inputs) == (
        "kiln.actions.join",
        (Ref("out", "{name}.bin"), Ref("out", "{name}.json")),
    )


def test_a_mandatory_attribute_needs_an_example() -> None:
    class NoExample(RuleAttrs):
        pattern: str = Field(description="mandatory, no example")

    rule = Rule(name="no_example", attrs=NoExample, doc="", impl=lambda ctx: [DefaultInfo()])
    with pytest.raises(ShapeError, match="attribute 'pattern' is mandatory and has no example"):
        Explorer({"no_example": rule}).table(rule)


def test_model_test_is_a_test_whose_runner_bazel_runs_not_builds() -> None:
    registry = all_rules()
    table = Explorer(registry).table(registry["model_test"])
    # size, timeout and flaky are Bazel's own on a test rule: no shapes of theirs
    assert table.key == ("eager",)
    with_eager = table.shapes["[true]"]
    assert _mnemonics(with_eager) == ["ModelEager", "TestRunner"]
    eager, runner = with_eager.actions
    assert not eager.test and runner.test
    assert runner.command_module == "kiln.actions.model_test"
    assert "kiln.actions.model_test" in table.modules
    # the label, the timeout, the attempts and the outputs are the test set-up's
    env = dict(runner.env)
    assert not {"TEST_TARGET", "TEST_TIMEOUT", "KILN_TEST_ATTEMPTS", "KILN_TEST_OUTPUTS"} & set(env)
    outputs = {o.ref.value: o.test for o in with_eager.outputs}
    assert outputs["{name}.test"] is True and outputs["{name}.eager.safetensors"] is False
    # eager and reference are never set together: the shape without eager has reference's
    # files, and a baseline's (found with max_drop's example)
    inputs = {r.attr or r.value for r in table.shapes["[false]"].actions[0].inputs}
    assert {"reference", "baseline", "metric_src"} <= inputs
