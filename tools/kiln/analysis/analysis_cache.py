"""The analysis cache: the action graph of the last build, reused while nothing it
depends on changed.

Analysis imports pydantic and the rules and calls every rule; on a no-op
build of a large workspace that is most of the time spent. What analysis
depends on, and so what the cache is keyed on:

- the target graph: the packages' stamps and every label in the closure;
- the requested labels;
- kiln's code that analysis runs: the analyzer and the rules, with every kiln
  module they import and the templates they render (kiln.code_digest finds
  them; checked by stat);
- the host's facts (HostFacts: OS, Python, installed distributions) and the
  interpreter that runs the actions (it is in their argv);
- the value of every toolchain a rule read (ctx.toolchain): each is resolved
  again and compared, so a new GPU or TensorRT means a fresh analysis, and a
  build that read none pays nothing. Resolved through the build's resolver: a
  GPU toolchain that came from the cluster is asked of the cluster again.

Only what execution needs is kept: the actions, and the files of each
requested target. Unpickling it needs neither pydantic nor the rules.
"""

from __future__ import annotations

import hashlib
import itertools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kiln import state_file
from kiln.action_graph import Action, File
from kiln.code_digest import CodeStamp
from kiln.host_facts import HostFacts, Toolchain, ToolchainResolver
from kiln.loading.graph import TargetGraph
from kiln.loading.loader import PackageLoader

FORMAT = 4  # 4: the stamp covers the actions' code
# The code analysis runs: the engine that calls the rules, and the whole catalogue.
ANALYSIS_CODE = ("kiln.analysis.analyzer", "kiln.rules.*", "kiln.rules.testing.*")


@dataclass(frozen=True)
class CachedAnalysis:
    requested: dict[str, tuple[File, ...]]  # label -> the files `kiln build` delivers
    actions: list[Action]
    # label -> the output directory of its test action, for every test target analyzed
    # (requested, or in a requested test_suite): `kiln test` runs those actions, `kiln
    # build` leaves them out.
    tests: dict[str, File] = field(default_factory=dict)

    def without_tests(self) -> list[Action]:
        """The actions but the tests' own: what `kiln build` runs."""
        results = {file.path for file in self.tests.values()}
        return [a for a in self.actions if a.primary_output.path not in results]

    @property
    def producer(self) -> dict[str, Action]:
        return {f.path: a for a in self.actions for f in a.outputs}


def fingerprint(
    loader: PackageLoader, graph: TargetGraph, labels: list[str], host: HostFacts
) -> str:
    digest = hashlib.sha256(f"{FORMAT}\0{host.interpreter}\0{host.digest()}\0".encode())
    digest.update("\0".join(labels).encode() + b"\1")
    for name in sorted(loader.packages):
        # every field of every stamp, whatever FileStamp holds
        digest.update(f"{name}\0{loader.packages[name].stamps!r}\0".encode())
    digest.update("\0".join(sorted(graph.targets)).encode() + b"\1")
    return digest.hexdigest()


class AnalysisCache:
    def __init__(self, path: Path):
        self.path = path

    def load(
        self,
        loader: PackageLoader,
        graph: TargetGraph,
        labels: list[str],
        resolver: ToolchainResolver,
    ) -> CachedAnalysis | None:
        host = resolver.host
        data = state_file.read(self.path, FORMAT, _is_valid, "the analysis cache")
        if data is None or data["fingerprint"] != fingerprint(loader, graph, labels, host):
            return None
        code: CodeStamp = data["code"]
        if not code.is_current():
            return None
        toolchains: list[tuple[Toolchain[Any], Any]] = data["toolchains"]
        if any(resolver.resolve(toolchain) != value for toolchain, value in toolchains):
            return None
        cached: CachedAnalysis = data["analysis"]
        return cached

    def store(
        self,
        loader: PackageLoader,
        graph: TargetGraph,
        labels: list[str],
        host: HostFacts,
        toolchains: list[tuple[Toolchain[Any], Any]],
        analysis: CachedAnalysis,
    ) -> None:
        state_file.write(
            self.path,
            FORMAT,
            fingerprint=fingerprint(loader, graph, labels, host),
            code=CodeStamp.of((*ANALYSIS_CODE, *action_modules(analysis.actions))),
            toolchains=toolchains,
            analysis=analysis,
        )


def action_modules(actions: list[Action]) -> list[str]:
    """The kiln modules the actions run (`python -m kiln.actions.<name>`): analysis put
    their code's digest in each one's key (rule_api/context.py, "kiln_actions"), so the
    cached analysis is stale when they change. Without them in the stamp an edited action
    module was served its old code's results, through the old keys."""
    found = set()
    for action in actions:
        for flag, module in itertools.pairwise(action.argv):
            if flag == "-m" and module.startswith("kiln."):
                found.add(module)
    return sorted(found)


def _is_valid(data: dict[str, Any]) -> bool:
    analysis = data["analysis"]
    return (
        isinstance(data["fingerprint"], str)
        and isinstance(data["code"], CodeStamp)
        and isinstance(data["toolchains"], list)
        and all(isinstance(t, tuple) and len(t) == 2 for t in data["toolchains"])
        and isinstance(analysis, CachedAnalysis)
        and isinstance(analysis.requested, dict)
        and all(state_file.all_of(files, File) for files in analysis.requested.values())
        and state_file.all_of(analysis.actions, Action)
    )
