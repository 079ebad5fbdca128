"""Analyzing the requested targets of a build, or taking their actions from the cache."""

from __future__ import annotations

from collections.abc import Callable

from kiln.action_graph import needed_actions
from kiln.analysis.analysis_cache import AnalysisCache, CachedAnalysis
from kiln.errors import KilnError
from kiln.host_facts import ToolchainResolver
from kiln.loading.graph import TargetGraph
from kiln.loading.loader import PackageLoader


def analyze_targets(
    loader: PackageLoader,
    graph: TargetGraph,
    labels: list[str],
    cache: AnalysisCache,
    resolver: ToolchainResolver,
    *,
    keep_going: bool,
    report: Callable[[KilnError], None],
) -> CachedAnalysis:
    """The actions needed for `labels`, from the analysis cache when nothing changed.

    With --keep_going a target whose analysis fails (a bad genrule, a toolchain
    preflight) is reported and left out; the others still build.
    """
    cached = cache.load(loader, graph, labels, resolver)
    if cached is not None:
        return cached

    from kiln.analysis.analyzer import Analyzer
    from kiln.rule_api.testing import TestInfo
    from kiln.rules import load_rule

    analyzer = Analyzer(graph, load_rule, loader.location_of, resolver)
    analyzed: list[str] = []
    failed = False
    for label in labels:
        try:
            analyzer.analyze([label])
        except KilnError as error:
            if not keep_going:
                raise
            report(error)
            failed = True
        else:
            analyzed.append(label)
    action_graph = analyzer.analyze([])
    requested = {label: action_graph.targets[label].files for label in analyzed}
    producer = action_graph.producer
    roots = [producer[f.path] for files in requested.values() for f in files if f.path in producer]
    tests = {
        label: info.results
        for label, target in action_graph.targets.items()
        if (info := target.get(TestInfo)) is not None
    }
    roots += [producer[results.path] for results in tests.values()]
    analysis = CachedAnalysis(
        requested, needed_actions(list(dict.fromkeys(roots)), producer), tests
    )
    if not failed:
        toolchains = list(analyzer.toolchains.read.values())
        cache.store(loader, graph, labels, resolver.host, toolchains, analysis)
    return analysis
