"""An action's key, computed the way the Remote Execution API builds an Action digest.

    Command    = {arguments, environment_variables, output_paths, platform}
    input root = every input (path, digest, executable bit), sorted
    Action     = {command_digest, input_root_digest, platform}
    key        = digest(canonical JSON of Action)

so the two can map one to one. Canonical JSON: sorted keys, no whitespace,
UTF-8.
"""

from __future__ import annotations

import json
from collections.abc import Set
from dataclasses import dataclass
from typing import Any

from kiln.action_graph import Action
from kiln.cache.digest import Digest, digest_bytes


def canonical_json(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


@dataclass(frozen=True)
class ActionKey:
    """An action's key and the parts it was made from (kept for --explain)."""

    key: str
    command_digest: str
    input_root_digest: str
    # The command without its platform (which the key holds on its own): what --explain
    # calls "command changed", so a new package pin is not reported as a new command too.
    invocation_digest: str
    inputs: dict[str, str]  # path -> digest hash (+ " x" if executable), for --explain
    platform: tuple[tuple[str, str], ...]


def compute_key(
    action: Action,
    input_digests: dict[str, Digest],
    function: str,
    executable: Set[str] = frozenset(),
) -> ActionKey:
    """The action's key, given the digest of every input file and which of them are
    executable (REAPI's FileNode.is_executable: `chmod +x` of an input changes the key).

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
    invocation = {name: value for name, value in command.items() if name != "platform"}
    invocation_digest = digest_bytes(canonical_json(invocation), function)
    files = [
        {"path": path, "digest": str(input_digests[path]), "is_executable": path in executable}
        for path in sorted(input_digests)
    ]
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
        invocation_digest=invocation_digest.hash,
        inputs={
            path: digest.hash + (" x" if path in executable else "")
            for path, digest in input_digests.items()
        },
        platform=action.platform,
    )
