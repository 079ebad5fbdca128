"""kiln clean: remove kiln-out/; --expunge removes the disk cache and kiln's state too."""

from __future__ import annotations

import shutil
from pathlib import Path

import click

from kiln.cli.session import Session, cache_home
from kiln.exec.workspace_lock import workspace_lock
from kiln.loading.workspace import OUTPUT_DIR


@click.command("clean")
@click.option("--expunge", is_flag=True, help="Also delete the disk cache and kiln's state.")
@click.option("--disk_cache", type=click.Path(path_type=Path), default=None)
@click.option("--lock_wait/--nolock_wait", default=True)
@click.pass_obj
def command(session: Session, expunge: bool, disk_cache: Path | None, lock_wait: bool) -> int:
    """Remove build outputs (and with --expunge, the caches)."""
    with workspace_lock(
        session.output_base, wait=lock_wait, on_wait=lambda m: click.echo(f"INFO: {m}", err=True)
    ):
        _remove(session.workspace.root / OUTPUT_DIR)
        for state in ("explain.pickle", "action-state.pickle", "execroot"):
            _remove(session.output_base / state)
        if expunge:
            cache = (disk_cache or cache_home()).expanduser()
            for part in ("cas", "ac", "gc.lock", "blake3"):
                _remove(cache / part)
            for child in session.output_base.iterdir():
                if child.name != "lock":
                    _remove(child)
    click.echo("INFO: removed kiln-out/" + (" and the disk cache" if expunge else ""), err=True)
    return 0


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        # Outputs are read-only hardlinks of cache blobs; their directories are not.
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)
