"""What every command starts from: startup options, the workspace, the output base."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from kiln.errors import KilnError
from kiln.layout import OutputBase
from kiln.loading.workspace import Workspace


@dataclass(frozen=True)
class StartupOptions:
    """Options that come before the command, as with `bazel --nohome_rc build ...`."""

    workspace_rc: bool = True
    home_rc: bool = True
    output_base: Path | None = None

    @staticmethod
    def parse(
        args: list[str], base: StartupOptions | None = None, *, where: str = ""
    ) -> tuple[StartupOptions, list[str]]:
        """The startup options at the front of `args` (over `base`), and the rest."""
        base = base or StartupOptions()
        workspace_rc, home_rc, output_base = base.workspace_rc, base.home_rc, base.output_base
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
                    f"unknown startup option '{arg}'" + (f" ({where})" if where else ""),
                    hint="startup options: --noworkspace_rc --nohome_rc --output_base=DIR; "
                    "command options go after the command",
                )
            i += 1
        return StartupOptions(workspace_rc, home_rc, output_base), args[i:]


@dataclass(frozen=True)
class Session:
    cwd: Path
    workspace: Workspace
    working_package: str  # the cwd relative to the root, as Bazel's working directory offset
    output_base: OutputBase  # kiln's private state for this workspace (caches, lock, ...)

    @staticmethod
    def create(cwd: Path, startup: StartupOptions) -> Session:
        workspace = Workspace.find(cwd)
        if startup.output_base is not None:
            output_base = OutputBase(startup.output_base)
        else:
            output_base = OutputBase.for_workspace(workspace.root)
        return Session(cwd, workspace, workspace.package_of(cwd), output_base)

    @property
    def graph_cache_file(self) -> Path:
        return self.output_base.graph_cache
