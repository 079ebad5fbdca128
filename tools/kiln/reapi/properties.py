"""An action's platform as REAPI platform properties: what a farm routes by.

kiln's placement knows what an action needs of a machine (Action.platform,
exec/platform_match.py). A REAPI server matches an action's `platform`
against what each worker advertises, so the properties that pick a machine
are sent under the names Bazel users give them in `exec_properties` where a
convention exists:

    kiln property                 REAPI property (exec_properties spelling)
    os                            OSFamily      (Bazel, RBE, BuildGrid: always matched)
    arch                          ISA           (BuildGrid: always matched)
    cpu_isa                       cpu-isa       (the instruction set inductor targets)
    gpu_name                      gpu           (the GPU pool: "NVIDIA H200")
    compute_capability            compute-capability
    cuda, tensorrt                cuda, tensorrt
    torch_tensorrt_flavour        tensorrt-flavour
    device = "cuda"               device = "cuda": a GPU-less driver sends such an action
                                  to a worker that advertises a GPU (kiln workers with
                                  one advertise device = "cuda")

A property kiln writes "-" (absent) asks for nothing. The rest of kiln's
platform (Python, distribution versions, the code digest of the action's
module) does not route: the kiln worker checks it before it runs anything.
--remote_default_exec_properties adds properties to every action (Bazel's flag
of that name), e.g. a pool name.
"""

from __future__ import annotations

from collections.abc import Iterable

from kiln.action_graph import Action
from kiln.exec.platform_match import MachineOffer

NAMES = {
    "os": "OSFamily",
    "arch": "ISA",
    "cpu_isa": "cpu-isa",
    "gpu_name": "gpu",
    "compute_capability": "compute-capability",
    "cuda": "cuda",
    "tensorrt": "tensorrt",
    "torch_tensorrt_flavour": "tensorrt-flavour",
}
_OS = {"linux": "Linux", "windows": "Windows", "darwin": "Darwin"}


def platform_properties(
    action: Action, defaults: Iterable[tuple[str, str]] = ()
) -> tuple[tuple[str, str], ...]:
    """The action's REAPI platform properties, sorted by name then value (REAPI's order)."""
    found: dict[str, str] = dict(defaults)
    for name, value in action.platform:
        if name == "device" and value == "cuda":
            found["device"] = "cuda"
        elif name in NAMES and value not in ("", "-"):
            found[NAMES[name]] = _OS.get(value, value) if name == "os" else value
    return tuple(sorted(found.items()))


def offer_properties(offer: MachineOffer) -> tuple[tuple[str, str], ...]:
    """What a kiln worker on this machine advertises: the same names, its own values."""
    found: dict[str, str] = {}
    for name, reapi_name in NAMES.items():
        value = offer.value(name)
        if value not in (None, "", "-"):
            found[reapi_name] = _OS.get(value, value) if name == "os" else value
    if offer.gpus:
        found["device"] = "cuda"
    return tuple(sorted(found.items()))


def parse_property(text: str) -> tuple[str, str]:
    """`KEY=VALUE` -> (key, value); ValueError if malformed."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise ValueError(f"not a property (KEY=VALUE): {text!r}")
    return key.strip(), value
