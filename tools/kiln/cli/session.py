"""What every command starts from: startup options, the workspace, the output base."""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

from kiln.errors import KilnError
from kiln.loading.workspace import Workspace


@dataclass(frozen=True)
class StartupOptions:
    """Options that come before the command, as with `bazel --nohome_rc build ...`."""

    workspace_rc: bool = True
    home_rc: bool = True
    output_base: Path | None = None

    @staticmethod
    def parse(args: list[str]) -> tuple[StartupOptions, list[str]]:
        workspace_rc, home_rc, output_base = True, True, None
        i = 0
        while i < len(args) and args[i].startswith("--"):
            arg = args[i]
            if arg == "--noworkspace_rc":
                workspace_rc = False
            elif arg == "--workspace_rc":
                workspace_rc = True
            elif arg == "--nohome_rc":
                home_rc = False
            elif arg == "--home_rc":
                home_rc = True
            elif arg.startswith("--output_base="):
                output_base = Path(arg.split("=", 1)[1]).expanduser().resolve()
            elif arg in ("--help", "--version"):
                break
            else:
                raise KilnError(
                    f"unknown startup option '{arg}'",
                    hint="startup options: --noworkspace_rc --nohome_rc --output_base=DIR; "
                    "command options go after the command",
                )
            i += 1
        return StartupOptions(workspace_rc, home_rc, output_base), args[i:]


def cache_home() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "kiln"


@dataclass(frozen=True)
class Session:
    cwd: Path
    workspace: Workspace
    working_package: str  # the cwd relative to the root, as Bazel's working directory offset
    output_base: Path  # kiln's private state for this workspace (graph cache, locks, ...)

    @staticmethod
    def create(cwd: Path, startup: StartupOptions, *, needs_workspace: bool = True) -> Session:
        del needs_workspace
        workspace = Workspace.find(cwd)
        if startup.output_base is not None:
            output_base = startup.output_base
        else:
            key = hashlib.sha256(str(workspace.root).encode()).hexdigest()[:16]
            output_base = cache_home() / "workspaces" / key
        return Session(cwd, workspace, workspace.package_of(cwd), output_base)

    @property
    def graph_cache_file(self) -> Path:
        return self.output_base / "graph-cache.pickle"
