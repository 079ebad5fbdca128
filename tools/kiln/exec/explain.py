"""Why an action ran: its key's parts compared with its last run in this workspace.

ninja's `-d explain` and Bazel's `--explain` answer the same question. The
log keeps, per action (identified by owner, mnemonic and first output), the
parts of its last key; on a cache miss the differences are the reason.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from kiln import state_file
from kiln.action_graph import PIP_PROPERTY, Action
from kiln.exec.action_key import ActionKey

FORMAT = 2  # 2: keys hold invocation_digest


def identity(action: Action) -> str:
    return f"{action.owner} {action.mnemonic} {action.primary_output.path}"


class ExplainLog:
    def __init__(self, path: Path):
        self.path = path
        self.entries: dict[str, ActionKey] = {}
        self._lock = threading.Lock()
        self._dirty = False
        data = state_file.read(path, FORMAT, _is_valid, "the explain log")
        if data is not None:
            self.entries = data["entries"]

    def why(self, action: Action, key: ActionKey) -> str:
        """The reason a cache miss ran; call before record()."""
        before = self.entries.get(identity(action))
        if before is None:
            return "new action: never built in this workspace"
        if before.key == key.key:
            return "same key as the last build, but no cache entry (cleaned or evicted)"
        reasons: list[str] = []
        if before.platform != key.platform:
            old, new = dict(before.platform), dict(key.platform)
            changed = sorted(k for k in old.keys() | new.keys() if old.get(k) != new.get(k))
            tools = [k for k in changed if not k.startswith(PIP_PROPERTY)]
            if tools:
                reasons.append(
                    "toolchain changed: "
                    + ", ".join(f"{k} {old.get(k, '-')} -> {new.get(k, '-')}" for k in tools)
                )
            packages = [k for k in changed if k.startswith(PIP_PROPERTY)]
            if packages:
                reasons.append(
                    "python package changed: "
                    + ", ".join(_package_change(k, old.get(k), new.get(k)) for k in packages)
                )
        if before.invocation_digest != key.invocation_digest:
            reasons.append("command changed (arguments, environment or outputs)")
        changed_inputs = sorted(
            p for p in key.inputs.keys() & before.inputs.keys() if key.inputs[p] != before.inputs[p]
        )
        added = sorted(key.inputs.keys() - before.inputs.keys())
        removed = sorted(before.inputs.keys() - key.inputs.keys())
        for label, paths in (("changed", changed_inputs), ("added", added), ("removed", removed)):
            if paths:
                shown = ", ".join(paths[:3]) + (
                    f" and {len(paths) - 3} more" if len(paths) > 3 else ""
                )
                reasons.append(f"input {label}: {shown}")
        return "; ".join(reasons) or "key changed"

    def record(self, action: Action, key: ActionKey) -> None:
        with self._lock:
            self.entries[identity(action)] = key
            self._dirty = True

    def save(self) -> None:
        if self._dirty:
            state_file.write(self.path, FORMAT, entries=self.entries)
            self._dirty = False


def _is_valid(data: dict[str, Any]) -> bool:
    entries = data["entries"]
    return isinstance(entries, dict) and all(
        isinstance(name, str)
        and isinstance(key, ActionKey)
        and isinstance(key.inputs, dict)
        and isinstance(key.platform, tuple)
        for name, key in entries.items()
    )


def _package_change(key: str, old: str | None, new: str | None) -> str:
    """`pip:timm` = "1.0.31 sha256:..." twice -> "timm 1.0.31 -> 1.0.32"."""
    name = key[len(PIP_PROPERTY) :]
    if old is None or new is None:
        version = (old or new or "").split(" ", 1)[0]
        return f"{name} {version} {'added' if old is None else 'removed'}"
    (old_version, _, old_hashes), (new_version, _, new_hashes) = (
        old.partition(" "),
        new.partition(" "),
    )
    if old_version != new_version:
        return f"{name} {old_version} -> {new_version}"
    return f"{name} {new_version} (another wheel: {old_hashes[:19]}... -> {new_hashes[:19]}...)"
