"""`pytest -n 2` (pytest-xdist, as tools/test runs it): the suite in two processes.

Work goes out a unit at a time, and a unit is a test module, so a module-scoped
fixture (one model build for the module) is made once. Modules that share
session fixtures are one unit, so that no session build is made in both
processes: tests/e2e/bazel/ (the twins: a kiln and a Bazel build of the
repository, nginx) with test_models_from_libraries.py (examples/libraries, built
once for both tools), and tests/e2e/test_cc_loader.py with test_python_loader.py
(the repository's example packages, the compiled C++ apps, retrained weights).
Units go out in collection order, tests/e2e first: the longest units start
first, and the many short ones of tests/unit keep both processes busy to the end.
"""

from __future__ import annotations

from typing import Any

import pytest

# nodeid prefix -> the unit every test under it belongs to
UNITS = {
    "tests/e2e/bazel/": "tests/e2e/bazel/",
    "tests/e2e/test_models_from_libraries.py": "tests/e2e/bazel/",  # library_examples
    "tests/e2e/test_cc_loader.py": "repo examples",
    "tests/e2e/test_python_loader.py": "repo examples",
}


def unit_of(nodeid: str) -> str:
    for prefix, unit in UNITS.items():
        if nodeid.startswith(prefix):
            return unit
    return nodeid.split("::", 1)[0]


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    from xdist.scheduler import LoadScopeScheduling

    class ByUnit(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return unit_of(nodeid)

    config.option.loadscopereorder = False  # collection order: the long e2e units first
    return ByUnit(config, log)
