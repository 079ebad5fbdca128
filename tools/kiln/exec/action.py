"""Actions: the unit of caching and of (later, remote) execution.

An action is argv + environment + declared input files + declared outputs +
platform properties + resource needs, and nothing else may influence its
result. Its key is computed the way the Remote Execution API builds an
Action digest, so the two can map one to one:

    Command    = {arguments, environment_variables, output_paths, platform}
    input root = every input (path, digest, executable bit), sorted
    Action     = {command_digest, input_root_digest, platform}
    key        = digest(canonical JSON of Action)

Canonical JSON: sorted keys, no whitespace, UTF-8. Descriptions, progress
messages and the timeout are not part of the key, so rewording one or
raising `--action_timeout` never rebuilds anything.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from kiln.cache.digest import Digest, digest_bytes

GENERATED_ROOT = "kiln-out"


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

    @property
    def short_path(self) -> str:
        """The path without kiln-out/, as `$(location)` prints it in messages."""
        return self.path if self.is_source else self.path[len(GENERATED_ROOT) + 1 :]


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
    supports_workers: bool = False  # argv is [python, -m, module, ...]
    timeout: float | None = None
    # For a file-write action: the content, written without running anything.
    content: bytes | None = None
    is_executable: bool = False
    progress_message: str = field(default="", compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "inputs", tuple(sorted(set(self.inputs))))
        object.__setattr__(self, "outputs", tuple(sorted(set(self.outputs))))
        object.__setattr__(self, "env", tuple(sorted(dict(self.env).items())))
        object.__setattr__(self, "platform", tuple(sorted(dict(self.platform).items())))

    @property
    def primary_output(self) -> File:
        return self.outputs[0]

    def describe(self) -> str:
        return self.progress_message or f"{self.mnemonic} {self.owner}"


def canonical_json(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


@dataclass(frozen=True)
class ActionKey:
    """An action's key and the parts it was made from (kept for --explain)."""

    key: str
    command_digest: str
    input_root_digest: str
    inputs: dict[str, str]  # path -> digest hash, for explaining what changed
    platform: tuple[tuple[str, str], ...]


def compute_key(action: Action, input_digests: dict[str, Digest], function: str) -> ActionKey:
    """The action's key, given the digest of every input file.

    `input_digests` names concrete files: a directory input contributes each
    file under it.
    """
    if action.content is not None:
        command: dict[str, Any] = {
            "write": digest_bytes(action.content, function).hash,
            "executable": action.is_executable,
            "output_paths": [f.path for f in action.outputs],
        }
    else:
        command = {
            "arguments": list(action.argv),
            "environment_variables": [{"name": k, "value": v} for k, v in action.env],
            "output_paths": [f.path for f in action.outputs if not f.directory],
            "output_directories": [f.path for f in action.outputs if f.directory],
            "platform": {"properties": [{"name": k, "value": v} for k, v in action.platform]},
        }
    command_digest = digest_bytes(canonical_json(command), function)
    files = [{"path": path, "digest": str(input_digests[path])} for path in sorted(input_digests)]
    input_root_digest = digest_bytes(canonical_json({"files": files}), function)
    encoded = {
        "command_digest": str(command_digest),
        "input_root_digest": str(input_root_digest),
        "platform": {"properties": [{"name": k, "value": v} for k, v in action.platform]},
        "digest_function": function,
    }
    return ActionKey(
        key=digest_bytes(canonical_json(encoded), function).hash,
        command_digest=command_digest.hash,
        input_root_digest=input_root_digest.hash,
        inputs={path: digest.hash for path, digest in input_digests.items()},
        platform=action.platform,
    )
