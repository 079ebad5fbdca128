"""Which GPUs each action may use: a pool of ids, and the environment that says so.

The scheduler (scheduler.py) holds one GpuPool of the ids this build may use
(host.py: CUDA_VISIBLE_DEVICES or nvidia-smi, the first --gpus of them). An
action that needs N GPUs takes N free ids when it starts and gives them back
when it ends, however it ends (success, failure, a kill, a cancel), so two
actions running at once never share a GPU. The spawner then sets
CUDA_VISIBLE_DEVICES to exactly those ids (cuda_env); an action needing no GPU
gets it empty, so its result can never depend on a GPU it did not declare.

The ids are in no key: a rebuild that lands on other GPUs of the same model
is all cache hits (the model and compute capability are platform properties).
"""

from __future__ import annotations

CUDA_VISIBLE_DEVICES = "CUDA_VISIBLE_DEVICES"


class GpuPool:
    """The ids a build may hand out and which are free; used by one thread (the scheduler's)."""

    def __init__(self, ids: tuple[str, ...]) -> None:
        self.ids = ids
        self._free = list(ids)

    @property
    def free(self) -> int:
        return len(self._free)

    def take(self, count: int) -> tuple[str, ...]:
        """`count` free ids, the first in the pool's order; fewer where fewer are free (an
        action needing more GPUs than the build has runs alone with all of them)."""
        taken, self._free = tuple(self._free[:count]), self._free[count:]
        return taken

    def give_back(self, ids: tuple[str, ...]) -> None:
        back = set(ids) | set(self._free)
        self._free = [i for i in self.ids if i in back]


def cuda_env(gpus_needed: int, ids: tuple[str, ...] | None) -> dict[str, str]:
    """CUDA_VISIBLE_DEVICES for an action: the ids it holds, or none at all for one
    needing no GPU. {} for a GPU action holding none (`ids` None: not assigned here,
    e.g. a run outside the scheduler), which then sees what the machine shows."""
    if not gpus_needed:
        return {CUDA_VISIBLE_DEVICES: ""}
    if not ids:
        return {}
    return {CUDA_VISIBLE_DEVICES: ",".join(ids)}
