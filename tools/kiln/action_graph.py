"""Actions: the unit of caching and of remote execution, as plain data.

An action is argv + environment + declared input files + declared outputs +
platform properties + resource needs, and nothing else may influence its
result. Rules declare them (through kiln.rule_api), the analysis cache
pickles them, the executor runs them; its key is computed in
kiln.exec.action_key. Descriptions and progress messages are not part of
the key, so rewording one never rebuilds anything.

ActionGraph is the frozen graph the scheduler runs: actions by index, and
for each the indices of the actions it depends on and of those depending on
it, computed once.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kiln.windows_specs import WindowsTorch

GENERATED_ROOT = "kiln-out"

# argv[0] of a Python action (`python -m kiln.actions.<name> ...`): a name, not a
# path, so that no key holds where an interpreter is installed (a venv at another
# path, another checkout, another machine all compute the same key). The spawner
# that runs the command resolves it to its own interpreter: the local spawner to
# the build's (--strategy=local), a persistent worker is that interpreter already,
# a remote spawner to the one on its machine (kiln.exec.spawn.resolve_argv).
PYTHON_INTERPRETER = "python"

# The whole environment of a Python action: nothing of the user's shell leaks in.
PYTHON_ACTION_ENV = {
    "PATH": "/usr/local/bin:/usr/bin:/bin",
    "PYTHONHASHSEED": "0",
    "PYTHONDONTWRITEBYTECODE": "1",
    "LANG": "C.UTF-8",
}


@dataclass(frozen=True, slots=True, order=True)
class File:
    """A file an action reads or writes, by its path relative to the execroot.

    Source files sit at their workspace path (`models/mlp.py`); generated
    files under kiln-out (`kiln-out/models/mlp.pt2`), in the workspace and in
    every execroot alike.
    """

    path: str
    owner: str = field(default="", compare=False)  # the label that declared it
    # A directory output (or an input that is one): its files are collected
    # whole, whatever their number, as REAPI's output_directories.
    directory: bool = field(default=False, compare=False)

    @property
    def is_source(self) -> bool:
        return not self.path.startswith(GENERATED_ROOT + "/")


# Platform properties of Python actions: the environment's layout (bump when what an
# environment holds besides its packages changes), and one `pip:<name>` per package.
PYTHON_ENV_FORMAT = "1"
PIP_PROPERTY = "pip:"


@dataclass(frozen=True, slots=True, order=True)
class PythonPackage:
    """A locked third-party distribution a Python action's interpreter holds (kiln.pip_lock)."""

    name: str  # normalized, as the label `@pip//<name>` spells it
    version: str
    hashes: tuple[str, ...]  # "sha256:<hex>" of its wheel, sorted

    @property
    def requirement(self) -> str:
        """As pip installs it: `name==version --hash=...`."""
        return f"{self.name}=={self.version}" + "".join(f" --hash={h}" for h in self.hashes)


@dataclass(frozen=True, slots=True)
class Resources:
    """What an action holds while it runs; the scheduler never oversubscribes."""

    cpu: int = 1
    gpu: int = 0
    memory_mb: int = 0


