"""kiln's layers, as docs/design.md draws them: every import of every module is checked.

A layer may import itself and the layers it lists; anything else is an upward
(or sideways) import and fails here with the file and line. Imports under
`if TYPE_CHECKING:` are names for annotations only, and are allowed anywhere.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from kiln.code_digest import KILN_ROOT

# layer -> the layers it may import (besides itself)
LEAVES = (
    "kiln",
    "kiln.errors",
    "kiln.machine",
    "kiln.cpu_isa",
    "kiln.code_digest",
    "kiln.cc_templates",
    "kiln.file_io",  # the user's text files read without hanging; OSErrors that name a file
    "kiln.process_tree",  # what an action left running, found and killed (subreaper)
    "kiln.test_results",  # a test run's record, JUnit XML: the runner writes, kiln test reads
    # the Windows torch libraries fetched and unpacked: by kiln's executor or by the action
    "kiln.windows_torch_libs",
)
RECORDS = (
    "kiln.action_specs",
    "kiln.package_specs",  # the package manifest and TensorRT packaging specs (issue 29)
    "kiln.model_test_specs",
    "kiln.action_graph",
    "kiln.host_facts",
    "kiln.label",
    "kiln.actions.tensorrt.settings",
    "kiln.windows_specs",
)
ALLOWED: dict[str, tuple[str, ...]] = {
    **dict.fromkeys(LEAVES, ()),
    "kiln.label": ("kiln.errors",),
    "kiln.action_specs": (),
    "kiln.package_specs": ("kiln.action_specs",),
    "kiln.model_test_specs": ("kiln.action_specs",),
    # the Torch-TensorRT settings kiln keeps off: rules refuse them, actions pass them off
    "kiln.actions.tensorrt.settings": (),
    # the records of Windows cross builds, apart so that Linux actions' digests stay put
    "kiln.windows_specs": ("kiln.action_specs",),
    "kiln.action_graph": (),
    # every file name of the output base and the disk cache (helper's seam: kiln/layout.py)
    "kiln.layout": ("kiln.errors", "kiln.action_graph"),
    # the lock file format: loading makes @pip of it, the environment manager installs it
    "kiln.pip_lock": ("kiln.errors",),
    "kiln.host_facts": ("kiln.machine", "kiln.cpu_isa"),
    "kiln.cache": ("kiln.errors", "kiln.layout", "kiln.file_io"),
    "kiln.state_file": ("kiln.cache",),
    # python -m kiln.actions.<name>: the torch scripts read spec records, nothing of the engine
    "kiln.fork_server": (),
    "kiln.actions": (
        "kiln.action_specs",
        "kiln.package_specs",  # AotiManifest writes the package manifest record
        "kiln.cc_templates",
        "kiln.fork_server",
        "kiln.cpu_isa",
        "kiln.windows_specs",
        "kiln.test_results",
        "kiln.model_test_specs",
        "kiln.windows_torch_libs",
    ),
    # TensorRT's actions build on the torch actions' helpers; no torch action imports them,
    # so a change here never touches a CPU action's key (kiln.code_digest)
    "kiln.actions.tensorrt": (
        "kiln.actions",
        "kiln.action_specs",
        "kiln.package_specs",
        "kiln.actions.tensorrt.settings",
        "kiln.cc_templates",
        "kiln.cpu_isa",  # a TensorRT package's manifest names the CPU its kernels need
    ),
    # what rules/ sees: the records and a few leaves, behind one surface
    "kiln.rule_api": (*LEAVES, *RECORDS),
    # the catalogue (rules/__init__.py): it imports its rules by name, at run time
    "kiln.rules": ("kiln.rule_api",),
    # the catalogue's folders the others build on; a feature folder (rules/<folder>/, any
    # not listed here) gets FEATURE_FOLDER
    "kiln.rules.pip": ("kiln.rule_api",),
    "kiln.rules.native": ("kiln.rule_api",),
    "kiln.rules.model": ("kiln.rule_api", "kiln.rules.pip"),
    # toolchains of the catalogue (rules/*/*_toolchain.py) are unpickled on a no-op build:
    # they stay below the rule API (no pydantic) and use the leaves directly
    "kiln.rules.toolchain": ("kiln.host_facts", "kiln.machine", "kiln.action_graph", "kiln.cache"),
    "kiln.workers": ("kiln.errors", "kiln.fork_server", "kiln.process_tree"),
    # the Python environments actions run in: made with pip, below the executor
    "kiln.pyenv": (*LEAVES, "kiln.action_graph", "kiln.pip_lock", "kiln.layout"),
    # namespaces and mounts; its processes speak the workers' frames
    "kiln.sandbox": ("kiln", "kiln.errors", "kiln.workers", "kiln.process_tree"),
    "kiln.exec": (
        *LEAVES,
        "kiln.action_graph",
        "kiln.host_facts",  # platform_match: does this machine match an action's platform
        "kiln.layout",
        "kiln.cache",
        "kiln.state_file",
        "kiln.workers",
        "kiln.pyenv",
        "kiln.sandbox",
    ),
    "kiln.loading": (
        *LEAVES,
        "kiln.label",
        "kiln.action_graph",
        "kiln.pip_lock",
        "kiln.rule_api",
        "kiln.rules",
    ),
    # remote backends as providers: the options record, the executor's protocol and
    # open_store (nodes open stores too); the store's protocol sits in kiln.cache
    "kiln.remote": (
        *LEAVES,
        "kiln.host_facts",
        "kiln.cache",
        "kiln.exec",
        "kiln.reapi.store",  # open_store's grpc:// arm
        "kiln.reapi.channel",
    ),
    # the REAPI (gRPC) store: below kiln.remote, which opens it, as the HTTP store is
    "kiln.reapi.channel": (),
    "kiln.reapi.stream_deadline": (),
    "kiln.reapi.store": (
        *LEAVES,
        "kiln.cache",
        "kiln.reapi.channel",
        "kiln.reapi.stream_deadline",
    ),
    # --remote_executor=grpc:// and `kiln worker --reapi`: a peer of kiln.remote_exec
    "kiln.reapi": (
        *LEAVES,
        "kiln.action_graph",
        "kiln.host_facts",
        "kiln.layout",
        "kiln.cache",
        "kiln.exec",
        "kiln.pyenv",
        "kiln.rules.toolchain",
        "kiln.remote",
        "kiln.remote_exec",
        "kiln.reapi.store",
        "kiln.reapi.channel",
        "kiln.reapi.stream_deadline",
    ),
    # --remote_executor on Ray: below the CLI, above the executor it plugs into (its
    # RemoteSpawner seam); workers on nodes probe TensorRT through the catalogue's toolchain
    # and make Python environments as the executor does
    "kiln.remote_exec": (
        *LEAVES,
        "kiln.action_graph",
        "kiln.host_facts",
        "kiln.layout",
        "kiln.cache",
        "kiln.exec",
        "kiln.pyenv",
        "kiln.rules.toolchain",
        "kiln.remote",
    ),
    # open_executor: its arms name the executor backends, so it sits above them
    "kiln.remote.backends": (
        *LEAVES,
        "kiln.cache",
        "kiln.remote",
        "kiln.remote_exec",
        "kiln.reapi",
    ),
    "kiln.query": (*LEAVES, "kiln.label", "kiln.loading"),
    # the build report (--report, kiln report): an invocation's record and its HTML; the
    # CLI gathers the record, so it imports no other layer
    "kiln.report": (),
    # kiln's rules under Bazel: the planning action runs the rules, the generator explores
    # them; attribute errors are worded by kiln.loading.attr_errors, as kiln words them;
    # the @pip repository is made from the lock with kiln.pyenv's pip and checks
    "kiln.bazel": (
        *LEAVES,
        *RECORDS,
        "kiln.rule_api",
        "kiln.rules",
        "kiln.loading",
        "kiln.pip_lock",
        "kiln.pyenv",
    ),
    "kiln.analysis": (
        *LEAVES,
        *RECORDS,
        "kiln.state_file",
        "kiln.loading",
        "kiln.rule_api",
        "kiln.rules",
    ),
}
TOP = ("kiln.cli", "kiln.__main__")  # may import anything
# A feature folder of the catalogue (rules/aoti/, rules/tensorrt/, a new rule's): the rule
# API, the model and pip rules and any toolchain; never another feature folder's rules
FEATURE_FOLDER = ("kiln.rule_api", "kiln.rules.model", "kiln.rules.pip", "kiln.rules.toolchain")


def _module(path: Path) -> str:
    parts = ["kiln", *path.relative_to(KILN_ROOT).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def layer_of(module: str) -> str:
    if module.startswith("kiln.rules.") and module.endswith("_toolchain"):
        return "kiln.rules.toolchain"
    if module.startswith("kiln.rules."):
        return ".".join(module.split(".")[:3])  # kiln.rules.<folder>
    for layer in sorted([*ALLOWED, *TOP], key=len, reverse=True):
        if module == layer or module.startswith(layer + "."):
            return layer
    raise AssertionError(f"{module} belongs to no layer: add it to the table")


def allowed_below(layer: str) -> tuple[str, ...]:
    if layer.startswith("kiln.rules.") and layer not in ALLOWED:
        return FEATURE_FOLDER
    return ALLOWED[layer]


def _is_module(name: str) -> bool:
    base = KILN_ROOT.joinpath(*name.split(".")[1:])
    return base.with_suffix(".py").is_file() or (base / "__init__.py").is_file()


def _imports(path: Path) -> list[tuple[int, str]]:
    """(line, kiln module) of every import outside `if TYPE_CHECKING:` blocks."""
    tree = ast.parse(path.read_text(), str(path))
    typing_only = {
        id(node)
        for block in ast.walk(tree)
        if isinstance(block, ast.If) and ast.unparse(block.test).endswith("TYPE_CHECKING")
        for node in ast.walk(block)
    }
    package = _module(path) if path.name == "__init__.py" else _module(path).rpartition(".")[0]
    found = []
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(
                    [*package.split(".")[: len(package.split(".")) - node.level + 1], base]
                ).rstrip(".")
            for alias in node.names:
                name = f"{base}.{alias.name}"
                found.append((node.lineno, name if _is_module(name) else base))
    return [(line, name) for line, name in found if name == "kiln" or name.startswith("kiln.")]


def _sources() -> list[Path]:
    rules = KILN_ROOT / "rules"
    own = [p for p in KILN_ROOT.rglob("*.py") if not p.is_relative_to(rules)]
    return sorted([*own, *rules.rglob("*.py")])


@pytest.mark.parametrize("path", _sources(), ids=lambda p: str(p.relative_to(KILN_ROOT)))
def test_no_module_imports_a_layer_above_its_own(path: Path) -> None:
    module = _module(path)
    layer = layer_of(module)
    if layer in TOP:
        return
    allowed = {layer, *allowed_below(layer)}
    upward = [
        f"{path.relative_to(KILN_ROOT)}:{line}: {module} ({layer}) imports {name} "
        f"({layer_of(name)})"
        for line, name in _imports(path)
        if layer_of(name) not in allowed
    ]
    assert not upward, "\n".join(upward)


def test_rules_see_only_the_rule_api() -> None:
    """The catalogue's rules import kiln.rule_api and each other: no kiln.exec, no engine."""
    for path in (KILN_ROOT / "rules").rglob("*.py"):
        if path.stem.endswith("_toolchain"):
            continue
        names = {name for _, name in _imports(path)}
        outside = {n for n in names if not n.startswith(("kiln.rule_api", "kiln.rules"))}
        assert not outside, f"{path.name} imports {sorted(outside)}"


