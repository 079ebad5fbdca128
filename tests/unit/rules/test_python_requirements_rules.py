"""Targets that declare `@pip//` packages: what their actions run with and are keyed on."""

from __future__ import annotations

import json

import pytest
from kiln.action_graph import Action, PythonPackage
from kiln.analysis.analyzer import Analyzer
from kiln.errors import KilnError
from kiln.host_facts import HostFacts, ToolchainResolver
from kiln.loading.graph import GraphBuilder
from kiln.rules import load_rule

from tests.kiln_workspace import MakeWorkspace, Workspace

H = {n: f"sha256:{n * 64}" for n in "123456"}


def lock(timm: str = "1.0.31", torch: str | None = None) -> str:
    text = f"""\
        huggingface-hub==0.36.2 --hash={H["1"]}
            # via
            #   timm
            #   transformers
        pyyaml==6.0.4 --hash={H["2"]}
            # via huggingface-hub
        timm=={timm} --hash={H["3"] if timm == "1.0.31" else H["4"]}
            # via -r requirements.in
        transformers==4.57.6 --hash={H["5"]}
            # via -r requirements.in
        """
    if torch:
        text += f"        torch=={torch} --hash={H['6']}\n            # via timm\n"
    return text


def files(timm: str = "1.0.31", torch: str | None = None) -> dict[str, str]:
    return {
        "BUILD": """\
            python_requirements(
                name = "pip",
                lock = "requirements_lock.txt",
                torchvision_cpu_ops = True,
            )
            """,
        "requirements_lock.txt": lock(timm, torch),
        "m/BUILD": """\
            M = dict(src = "m.py", inputs = [{"name": "x", "shape": [2, 3]}])
            torch_model(name = "vit", factory = "m:vit", deps = ["@pip//timm"], **M)
            torch_model(name = "bert", factory = "m:bert", deps = ["@pip//transformers"], **M)
            torch_model(name = "plain", factory = "m:plain", **M)
            aoti_package(name = "vit_pt2", model = ":vit")
            aoti_package(name = "bert_pt2", model = ":bert")
            aoti_package(name = "plain_pt2", model = ":plain")
            model_weights(
                name = "w",
                src = "m.py",
                factory = "m:vit",
                deps = ["@pip//timm"],
                out = "w.safetensors",
            )
            """,
        "m/m.py": "",
    }


TARGETS = ["//m:vit_pt2", "//m:bert_pt2", "//m:plain_pt2", "//m:w"]


def analyze(ws: Workspace, labels: list[str] = TARGETS) -> list[Action]:
    loader = ws.loader()
    graph = GraphBuilder(loader).build(labels)
    analyzer = Analyzer(
        graph, load_rule, loader.location_of, ToolchainResolver(HostFacts.of_this_machine())
    )
    return analyzer.analyze(labels).actions


def python_actions(actions: list[Action], owner: str) -> list[Action]:
    return [a for a in actions if a.owner == owner and a.content is None]


def test_every_python_action_of_a_target_holds_its_packages_locked_closure(
    make_workspace: MakeWorkspace,
) -> None:
    actions = analyze(make_workspace(files()))
    vit = python_actions(actions, "//m:vit_pt2")
    assert [a.mnemonic for a in vit] == [
        "TorchExport",
        "AotiCompile",
        "AotiJoin",
        "AotiValidate",
        "AotiManifest",
    ]
    for action in vit + python_actions(actions, "//m:w"):
        assert action.python_env == (
            PythonPackage("huggingface_hub", "0.36.2", (H["1"],)),
            PythonPackage("pyyaml", "6.0.4", (H["2"],)),
            PythonPackage("timm", "1.0.31", (H["3"],)),
        )
    # The export (and the weights' init) import the model: their keys hold every pin.
    for action in vit[:1] + python_actions(actions, "//m:w"):
        props = dict(action.platform)
        assert props["pip:timm"] == f"1.0.31 {H['3']}"
        assert "pip:transformers" not in props


