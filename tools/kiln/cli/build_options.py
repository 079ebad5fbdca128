"""The options of `kiln build`, as Bazel spells them; rc files can set every one."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from kiln.errors import KilnError

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


@dataclass(frozen=True)
class BuildOptions:
    jobs: int | None
    gpus: int | None
    local_ram_mb: int | None
    keep_going: bool
    strategy: str
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
            type=click.Choice(["worker", "local"]),
            default="worker",
            show_default=True,
            help="Run Python actions in persistent workers or as plain processes",
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
    ]
    for option in reversed(options):
        function = option(function)
    return function
