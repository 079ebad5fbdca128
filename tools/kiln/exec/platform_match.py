"""Does a machine match an action's platform properties? One answer for three questions.

An action's platform properties (kiln.action_graph.Action.platform) say what
its result depends on besides its inputs: os, arch, Python, the versions of
the distributions it imports, the code of its `kiln.actions` module, the GPU
it builds for. The same comparison decides

    where an action runs   an action this host does not match goes to the
                           cluster (placement.py: "a toolchain the host lacks")
    what a worker accepts  a remote worker refuses an action it does not match,
                           naming both values (remote_exec/node_runner.py)

What each property means here:

    os, arch, python, python_impl    the host facts of the interpreter that runs actions
    cpu_isa                          the instruction set inductor compiles for there
                                     (kiln.cpu_isa; a `native` package's actions hold it)
    gpu_name, compute_capability     the machine's first GPU ("-" without one)
    kiln_actions                     the digest of the action's own kiln.actions module
    cuda, tensorrt,                  what the TensorRT probe found, where the offer has
      torch_tensorrt_flavour         it (left alone where it does not)
    device, target_platform          the artifact's, not the machine's: left alone
    python_env                       the format of the action's Python environment
                                     (pyenv), which a machine makes: left alone
    pip:<name>                       a locked package of that environment, which the
                                     machine that runs the action installs (a node: from
                                     the wheels the driver sends): left alone
    anything else                    a distribution's version, as
                                     ActionFactory.python_platform writes it ("-": absent)
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from kiln import code_digest, machine
from kiln.action_graph import PIP_PROPERTY, Action
from kiln.host_facts import HostFacts
from kiln.machine import Gpu

# Properties of the machine itself (the rest that a machine can answer are distributions).
_HOST = ("os", "arch", "python", "python_impl", "cpu_isa")
_GPU = ("gpu_name", "compute_capability")
PROBE_KEYS = ("cuda", "tensorrt", "torch_tensorrt_flavour")
_ARTIFACT = ("device", "target_platform", "python_env")
ACTIONS_CODE = "kiln_actions"
ACTIONS_PREFIX = "kiln.actions."


@dataclass(frozen=True)
class Mismatch:
    name: str
    wanted: str  # what the action's key says
    here: str  # what this machine has

    def __str__(self) -> str:
        return f"{self.name} {self.wanted!r} (this machine: {self.here!r})"


@dataclass(frozen=True)
class MachineOffer:
    """What one machine offers actions: its host facts, its GPUs, extra facts (TensorRT)."""

    host: HostFacts
    gpus: tuple[Gpu, ...] = ()
    # Facts a toolchain probe found (cuda, torch_tensorrt_flavour, tensorrt): by property name.
    extra: Mapping[str, str] | None = None

    def value(self, name: str) -> str | None:
        """This machine's value of property `name`; None where it is no machine property."""
        if name == "cpu_isa":
            return self.host.cpu_isa or "-"
        if name in _HOST:
            return str(getattr(self.host, name))
        if name in _GPU:
            if not self.gpus:
                return "-"
            gpu = self.gpus[0]
            return gpu.name if name == "gpu_name" else gpu.compute_capability
        if name in PROBE_KEYS:
            return None if self.extra is None else self.extra.get(name, "-")
        if name in _ARTIFACT or name.startswith(PIP_PROPERTY):
            return None
        return dict(self.host.distributions).get(machine.normalized(name), "-")


def actions_module(action: Action) -> str | None:
    """`kiln.actions.<name>` of a `python -m kiln.actions.<name> ...` action, else None."""
    argv = action.argv
    if len(argv) >= 3 and argv[1] == "-m" and argv[2].startswith(ACTIONS_PREFIX):
        return argv[2]
    return None


def mismatches(action: Action, offer: MachineOffer, *, check_code: bool = True) -> list[Mismatch]:
    """The action's platform properties this machine does not match (empty: it may run it).

    With `check_code`, the digest of the action's `kiln.actions` module here must
    equal its `kiln_actions` property (a worker checks it: its kiln is not the driver's).
    """
    found: list[Mismatch] = []
    for name, wanted in action.platform:
        if name == ACTIONS_CODE:
            module = actions_module(action)
            if check_code and module is not None:
                digest = code_digest.content_digest((module,))
                if digest != wanted:
                    found.append(Mismatch(name, wanted, digest))
            continue
        here = offer.value(name)
        if here is not None and here != wanted:
            found.append(Mismatch(name, wanted, here))
    return found


def describe(found: Iterable[Mismatch]) -> str:
    return "; ".join(str(m) for m in found)
