"""What loading an exported program imports besides torch: TorchExport's <name>.needs.json.

torch.export.load of a program rebuilds the pytree specs of its inputs and
outputs, and each node type must be registered by then (a Hugging Face model's
`BaseModelOutput` is registered by importing transformers); a custom op must be
defined. Those come from third-party packages, and nothing else of the model's
environment reaches an action that only loads the program (AotiCompile,
AotiValidate, TrtCompile, AotiPackage). The export records them here, and those
actions hold this record in their key in place of every locked package of the
environment: a bump of timm that leaves the graph alone leaves the structure and
this record alone, so the compile is a cache hit; a bump of transformers, whose
output types the program names, re-runs it.

The packages are the locked requirements of the environment the export ran in
(its kiln-env.json, kiln.pyenv), with their wheel hashes: the distributions that
provide the node types' modules and their locked dependencies. A custom op cannot
be traced to its distribution, so a program with one needs every locked package.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path

import torch

from kiln.action_specs import ProgramNeeds

# The manifest kiln.pyenv writes at the root of every environment it makes.
ENV_MANIFEST = "kiln-env.json"
# Top-level modules whose node types every interpreter has: nothing to import.
_BUILTIN_MODULES = frozenset({"builtins", "collections", "torch", "typing"})
# Operator namespaces of torch itself (and the higher-order operators it defines).
_TORCH_NAMESPACES = frozenset(
    {"aten", "prims", "prim", "quantized", "_quantized", "_c10d_functional", "higher_order"}
)
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


def needs_of(program: torch.export.ExportedProgram) -> ProgramNeeds:
    """The modules, custom op namespaces and locked packages loading `program` needs."""
    modules = sorted({m for m in _node_modules(program) if _top(m) not in _BUILTIN_MODULES})
    ops = sorted(_custom_namespaces(program))
    locked = _locked_requirements()
    if ops:
        packages = set(locked)
    else:
        distributions = metadata.packages_distributions()
        roots = {normalized(d) for m in modules for d in distributions.get(_top(m), ())}
        packages = _closure(roots, set(locked))
    return ProgramNeeds(
        modules=tuple(modules),
        custom_ops=tuple(ops),
        packages=tuple(locked.get(name, _installed(name)) for name in sorted(packages)),
    )


def write(path: Path, needs: ProgramNeeds) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(needs.to_json(), encoding="utf-8")


def normalized(name: str) -> str:
    """A distribution's name as the lock and `@pip//name` spell it (kiln.pip_lock's rule)."""
    return re.sub(r"[-_.]+", "_", name).lower()


def _top(module: str) -> str:
    return module.partition(".")[0]


def _node_modules(program: torch.export.ExportedProgram) -> Iterator[str]:
    """The module of every node type in the program's input and output specs."""
    specs = [program.call_spec.in_spec, program.call_spec.out_spec]
    while specs:
        spec = specs.pop()
        if spec is None:
            continue
        node_type = getattr(spec, "type", None)
        if node_type is not None:
            yield getattr(node_type, "__module__", None) or "builtins"
        specs.extend(spec.children())


def _custom_namespaces(program: torch.export.ExportedProgram) -> Iterator[str]:
    for module in program.graph_module.modules():
        graph = getattr(module, "graph", None)
        for node in graph.nodes if graph is not None else ():
            namespace = getattr(node.target, "namespace", None)
            if isinstance(namespace, str) and namespace not in _TORCH_NAMESPACES:
                yield namespace


def _locked_requirements() -> dict[str, str]:
    """name -> `name==version --hash=...` of each locked package of this environment
    (none where the interpreter is no kiln environment: a Bazel @pip, a test's)."""
    try:
        manifest = json.loads((Path(sys.prefix) / ENV_MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return {normalized(line.partition("==")[0]): line for line in manifest.get("packages", ())}


def _closure(roots: set[str], locked: set[str]) -> set[str]:
    """`roots` and the locked packages they require, transitively."""
    found: set[str] = set()
    stack = sorted(roots)
    while stack:
        name = stack.pop()
        if name in found:
            continue
        found.add(name)
        for requirement in _requires(name):
            if requirement in locked and requirement not in found:
                stack.append(requirement)
    return found


def _requires(name: str) -> Iterator[str]:
    """The distributions `name` requires, extras left out (other markers count: the
    closure may be larger than needed, never smaller)."""
    try:
        texts = metadata.requires(name) or []
    except metadata.PackageNotFoundError:
        return
    for text in texts:
        requirement, _, marker = text.partition(";")
        match = _NAME.match(requirement.strip())
        if match and "extra" not in marker:
            yield normalized(match.group(0))


def _installed(name: str) -> str:
    """`name==version` of a distribution the environment holds but no lock pins (the
    toolchain's): its version is what the key can hold."""
    try:
        return f"{name}=={metadata.version(name)}"
    except metadata.PackageNotFoundError:
        return f"{name}==-"
