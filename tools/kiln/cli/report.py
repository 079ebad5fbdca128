"""kiln report [FILE.html]: the build report of the last `kiln build` or `kiln test` of
this workspace, from the record it kept in the output base; nothing is built again.

The same file as that command's --report=FILE.html would have written.
"""

from __future__ import annotations

from pathlib import Path

import click

from kiln.cli.reports import check_writable
from kiln.cli.session import Session
from kiln.errors import KilnError

DEFAULT = "kiln-report.html"


@click.command("report")
@click.argument("file", required=False, type=click.Path(path_type=Path))
@click.pass_obj
def command(session: Session, /, file: Path | None) -> int:
    """Write the HTML report of the last build or test to FILE (default kiln-report.html)."""
    from kiln.report.html import write
    from kiln.report.record import Invocation

    path = session.cwd / (file if file is not None else Path(DEFAULT))
    check_writable("report", path)
    source = session.output_base.last_invocation
    try:
        text = source.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise KilnError(
            "no build or test of this workspace has been recorded yet",
            hint="run kiln build or kiln test first (or pass --report=FILE.html to it)",
        ) from None
    record = Invocation.from_json(text)
    if record is None:
        raise KilnError(
            f"the record of the last invocation ({source}) is not one this kiln reads",
            hint="run kiln build or kiln test again to record it anew",
        )
    write(record, path)
    click.echo(f"INFO: Build report of kiln {record.command} ({record.started}): {path}", err=True)
    return 0
