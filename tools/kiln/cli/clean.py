"""kiln clean: remove kiln-out/; --expunge: this workspace's state too; the shared disk
cache only with --expunge_disk_cache.

As in Bazel, where `clean --expunge` removes the output base and never touches
--disk_cache: the disk cache is shared by every workspace of the user (and
perhaps by other users), so removing it takes its own flag. It is removed as
cache/gc.py's expunge() does it, safely while other kilns build with it.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import click

from kiln.cli import flags
from kiln.cli.session import Session
from kiln.errors import KilnError
from kiln.exec.workspace_lock import workspace_lock
from kiln.layout import DiskCache, cache_home, output_root


@click.command("clean", cls=flags.FlagCommand)
@flags.options("clean")
@click.pass_obj
def command(
    session: Session,
    expunge: bool,
    expunge_disk_cache: bool,
    disk_cache: Path | None,
    lock_wait: bool,
) -> int:
    """Remove build outputs (--expunge: this workspace's state; --expunge_disk_cache: the
    shared disk cache)."""
    removed = ["kiln-out/"]
    with workspace_lock(
        session.output_base, wait=lock_wait, on_wait=lambda m: click.echo(f"INFO: {m}", err=True)
    ):
        _remove(output_root(session.workspace.root))
        for state in session.output_base.build_state():
            _remove(state)
        if expunge:
            for child in session.output_base.root.iterdir():
                if child != session.output_base.lock:
                    _remove(child)
            removed.append(f"this workspace's state ({session.output_base.root})")
        if expunge_disk_cache:
            from kiln.cache.digest import DIGEST_FUNCTIONS
            from kiln.cache.gc import expunge as expunge_cache

            cache = DiskCache((disk_cache or cache_home()).expanduser())
            if cache.root.exists() and not cache.root.is_dir():
                raise KilnError(
                    f"the disk cache {cache.root} is a file, not a directory",
                    hint="pass the cache directory with --disk_cache=DIR, or remove that file",
                )
            expunge_cache(cache, DIGEST_FUNCTIONS)
            removed.append(f"the disk cache ({cache.root})")
    last = removed.pop()
    click.echo(
        f"INFO: removed {', '.join(removed)} and {last}" if removed else f"INFO: removed {last}",
        err=True,
    )
    return 0


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        # Outputs are read-only hardlinks of cache blobs; their directories are not.
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)
