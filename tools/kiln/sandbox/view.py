"""What a sandboxed action sees: typed records, and how they are worked out.

    SandboxConfig  what every sandbox of a build shows: the toolchain (read-only,
                   at the same paths as on the host), binds made in /tmp (the
                   torch state of aoti_package.py), the scratch directories that
                   get an empty tmpfs for each action (the workspace, the
                   execroots: an action's binds go there), and the host directory
                   the new root is built on
    Bind           one host path shown at a path of the sandbox, read-only or not
    action_binds   an action's own part: its execroot (writable) and each declared
                   input read-only (a source at the workspace path its execroot
                   symlink names, a generated input onto itself)

Everything else of the host is absent: the workspace but for the declared
sources, the home directory, the output base but for this execroot, other
users' files. /tmp is empty and private, /dev and /proc are the host's, /sys
is read-only. The records cross to the sandbox processes as JSON.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# What every action may run: the system's programs, libraries and configuration.
SYSTEM_DIRS = ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/usr", "/etc", "/opt")


@dataclass(frozen=True)
class Bind:
    source: str  # a host path
    target: str  # where the sandbox shows it
    writable: bool = False

    def to_json(self) -> list[Any]:
        return [self.source, self.target, self.writable]

    @staticmethod
    def from_json(value: Sequence[Any]) -> Bind:
        source, target, writable = value
        return Bind(str(source), str(target), bool(writable))


@dataclass(frozen=True)
class SandboxConfig:
    toolchain: tuple[str, ...]  # host paths, shown read-only where they are
    binds: tuple[Bind, ...]  # made in each action's /tmp, before its own
    staging: str  # an empty host directory: the new root is mounted on it
    # Directories an empty tmpfs covers for each action: its binds' mount points go there,
    # and go with it (the workspace root, the output base's execroot directory).
    scratch: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "toolchain": list(self.toolchain),
            "binds": [b.to_json() for b in self.binds],
            "staging": self.staging,
            "scratch": list(self.scratch),
        }

    @staticmethod
    def from_json(value: dict[str, Any]) -> SandboxConfig:
        return SandboxConfig(
            tuple(str(p) for p in value["toolchain"]),
            tuple(Bind.from_json(b) for b in value["binds"]),
            str(value["staging"]),
            tuple(str(p) for p in value["scratch"]),
        )


def action_binds(execroot: Path, inputs: Iterable[str]) -> list[Bind]:
    """The execroot, writable, and every input read-only (writing through one fails with
    EROFS, naming the file): a source (a symlink in the execroot) at the workspace path
    it names, so only declared sources exist there; a generated input onto itself."""
    root = str(execroot)
    binds = [Bind(root, root, writable=True)]
    for path in inputs:
        full = os.path.join(root, path)
        try:
            target = os.readlink(full)
        except OSError:
            binds.append(Bind(full, full))  # a hard link of its blob
            continue
        binds.append(Bind(target, target))
    return binds


def toolchain_dirs(hidden: Iterable[Path]) -> tuple[str, ...]:
    """The system directories and this interpreter's (its prefixes, its sys.path: the venv,
    the standard library, kiln itself), minus any that would show one of `hidden` (the
    workspace, the output base): those stay hidden but for what an action declares."""
    import kiln

    python = [sys.prefix, sys.base_prefix, sys.exec_prefix, *sys.path[1:]]
    python += [
        os.path.realpath(p) for p in (*kiln.__path__, os.path.join(kiln.__path__[0], "rules"))
    ]
    python += [os.path.dirname(os.path.realpath(sys.executable))]
    found: list[str] = []
    for path in [*SYSTEM_DIRS, *python]:
        for candidate in dict.fromkeys((os.path.abspath(path), os.path.realpath(path))):
            if os.path.lexists(candidate) and candidate not in found:
                found.append(candidate)
    secret = [os.path.realpath(p) for p in hidden]
    kept = [p for p in found if not any(_within(s, p) for s in secret)]
    # A directory inside another one already shown adds nothing.
    return tuple(
        p for p in kept if not any(o != p and _within(p, o) and not os.path.islink(o) for o in kept)
    )


def _within(path: str, directory: str) -> bool:
    return path == directory or path.startswith(directory.rstrip("/") + "/")