def test_the_actions_after_the_export_are_keyed_on_what_loading_the_program_needs(
    make_workspace: MakeWorkspace,
) -> None:
    """They load the exported program, not the model: their keys hold the export's record
    of what that imports (an input), not the environment's pins, so a bump of timm that
    leaves the program alone leaves them alone."""
    actions = analyze(make_workspace(files()))
    export, *after = python_actions(actions, "//m:vit_pt2")
    needs = "kiln-out/m/vit_pt2.needs.json"
    assert needs in {f.path for f in export.outputs}
    for action in after:
        assert needs in {f.path for f in action.inputs}, action.mnemonic
        assert not [k for k in dict(action.platform) if k.startswith("pip:")], action.mnemonic
    for action in python_actions(actions, "//m:plain_pt2"):
        assert action.python_env == ()
        assert not [k for k in dict(action.platform) if k.startswith("pip:")]


def test_a_genrule_runs_outside_any_python_environment(make_workspace: MakeWorkspace) -> None:
    ws = make_workspace({"g/BUILD": 'genrule(name = "g", outs = ["o"], cmd = "touch $@")\n'})
    (action,) = python_actions(analyze(ws, ["//g:g"]), "//g:g")
    assert action.python_env is None


def test_the_spec_names_the_declared_packages_and_the_torchvision_setting(
    make_workspace: MakeWorkspace,
) -> None:
    actions = analyze(make_workspace(files()))
    specs = {
        a.outputs[0].path: json.loads(a.content)
        for a in actions
        if a.content and a.outputs[0].path.endswith(".json")
    }
    source = specs["kiln-out/m/vit_pt2.export.json"]["model"]["source"]
    assert source["python_deps"] == ["@pip//timm:timm"]
    assert source["torchvision_cpu_ops"] is True
    plain = specs["kiln-out/m/plain_pt2.export.json"]["model"]["source"]
    assert (plain["python_deps"], plain["torchvision_cpu_ops"]) == ([], False)


def test_a_new_version_of_one_package_changes_only_its_declarers_actions(
    make_workspace: MakeWorkspace,
) -> None:
    before = analyze(make_workspace(files()))
    after = analyze(make_workspace(files(timm="1.0.32")))
    changed = {a.owner for a, b in zip(before, after, strict=True) if a != b}
    assert changed == {"//m:vit_pt2", "//m:w"}


def test_a_lock_pinning_another_torch_is_refused(make_workspace: MakeWorkspace) -> None:
    with pytest.raises(KilnError) as caught:
        analyze(make_workspace(files(torch="2.5.1")), ["//m:vit_pt2"])
    have = HostFacts.of_this_machine().version("torch")
    assert caught.value.format() == (
        f"requirements_lock.txt: @pip//timm:timm: requirements_lock.txt pins torch==2.5.1, "
        f"but the toolchain's torch is {have}: kiln never installs torch from a lock\n"
        f"  hint: lock torch=={have.split('+')[0]} (or leave it out of the lock)"
    )


def test_the_toolchains_own_torch_may_be_in_the_lock(make_workspace: MakeWorkspace) -> None:
    have = HostFacts.of_this_machine().version("torch") or ""
    actions = analyze(make_workspace(files(torch=have.split("+")[0])), ["//m:vit_pt2"])
    assert "pip:torch" in dict(python_actions(actions, "//m:vit_pt2")[0].platform)


def test_python_requirements_outside_the_root_package_is_refused(
    make_workspace: MakeWorkspace,
) -> None:
    ws = make_workspace(
        {
            "sub/BUILD": 'python_requirements(name = "pip", lock = "lock.txt")\n',
            "sub/lock.txt": "",
        }
    )
    with pytest.raises(KilnError, match="python_requirements\\(\\) belongs in the root BUILD"):
        analyze(ws, ["//sub:pip"])
