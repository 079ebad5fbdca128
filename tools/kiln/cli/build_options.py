"""The options of `kiln build`, parsed (their table: flags.py), and what reads them."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar, Unpack

from kiln.cli.flags import SliceRules, flags_of, slice_options
from kiln.errors import KilnError

if TYPE_CHECKING:
    from kiln.exec.placement import Placement
    from kiln.remote.options import RemoteOptions

Record = TypeVar("Record")

_SIZE_UNITS = {"": 1, "k": 2**10, "m": 2**20, "g": 2**30, "t": 2**40}


def parse_size(text: str) -> int:
    """'10G', '512M', '1000' -> bytes."""
    raw = text.strip().lower().removesuffix("b").removesuffix("i")
    unit = raw[-1] if raw and raw[-1] in _SIZE_UNITS else ""
    number = raw[:-1] if unit else raw
    try:
        return int(float(number) * _SIZE_UNITS[unit])
    except ValueError:
        raise KilnError(f"invalid size '{text}'", hint="write e.g. 10G, 512M or 1000000") from None


def remote_options(options: BuildOptions) -> RemoteOptions:
    """What the remote backends read of the flags: a slice of the flag table, with the
    minimum rate as bytes per second."""
    from kiln.remote.options import RemoteOptions

    return options.slice(
        RemoteOptions, given={"remote_min_rate": parse_size(options.remote_min_rate)}
    )


@dataclass(frozen=True)
class BuildOptions:
    """The flags of `kiln build`, parsed: one field per `build` row of the flag table
    (cli/flags.py), which alone holds their defaults, checks and help."""

    jobs: int | None
    gpus: int | None
    local_ram_mb: int | None
    keep_going: bool
    strategy: tuple[str, ...]  # worker|local|remote|dynamic, or Mnemonic=...
    spawn_strategy: str | None
    sandbox: bool
    worker_max_instances: int
    action_timeout: float | None
    action_env: tuple[str, ...]
    pip_find_links: tuple[Path, ...]
    disk_cache: Path | None
    disk_cache_max_size: str | None
    digest_function: str
    remote_cache: str | None
    remote_upload_local_results: bool
    remote_accept_cached: bool
    remote_header: tuple[str, ...]
    remote_timeout: float
    remote_min_rate: str
    remote_instance_name: str
    tls_certificate: str
    tls_client_certificate: str
    tls_client_key: str
    remote_executor: str | None
    remote_default_exec_properties: tuple[str, ...]
    remote_local_fallback: bool
    remote_retries: int
    explain: bool
    build_event_json_file: Path | None
    profile: Path | None
    report: Path | None
    verbose_failures: bool
    lock_wait: bool

    @classmethod
    def defaults(cls, **changes: Any) -> BuildOptions:
        """Every flag at the table's default, but `changes`: `kiln build` without flags."""
        return cls(**{**{flag.name: flag.default for flag in flags_of("build")}, **changes})

    def slice(self, record: type[Record], **rules: Unpack[SliceRules]) -> Record:
        """The record one consumer reads (ExecOptions, Limits, the remote options), its
        fields filled from the same-named flags: flags.slice_options."""
        return slice_options(record, self, **rules)

    @property
    def local_strategy(self) -> str:
        """worker or local: how Python actions run here (the last bare --strategy)."""
        bare = [s for s in self.strategy if "=" not in s and s in ("worker", "local")]
        return bare[-1] if bare else "worker"

    def strategies(self) -> tuple[Placement | None, dict[str, Placement]]:
        """(--spawn_strategy, or a bare remote/dynamic --strategy; per-mnemonic ones)."""
        from kiln.exec.placement import STRATEGIES

        default: str | None = self.spawn_strategy
        by_mnemonic: dict[str, str] = {}
        for item in self.strategy:
            mnemonic, sep, value = item.rpartition("=")
            if value not in STRATEGIES or (sep and not mnemonic.isidentifier()):
                raise KilnError(
                    f"invalid --strategy '{item}'",
                    hint="write --strategy=worker|local|remote|dynamic, or "
                    "--strategy=Mnemonic=worker|local|remote|dynamic (e.g. TorchExport=remote)",
                )
            if sep:
                by_mnemonic[mnemonic] = value
            elif value in ("remote", "dynamic"):
                default = value
        wants_remote = default in ("remote", "dynamic") or any(
            v in ("remote", "dynamic") for v in by_mnemonic.values()
        )
        if wants_remote and not self.remote_executor:
            raise KilnError(
                "a remote or dynamic strategy needs --remote_executor",
                hint="pass --remote_executor=ray://HOST:PORT (and --remote_cache=URL), or "
                "drop the remote strategy",
            )
        return default, by_mnemonic  # type: ignore[return-value]  # checked against STRATEGIES


# Variables that change what Python imports or runs from outside the action's inputs and
# environment: a file found through them could change without any key changing.
UNTRACKED_PYTHON_ENV = ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "PYTHONUSERBASE")


def parse_action_env(items: tuple[str, ...]) -> dict[str, str]:
    """--action_env values as Bazel reads them: NAME=VALUE, or NAME from the client env."""
    env: dict[str, str] = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not name or not name.replace("_", "").isalnum():
            raise KilnError(f"invalid --action_env '{item}'", hint="write NAME=VALUE or NAME")
        if name in UNTRACKED_PYTHON_ENV:
            raise KilnError(
                f"--action_env={name} is refused: actions would import code kiln does not "
                "track, and their keys would not change when it does",
                hint="declare the Python files a model imports in its target's deps (they "
                "become inputs), and third-party packages in the workspace's "
                'python_requirements lock, as deps = ["@pip//<name>"]',
            )
        if not sep:
            if name not in os.environ:
                continue  # as Bazel: an unset variable is left out
            value = os.environ[name]
        env[name] = value
    return env
