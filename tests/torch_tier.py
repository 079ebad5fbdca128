"""The fast tier, `pytest -m "not torch"`, and the guard that keeps it honest.

A test that imports torch into the test process, or builds a model target with
torch (in a child kiln, a worker or Bazel), is marked `torch`: a module's
`pytestmark`, or the test's own mark. Everything else is the fast tier.

The guard: a test NOT marked torch fails if torch was imported into the test
process while it ran (setup, call or teardown), or while its module was
collected. In the fast tier nothing imports torch before it, so the first
unmarked test that does is caught; in the whole suite torch is usually loaded
already and the guard sees only what collection imported. A build in a child
process is beyond its sight: such a test is slow, which `--durations` shows.

So that collecting the fast tier imports no torch either, a module whose
`pytestmark` already deselects it (it names torch, and `-m` names torch) is not
imported at all.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest
from _pytest.mark.expression import Expression

MARK = "torch"  # the marker
MODULE = "torch"  # what it stands for in sys.modules
_TORCH_BEFORE = pytest.StashKey[bool]()  # torch was there before the test (or its module)
_REPORTED = pytest.StashKey[bool]()
_IMPORTED_BY_MODULE = pytest.StashKey[bool]()


def module_marks(path: Path) -> set[str] | None:
    """The mark names of a test module's top-level `pytestmark`, read without importing it;
    None where it has none (or cannot be parsed: then pytest reports the error itself)."""
    try:
        tree = ast.parse(path.read_bytes(), str(path))
    except (OSError, SyntaxError, ValueError):
        return None
    for node in tree.body:
        if isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and t.id == "pytestmark" for t in targets):
                return {
                    n.attr
                    for n in ast.walk(node)
                    if isinstance(n, ast.Attribute)
                    and isinstance(n.value, ast.Attribute)
                    and n.value.attr == "mark"
                }
    return None


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    expression = config.getoption("markexpr")
    if not expression or collection_path.suffix != ".py" or MARK not in expression:
        return None
    if not collection_path.name.startswith("test_"):
        return None
    marks = module_marks(collection_path)
    if marks is None or MARK not in marks:
        return None
    selected = Expression.compile(expression).evaluate(lambda name, **_: name in marks)
    return True if not selected else None


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(collector: pytest.Collector) -> pytest.CollectReport:
    """A module that imports torch when collected imports it for each of its tests."""
    before = MODULE in sys.modules
    report: pytest.CollectReport = yield
    if isinstance(collector, pytest.Module) and not before and MODULE in sys.modules:
        collector.stash[_IMPORTED_BY_MODULE] = True
    return report


def _by_module(item: pytest.Item) -> bool:
    module = item.getparent(pytest.Module)
    return module is not None and module.stash.get(_IMPORTED_BY_MODULE, False)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    item.stash[_TORCH_BEFORE] = MODULE in sys.modules and not _by_module(item)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> pytest.TestReport:
    report: pytest.TestReport = yield
    if call.when == "setup" or item.stash.get(_REPORTED, False):
        return report
    imported = not item.stash.get(_TORCH_BEFORE, True) and MODULE in sys.modules
    if imported and item.get_closest_marker(MARK) is None and not report.failed:
        item.stash[_REPORTED] = True
        report.outcome = "failed"
        when = "when its module was collected" if _by_module(item) else f"in its {call.when}"
        report.longrepr = (
            f"{item.nodeid} imported torch into the test process ({when}) but is not "
            f"marked `{MARK}`: mark it (@pytest.mark.{MARK}, or the module's pytestmark) so "
            f'that `pytest -m "not {MARK}"` stays free of torch'
        )
    return report
