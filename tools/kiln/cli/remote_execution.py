"""--remote_executor for `kiln build` and `kiln info cluster`: the flags made into parts.

Parses the address and the strategies before anything is loaded (a bad flag
is an error at once), and builds the placement policy, the cluster (which
connects only when first used) and the GPU platform analysis resolves GPU
toolchains on.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from kiln import machine
from kiln.cli.build_options import BuildOptions
from kiln.errors import KilnError
from kiln.exec.placement import PlacementPolicy
from kiln.exec.platform_match import MachineOffer
from kiln.host_facts import HostFacts, ToolchainResolver

if TYPE_CHECKING:
    from kiln.remote_exec.cluster import Cluster


@dataclass(frozen=True)
class RemoteExecution:
    policy: PlacementPolicy
    cluster: Cluster | None


def cluster_of(options: BuildOptions) -> Cluster | None:
    """The Cluster --remote_executor names (not connected yet); None without the flag."""
    if not options.remote_executor:
        return None
    from kiln.remote_exec.address import RayAddress
    from kiln.remote_exec.cluster import Cluster

    try:
        address = RayAddress.parse(options.remote_executor)
    except ValueError as error:
        raise KilnError(
            f"invalid --remote_executor: {error}", hint="write --remote_executor=ray://HOST:PORT"
        ) from None
    return Cluster(address, timeout=options.remote_timeout)


def remote_execution(options: BuildOptions, host: HostFacts, gpus: int) -> RemoteExecution:
    default, by_mnemonic = options.strategies()
    cluster = cluster_of(options)
    if cluster is not None and not options.remote_cache:
        raise KilnError(
            "--remote_executor needs --remote_cache: inputs and outputs travel between "
            "this machine and the workers through it",
            hint="pass --remote_cache=http://HOST:PORT (a Bazel HTTP cache the workers can "
            "reach too; docs/remote-execution.md)",
        )
    here = None
    if cluster is not None:  # nvidia-smi only for builds that may send actions away
        here = MachineOffer(host, machine.nvidia_gpus()[:gpus] if gpus else ())
    policy = PlacementPolicy(
        remote=cluster is not None,
        default=default,
        by_mnemonic=by_mnemonic,
        local_gpus=gpus,
        local_flavour="local" if options.local_strategy == "local" else "worker",
        here=here,
    )
    return RemoteExecution(policy, cluster)


def toolchain_resolver(remote: RemoteExecution, host: HostFacts) -> ToolchainResolver:
    """GPU toolchains from the cluster when GPU actions run there, the rest from here."""
    if remote.cluster is None or not remote.policy.gpu_actions_remote:
        return ToolchainResolver(host)
    from kiln.remote_exec.toolchains import ClusterGpuPlatform

    return ToolchainResolver(host, ClusterGpuPlatform(remote.cluster, host))
