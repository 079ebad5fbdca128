"""kiln clean: remove kiln-out/; --expunge removes the disk cache and kiln's state too."""

from __future__ import annotations

import shutil
from pathlib import Path

import click

from kiln.cli.session import Session
from kiln.errors import KilnError
from kiln.exec.workspace_lock import workspace_lock
from kiln.layout import DiskCache, cache_home, output_root


@click.command("clean")
@click.option("--expunge", is_flag=True, help="Also delete the disk cache and kiln's state.")
@click.option(
    "--disk_cache",
    type=click.Path(path_type=Path),
    default=None,
    help="The disk cache --expunge deletes [default: ~/.cache/kiln]",
)
@click.option(
    "--lock_wait/--nolock_wait",
    default=True,
    help="Wait for another command holding the workspace lock",
)
@click.pass_obj
def command(session: Session, expunge: bool, disk_cache: Path | None, lock_wait: bool) -> int:
    """Remove build outputs (and with --expunge, the caches)."""
    with workspace_lock(
        session.output_base, wait=lock_wait, on_wait=lambda m: click.echo(f"INFO: {m}", err=True)
    ):
        _remove(output_root(session.workspace.root))
        for state in session.output_base.build_state():
            _remove(state)
        if expunge:
            from kiln.cache.digest import DIGEST_FUNCTIONS

            cache = DiskCache((disk_cache or cache_home()).expanduser())
            if cache.root.exists() and not cache.root.is_dir():
                raise KilnError(
                    f"the disk cache {cache.root} is a file, not a directory",
                    hint="pass the cache directory with --disk_cache=DIR, or remove that file",
                )
            for part in cache.expunged(DIGEST_FUNCTIONS):
                _remove(part)
            for child in session.output_base.root.iterdir():
                if child != session.output_base.lock:
                    _remove(child)
    click.echo("INFO: removed kiln-out/" + (" and the disk cache" if expunge else ""), err=True)
    return 0


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        # Outputs are read-only hardlinks of cache blobs; their directories are not.
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)
