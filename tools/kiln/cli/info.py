"""kiln info: where things are, and what this machine offers builds."""

from __future__ import annotations

import os
import platform
import sys
from pathlib import Path

import click

from kiln import __version__, cpu_isa
from kiln.cli import flags
from kiln.cli.session import Session
from kiln.exec import host
from kiln.layout import cache_home, output_root


@click.command("info", cls=flags.FlagCommand)
@click.argument("key", required=False)
@flags.options("info")
@click.pass_obj
def command(
    session: Session,
    key: str | None,
    disk_cache: Path | None,
    remote_executor: str | None,
    remote_timeout: float,
    gpus: int | None,
) -> int:
    """Print workspace paths and host facts (one KEY, or all).

    `gpus` is how many GPUs a build may use (with --gpus, as a build with it); each
    `gpu_<index>` line names one GPU nvidia-smi lists and whether builds use it.
    KEY `toolchains` probes what TensorRT builds would use (torch, torch_tensorrt and
    its flavour, TensorRT, CUDA, GPUs) and which trt_engine platforms can build here,
    without building anything. KEY `cluster` lists the nodes of --remote_executor
    (also read from .kilnrc build lines) and what each offers actions.
    """
    if key == "toolchains":
        return _toolchains()
    if key == "cluster":
        return _cluster(remote_executor, remote_timeout)
    facts = {
        "release": f"kiln {__version__}",
        "workspace": str(session.workspace.root),
        "output_base": str(session.output_base.root),
        "output_path": str(output_root(session.workspace.root)),
        "disk_cache": str((disk_cache or cache_home()).expanduser().resolve()),
        "python": f"{platform.python_version()} ({sys.executable})",
        "host": f"{platform.system().lower()} {platform.machine()}",
        # what aoti_package's cpu_target = "native" resolves to here (docs/models.md)
        "cpu_isa": cpu_isa.host_isa() or "-",
        "cpus": str(host.cpu_count()),
        **_gpus(gpus),
        "memory_mb": str(host.memory_mb()),
    }
    if key:
        if key not in facts:
            known = ", ".join([*facts, "toolchains", "cluster"])
            raise click.UsageError(f"unknown info key '{key}' (known: {known})")
        click.echo(facts[key])
        return 0
    for name, value in facts.items():
        click.echo(f"{name}: {value}")
    return 0


def _gpus(slots: int | None) -> dict[str, str]:
    """How many GPUs a build may use, their ids (what each action's CUDA_VISIBLE_DEVICES
    names), and every GPU nvidia-smi lists with whether a build uses it and why not."""
    listed = host.host_gpus()
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    usable = host.usable_gpu_ids(listed, visible)
    ids = host.gpu_pool_ids(usable, len(usable) if slots is None else slots)
    facts = {"gpus": str(len(ids)), "gpu_ids": ",".join(ids) or "-"}
    for gpu in listed:
        if gpu.id in ids:
            use = "used by builds"
        elif gpu.id in usable:
            use = f"not used: --gpus={slots}"
        else:
            use = f"not used: CUDA_VISIBLE_DEVICES={visible}"
        facts[f"gpu_{gpu.index}"] = f"{gpu.name}, {gpu.uuid or 'no UUID'}: {use}"
    return facts


def _toolchains() -> int:
    """The TensorRT toolchain (kiln.rules.tensorrt.trt_toolchain), as the actions would see it."""
    from kiln.host_facts import HostFacts
    from kiln.rules.tensorrt import trt_toolchain

    found = trt_toolchain.TENSORRT.resolve(HostFacts.of_this_machine())
    for name, value in trt_toolchain.describe(found):
        click.echo(f"{name}: {value}")
    for target in trt_toolchain.TARGET_PLATFORMS:
        failed = trt_toolchain.preflight(found, target)
        verdict = "can build" if failed is None else f"cannot build: {'; '.join(failed.problems)}"
        click.echo(f"trt_engine {target}: {verdict}")
    click.echo(f"probe: {found.source}")
    return 0


def _cluster(remote_executor: str | None, timeout: float) -> int:
    from kiln.errors import KilnError

    if not remote_executor:
        raise KilnError(
            "kiln info cluster needs --remote_executor",
            hint="pass --remote_executor=ray://HOST:PORT, or set it on a build line of .kilnrc",
        )
    from kiln.remote.backends import open_executor
    from kiln.remote.executor import ExecutorUnreachable
    from kiln.remote.options import RemoteOptions

    options = RemoteOptions(remote_executor=remote_executor, remote_timeout=timeout)
    executor = open_executor(options, store=None)
    assert executor is not None  # the flag is given
    try:
        executor.describe(click.echo)
    except ExecutorUnreachable as error:
        raise KilnError(error.message, hint="start the cluster, or check the address") from None
    finally:
        executor.close()
    return 0
