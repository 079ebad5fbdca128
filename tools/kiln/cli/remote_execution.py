"""--remote_executor for `kiln build` and `kiln info cluster`: the flags made into parts.

Parses the addresses and the strategies before anything is loaded (a bad
flag is an error at once), and opens the build's one store client and its
remote executor (neither connects before it is first used), the placement
policy, and the GPU platform analysis resolves GPU toolchains on.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from kiln import machine
from kiln.cli.build_options import BuildOptions, remote_options
from kiln.errors import KilnError
from kiln.exec.placement import PlacementPolicy
from kiln.exec.platform_match import MachineOffer
from kiln.host_facts import HostFacts, ToolchainResolver
from kiln.remote.backends import open_executor
from kiln.remote.stores import open_store

if TYPE_CHECKING:
    from kiln.cache.remote_store import RemoteStore
    from kiln.remote.executor import RemoteExecutor


@dataclass(frozen=True)
class RemoteExecution:
    policy: PlacementPolicy
    store: RemoteStore | None  # --remote_cache: the one client of this build
    executor: RemoteExecutor | None  # --remote_executor


def remote_execution(options: BuildOptions, host: HostFacts, gpus: int) -> RemoteExecution:
    default, by_mnemonic = options.strategies()
    remote = remote_options(options)
    store = open_store(remote)
    executor = open_executor(remote, store)
    if executor is not None and store is None:
        raise KilnError(
            "--remote_executor needs --remote_cache: inputs and outputs travel between "
            "this machine and the workers through it",
            hint="pass --remote_cache=http://HOST:PORT (a Bazel HTTP cache the workers can "
            "reach too; docs/remote-execution.md)",
        )
    here = None
    if executor is not None:  # nvidia-smi only for builds that may send actions away
        here = MachineOffer(host, machine.nvidia_gpus()[:gpus] if gpus else ())
    policy = PlacementPolicy(
        remote=executor is not None,
        default=default,
        by_mnemonic=by_mnemonic,
        local_gpus=gpus,
        local_flavour="local" if options.local_strategy == "local" else "worker",
        here=here,
    )
    return RemoteExecution(policy, store, executor)


def toolchain_resolver(remote: RemoteExecution, host: HostFacts) -> ToolchainResolver:
    """GPU toolchains from the executor when GPU actions run there, the rest from here."""
    if remote.executor is None or not remote.policy.gpu_actions_remote:
        return ToolchainResolver(host)
    return ToolchainResolver(host, remote.executor.gpu_platform(host))
