"""The options of `kiln build`, as Bazel spells them; rc files can set every one."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from kiln.errors import KilnError

if TYPE_CHECKING:
    from kiln.exec.placement import Placement
    from kiln.remote.options import RemoteOptions

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
    """What the remote backends read of the flags (until the flag table makes it)."""
    from kiln.remote.options import RemoteOptions

    return RemoteOptions(
        remote_cache=options.remote_cache,
        remote_executor=options.remote_executor,
        remote_header=options.remote_header,
        remote_timeout=options.remote_timeout,
        remote_min_rate=parse_size(options.remote_min_rate),
        remote_instance_name=options.remote_instance_name,
        remote_retries=options.remote_retries,
    )


@dataclass(frozen=True)
class BuildOptions:
    jobs: int | None
    gpus: int | None
    local_ram_mb: int | None
    keep_going: bool
    strategy: tuple[str, ...]  # worker|local|remote|dynamic, or Mnemonic=...
    sandbox: bool
    worker_max_instances: int
    action_timeout: float | None
    disk_cache: Path | None
    disk_cache_max_size: str | None
    digest_function: str
    explain: bool
    build_event_json_file: Path | None
    profile: Path | None
    lock_wait: bool
    verbose_failures: bool
    action_env: tuple[str, ...]
    pip_find_links: tuple[Path, ...] = ()
    remote_cache: str | None = None
    remote_upload_local_results: bool = True
    remote_accept_cached: bool = True
    remote_header: tuple[str, ...] = ()
    remote_timeout: float = 60.0
    remote_min_rate: str = "1M"
    remote_instance_name: str = ""
    remote_executor: str | None = None
    spawn_strategy: str | None = None
    remote_local_fallback: bool = False
    remote_retries: int = 2

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


def build_options(function: Callable[..., Any]) -> Callable[..., Any]:
    """Decorate a click command with every build option."""
    options = [
        click.option(
            "--jobs",
            "-j",
            type=click.IntRange(min=1),
            default=None,
            help="Actions run at once [default: number of cores]",
        ),
        click.option(
            "--gpus",
            type=click.IntRange(min=0),
            default=None,
            help="GPU slots [default: detected from CUDA_VISIBLE_DEVICES or nvidia-smi]",
        ),
        click.option(
            "--local_ram_mb",
            type=click.IntRange(min=0),
            default=None,
            help="Memory budget for actions' memory hints [default: 2/3 of RAM]",
        ),
        click.option(
            "--keep_going/--nokeep_going",
            "-k",
            default=False,
            help="Build as much as possible after a failure",
        ),
        click.option(
            "--strategy",
            multiple=True,
            default=(),
            metavar="[MNEMONIC=]worker|local|remote|dynamic",
            help="worker (default) or local: run Python actions in persistent workers or as "
            "plain processes; remote or dynamic as --spawn_strategy; MNEMONIC=S for one "
            "mnemonic's actions (--strategy=TrtEngine=remote); repeatable",
        ),
        click.option(
            "--spawn_strategy",
            type=click.Choice(["worker", "local", "remote", "dynamic"]),
            default=None,
            help="Where actions run: here (worker, local), on --remote_executor (remote), or "
            "both at once, the first success winning (dynamic) [default: remote only the "
            "actions this host cannot run: a GPU or a toolchain it lacks]",
        ),
        click.option(
            "--sandbox/--nosandbox",
            default=True,
            show_default=True,
            help="Run actions in a sandbox showing only their inputs and the toolchain "
            "(Linux user namespaces; elsewhere they run without one, with a warning)",
        ),
        click.option(
            "--worker_max_instances",
            type=click.IntRange(min=1),
            default=2,
            show_default=True,
            help="Persistent workers at most",
        ),
        click.option(
            "--action_timeout",
            type=click.FloatRange(min=0, min_open=True),
            default=None,
            help="Seconds an action may run before it is killed",
        ),
        click.option(
            "--disk_cache",
            type=click.Path(path_type=Path),
            default=None,
            help="Local cache directory [default: ~/.cache/kiln]",
        ),
        click.option(
            "--disk_cache_max_size",
            default=None,
            help="Collect the disk cache down to this size after the build (e.g. 20G)",
        ),
        click.option(
            "--digest_function",
            type=click.Choice(["sha256", "blake3"]),
            default="sha256",
            show_default=True,
            help="Hash of blobs and keys; each function keeps a disk cache of its own",
        ),
        click.option(
            "--explain/--noexplain",
            default=False,
            help="Print why each executed action was not a cache hit",
        ),
        click.option(
            "--build_event_json_file",
            type=click.Path(path_type=Path),
            default=None,
            help="Write build events, one JSON object per line",
        ),
        click.option(
            "--profile",
            type=click.Path(path_type=Path),
            default=None,
            help="Write a Chrome trace of the build (chrome://tracing, Perfetto)",
        ),
        click.option(
            "--lock_wait/--nolock_wait",
            default=True,
            help="Wait for another command holding the workspace lock",
        ),
        click.option("--verbose_failures", is_flag=True, help="Show more detail on errors"),
        click.option(
            "--action_env",
            multiple=True,
            help="NAME=VALUE (or NAME, taken from kiln's environment) added to every "
            "action's environment, and so to its key; repeatable",
        ),
        click.option(
            "--pip_find_links",
            multiple=True,
            type=click.Path(path_type=Path),
            metavar="DIR",
            help="Make Python environments offline, from the wheels in DIR (pip --no-index "
            "--find-links); repeatable",
        ),
        click.option(
            "--remote_cache",
            default=None,
            metavar="URL",
            help="A Bazel HTTP cache: http(s)://host:port[/prefix] (nginx WebDAV, bazel-remote)",
        ),
        click.option(
            "--remote_upload_local_results/--noremote_upload_local_results",
            default=True,
            show_default=True,
            help="Upload the results of actions run here to the remote cache",
        ),
        click.option(
            "--remote_accept_cached/--noremote_accept_cached",
            default=True,
            show_default=True,
            help="Use results found in the remote cache",
        ),
        click.option(
            "--remote_header",
            multiple=True,
            metavar="NAME=VALUE",
            help="A header sent with every remote cache request (repeatable; e.g. for auth)",
        ),
        click.option(
            "--remote_timeout",
            type=click.FloatRange(min=0, min_open=True),
            default=60.0,
            show_default=True,
            help="Seconds any wait for the remote cache may take (connecting, a response, "
            "the next bytes) before building without it",
        ),
        click.option(
            "--remote_min_rate",
            default="1M",
            show_default=True,
            metavar="SIZE",
            help="Bytes per second a transfer must keep up with, after min(--remote_timeout, "
            "10 s) of grace (e.g. 256K)",
        ),
        click.option(
            "--remote_executor",
            default=None,
            metavar="ray://HOST:PORT",
            help="A Ray cluster to run actions on (Ray Client address of its head; needs "
            "--remote_cache, through which inputs and outputs travel)",
        ),
        click.option(
            "--remote_local_fallback/--noremote_local_fallback",
            default=False,
            show_default=True,
            help="Run an action here when the remote executor cannot be reached (if this "
            "host can run it) instead of failing",
        ),
        click.option(
            "--remote_retries",
            type=click.IntRange(min=0),
            default=2,
            show_default=True,
            help="Times a remote action is run again when its worker or node dies under it",
        ),
        click.option(
            "--remote_instance_name",
            default="",
            help="A path segment before ac/ and cas/ on the remote cache, to keep caches apart",
        ),
    ]
    for option in reversed(options):
        function = option(function)
    return function
