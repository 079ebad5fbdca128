"""Where an action runs: here, on the remote executor, or both at once (Bazel's strategies).

    --spawn_strategy=local|worker|remote|dynamic   the default for every action
    --strategy=Mnemonic=local|worker|remote|dynamic   one mnemonic's, over the default
    (neither)                                      "auto": remote only what this host
                                                   cannot run, the rest here

"auto" sends an action to the cluster when it needs more GPUs than this host
has (--gpus), or when this host does not match its platform properties: a
toolchain it lacks (torch_tensorrt for a TensorRT engine, another GPU model;
platform_match.py). Without --remote_executor everything runs here. A
file-write action never leaves: its content is known already. One with
third-party packages (@pip//) goes as any other: the node makes its Python
environment of the wheels the driver sends (remote_exec/node_env.py).

`local` and `worker` both run here; `local` also keeps a Python action out of
persistent workers, as Bazel's does. `dynamic` runs an action here and
remotely at once and takes the first success (Bazel's dynamic execution);
one that cannot run here (GPUs) is plainly remote.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from kiln.action_graph import Action, Resources
from kiln.exec.platform_match import MachineOffer, mismatches

Placement = Literal["local", "worker", "remote", "dynamic"]
STRATEGIES: tuple[Placement, ...] = ("local", "worker", "remote", "dynamic")


@dataclass(frozen=True)
class PlacementPolicy:
    remote: bool = False  # --remote_executor is set
    default: Placement | None = None  # --spawn_strategy; None: auto
    by_mnemonic: Mapping[str, Placement] = field(default_factory=dict)
    local_gpus: int = 0
    local_flavour: Literal["local", "worker"] = "worker"  # --strategy=worker|local
    # This host, for "a toolchain it lacks"; None: only GPU counts decide.
    here: MachineOffer | None = None

    def placement(self, action: Action) -> Placement:
        """Where `action` runs: local (a plain process), worker, remote or dynamic."""
        chosen = self.by_mnemonic.get(action.mnemonic, self.default)
        if action.content is not None:
            return "local"
        if not self.remote:
            return chosen if chosen in ("local", "worker") else self.local_flavour
        if chosen in ("local", "worker"):
            return chosen
        if chosen == "remote" or not self.can_run_here(action):
            return "remote"
        if chosen == "dynamic":
            return "dynamic"
        return self.local_flavour

    def can_run_here(self, action: Action) -> bool:
        if action.resources.gpu > self.local_gpus:
            return False
        return self.here is None or not mismatches(action, self.here, check_code=False)

    @property
    def gpu_actions_remote(self) -> bool:
        """GPU actions run on the cluster (so analysis takes GPU facts from there)."""
        return self.remote and self.local_gpus == 0 and self.default not in ("local", "worker")

    def reserved(self, action: Action) -> Resources:
        """What the action holds of this host while it runs: a remote one only a job slot."""
        if self.placement(action) == "remote":
            return Resources(cpu=1, gpu=0, memory_mb=0)
        return action.resources
