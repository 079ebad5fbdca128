"""kiln worker --reapi grpc://HOST:PORT --property KEY=VALUE ...: serve a REAPI farm's leases.

A Remote Workers API bot (kiln.reapi.bot) that runs kiln's actions as a Ray
node does (kiln.remote_exec.node_runner). It stops on Ctrl-C or SIGTERM,
reporting the leases it finished; its state is under $KILN_WORKER_ROOT.
"""

from __future__ import annotations

import signal
import threading
from types import FrameType

import click

from kiln.cli import flags
from kiln.cli.session import Session
from kiln.errors import KilnError


@click.command("worker", cls=flags.FlagCommand)
@flags.options("worker")
@click.pass_obj
def command(
    session: Session,
    reapi: str | None,
    property: tuple[str, ...],  # the flag's name
    remote_instance_name: str,
    remote_header: tuple[str, ...],
    remote_timeout: float,
) -> int:
    """Run actions for a Remote Execution API server as one of its workers."""
    if not reapi:
        raise KilnError(
            "kiln worker needs --reapi", hint="kiln worker --reapi grpc://HOST:PORT --property K=V"
        )
    from kiln.reapi.bot import Bot, BotOptions, parse_properties
    from kiln.reapi.store import GrpcStore
    from kiln.remote.options import RemoteOptions
    from kiln.remote.stores import open_store

    try:
        from kiln.reapi.properties import offer_properties
        from kiln.remote_exec.facts import this_node

        # This machine's own facts, then what --property adds (or replaces).
        given = dict(parse_properties(property))
        own = [(k, v) for k, v in offer_properties(this_node()) if k not in given]
        properties = tuple(sorted([*own, *given.items()]))
    except ValueError as e:
        raise KilnError(f"invalid --property: {e}", hint="--property gpu=h200") from None
    remote = RemoteOptions(
        remote_cache=reapi,
        remote_instance_name=remote_instance_name,
        remote_header=remote_header,
        remote_timeout=remote_timeout,
    )
    store = open_store(remote)
    if not isinstance(store, GrpcStore):
        raise KilnError(
            f"invalid --reapi '{reapi}': not a grpc:// or grpcs:// address",
            hint="kiln worker --reapi grpc://HOST:PORT",
        )
    bot = Bot(
        BotOptions(reapi, properties, remote_instance_name),
        store,
        remote,
        echo=lambda line: click.echo(line, err=True),
    )

    def stop(_signum: int, _frame: FrameType | None) -> None:
        bot.stop()

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, stop)
    shown = " ".join(f"{k}={v}" for k, v in properties)
    click.echo(f"INFO: kiln worker {bot.name} serving {reapi} ({shown})", err=True)
    import grpc

    try:
        bot.run()
    except grpc.RpcError as e:
        from kiln.reapi.store import describe

        raise KilnError(
            f"kiln worker: cannot start a bot session on {reapi}: {describe(e)}",
            hint="is the server up, with a bots service?",
        ) from None
    except KeyboardInterrupt:
        pass
    return 0