@dataclass(frozen=True)
class Action:
    owner: str  # label of the target that declared it
    mnemonic: str  # "Genrule", "TorchExport", "AotiPackage", ...
    argv: tuple[str, ...]
    inputs: tuple[File, ...]
    outputs: tuple[File, ...]
    env: tuple[tuple[str, str], ...] = ()
    # Properties of the machine the result depends on: os, arch, toolchain
    # versions, GPU compute capability. They are part of the key.
    platform: tuple[tuple[str, str], ...] = ()
    resources: Resources = field(default_factory=Resources)
    supports_workers: bool = False  # argv is [PYTHON_INTERPRETER, -m, module, ...]
    # For a file-write action: the content, written without running anything.
    content: bytes | None = None
    is_executable: bool = False
    progress_message: str = field(default="", compare=False)
    # A Python action of the toolchain (argv is [python, ...]): the third-party packages
    # its interpreter holds besides the toolchain's own (torch, kiln's runtime). The
    # executor runs it in the environment made of exactly those (kiln.pyenv); their
    # names, versions and hashes are in `platform` too, which is what keys them (an
    # action that only loads an exported program is keyed on the export's record of
    # what loading it imports instead: ActionFactory.run_python's `needs`).
    # None: not run by the toolchain's Python (a genrule, a file write).
    python_env: tuple[PythonPackage, ...] | None = None
    # The Windows torch libraries a cross build links and runs with (its spec names the
    # same wheel, which is what keys it): kiln unpacks them before a sandboxed action runs,
    # read-only to it (kiln.actions.windows.torch_libs). Not in the key.
    windows_torch: WindowsTorch | None = field(default=None, compare=False)
    # Run even where a result is cached (`kiln test --nocache_test_results`); the result
    # is stored all the same. Not in the key: asking for a fresh run changes no result.
    uncached: bool = field(default=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "inputs", tuple(sorted(set(self.inputs))))
        object.__setattr__(self, "outputs", tuple(sorted(set(self.outputs))))
        object.__setattr__(self, "env", tuple(sorted(dict(self.env).items())))
        object.__setattr__(self, "platform", tuple(sorted(dict(self.platform).items())))
        if self.python_env is not None:
            object.__setattr__(self, "python_env", tuple(sorted(set(self.python_env))))

    @property
    def primary_output(self) -> File:
        return self.outputs[0]

    def describe(self) -> str:
        return self.progress_message or f"{self.mnemonic} {self.owner}"


def needed_actions(actions_for: list[Action], producer: dict[str, Action]) -> list[Action]:
    """`actions_for` and every action they transitively depend on, dependencies first."""
    order: list[Action] = []
    seen: set[int] = set()
    stack: list[tuple[Action, bool]] = [(a, False) for a in reversed(actions_for)]
    while stack:
        action, expanded = stack.pop()
        if id(action) in seen:
            continue
        if expanded:
            seen.add(id(action))
            order.append(action)
            continue
        stack.append((action, True))
        for file in action.inputs:
            dep = producer.get(file.path)
            if dep is not None and id(dep) not in seen:
                stack.append((dep, False))
    return order


@dataclass(frozen=True)
class ActionGraph:
    """Actions and their dependencies by index; an action's producers come before it.

    Make one with ActionGraph.of(actions): `dependencies[i]` are the actions
    producing inputs of `actions[i]`, `dependents[i]` those reading its
    outputs, `producer` maps each output path to the index of its action.
    """

    actions: tuple[Action, ...]
    dependencies: tuple[tuple[int, ...], ...]
    dependents: tuple[tuple[int, ...], ...]
    producer: Mapping[str, int]

    @staticmethod
    def of(actions: Iterable[Action]) -> ActionGraph:
        """The graph of `actions`, which must hold the producer of every generated
        input they read (as needed_actions gives them); a ValueError otherwise."""
        ordered = tuple(actions)
        producer: dict[str, int] = {}
        for index, action in enumerate(ordered):
            for file in action.outputs:
                if producer.setdefault(file.path, index) != index:
                    other = ordered[producer[file.path]]
                    raise ValueError(
                        f"{file.path} is an output of {other.owner} and {action.owner}"
                    )
        dependencies: list[tuple[int, ...]] = []
        dependents: list[list[int]] = [[] for _ in ordered]
        for index, action in enumerate(ordered):
            deps = sorted({producer[f.path] for f in action.inputs if f.path in producer})
            dependencies.append(tuple(deps))
            for dep in deps:
                dependents[dep].append(index)
        return ActionGraph(ordered, tuple(dependencies), tuple(map(tuple, dependents)), producer)

    def __len__(self) -> int:
        return len(self.actions)
