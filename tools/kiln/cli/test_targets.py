"""Which targets `kiln test` runs: the test targets among those matched, with every
test_suite expanded (its `tests`, or every test of its package but manual ones)."""

from __future__ import annotations

from kiln.loading.loader import PackageLoader
from kiln.loading.package import Target

SUITE = "test_suite"


# Test rules whose names do not say so (Bazel's own end in _test).
OTHER_TEST_RULES = ("model_benchmark",)


def is_test_kind(kind: str) -> bool:
    """Bazel's rule: a test rule's name ends in _test; and kiln's benchmarks."""
    return kind.endswith("_test") or kind in OTHER_TEST_RULES


def select_tests(loader: PackageLoader, labels: list[str]) -> list[str]:
    """The test targets `labels` name, directly or through test_suites; sorted, unique.
    A label that names no target is left to loading, which reports it where it is."""
    found: set[str] = set()
    seen: set[str] = set()
    pending = list(labels)
    while pending:
        label = pending.pop()
        if label in seen:
            continue
        seen.add(label)
        target = _target(loader, label)
        if target is None:
            continue
        if is_test_kind(target.kind):
            found.add(label)
        elif target.kind == SUITE:
            pending.extend(target.attrs.get("tests") or _package_tests(loader, label))
    return sorted(found)


def _package_tests(loader: PackageLoader, suite: str) -> list[str]:
    """An empty test_suite's tests: every test of its package not tagged manual."""
    package = suite.split(":", 1)[0].removeprefix("//")
    targets = loader.package(package).targets.values()
    return [
        t.label
        for t in targets
        if is_test_kind(t.kind) and "manual" not in (t.attrs.get("tags") or ())
    ]


def _target(loader: PackageLoader, label: str) -> Target | None:
    package, _, name = label.removeprefix("//").partition(":")
    if not loader.is_package(package):
        return None
    return loader.package(package).targets.get(name)