def test_the_checker_sees_an_upward_import(tmp_path: Path) -> None:
    """The test above can fail: an import of kiln.cli from the cache layer is found."""
    assert layer_of("kiln.cache.cas") == "kiln.cache"
    assert layer_of("kiln.cli.build") not in {"kiln.cache", *ALLOWED["kiln.cache"]}
    assert layer_of("kiln.rules.tensorrt.trt_toolchain") == "kiln.rules.toolchain"


def test_feature_folders_stand_apart() -> None:
    """A rule folder builds on the model rules and toolchains, not on another feature's
    rules; a torch action never imports TensorRT's (a CPU action's key would name them)."""
    aoti = allowed_below(layer_of("kiln.rules.aoti.aoti_package"))
    assert layer_of("kiln.rules.model.torch_model") in aoti
    assert layer_of("kiln.rules.tensorrt.trt_toolchain") in aoti
    assert layer_of("kiln.rules.tensorrt.trt_engine") not in aoti
    # a new rule's folder needs no line here: it gets what aoti/ and tensorrt/ get
    assert allowed_below(layer_of("kiln.rules.onnx.onnx_export")) == FEATURE_FOLDER
    assert layer_of("kiln.rules.aoti.aoti_loader") not in allowed_below("kiln.rules.model")
    torch_actions = allowed_below(layer_of("kiln.actions.aoti_compile"))
    assert layer_of("kiln.actions.tensorrt.compiler") not in torch_actions


def test_the_design_page_draws_every_layer() -> None:
    """docs/design.md's drawing is this table's graph: a layer added here and not drawn
    there fails (a kiln.rules.<folder> layer is drawn as <folder>/)."""
    page = (KILN_ROOT.parent.parent / "docs" / "design.md").read_text()
    drawing = page[page.index("## Layers") :].split("\n## ", 1)[0]
    missing = []
    for layer in sorted({*ALLOWED, *TOP} - {"kiln"}):
        short = layer.removeprefix("kiln.")
        if layer.startswith("kiln.rules.") and layer != "kiln.rules.toolchain":
            short = layer.removeprefix("kiln.rules.") + "/"
        elif layer == "kiln.rules.toolchain":
            short = "_toolchain.py"
        if short not in drawing:
            missing.append(f"{layer} (as '{short}')")
    assert not missing, "docs/design.md's Layers drawing lacks " + ", ".join(missing)
