"""kiln query EXPRESSION: Bazel's query language over the target graph."""

from __future__ import annotations

import click

from kiln.cli import flags
from kiln.cli.session import Session
from kiln.loading.graph import split
from kiln.loading.loader import PackageLoader
from kiln.query import output, parser
from kiln.query.engine import QueryEngine


@click.command("query", cls=flags.FlagCommand)
@click.argument("expression")
@flags.options("query")
@click.pass_obj
def command(session: Session, expression: str, fmt: str, verbose_failures: bool) -> int:
    """Evaluate a query EXPRESSION such as 'deps(//models:resnet_pt2)'."""
    del verbose_failures  # read by main() for error formatting
    expr = parser.parse(expression)
    loader = PackageLoader(session.workspace, session.graph_cache_file)
    try:
        engine = QueryEngine(loader, session.working_package)
        result = engine.evaluate(expr)
    finally:
        loader.save()
    labels = sorted(result, key=split)  # by package, then name, as Bazel orders labels
    text = output.render(fmt, labels, engine.target, loader.location_of)
    click.echo(text, nl=False)
    if not labels:
        click.echo("INFO: empty results", err=True)
    return 0
