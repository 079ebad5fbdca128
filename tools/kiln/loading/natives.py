"""The functions BUILD and .bzl files can call, bound to the package being evaluated.

Native functions are created once per process; they dispatch to whichever
PackageBuilder is current, because a .bzl module is evaluated (and frozen)
once and its macros then run inside many packages' evaluations.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import starlark as sl

from kiln.loading.package_builder import PackageBuilder
from kiln.rules import CATALOGUE, load_rule

# The package being built; None while a .bzl file's top level is evaluated.
_current: list[PackageBuilder | None] = []


@contextmanager
def building(builder: PackageBuilder | None) -> Iterator[PackageBuilder | None]:
    _current.append(builder)
    try:
        yield builder
    finally:
        _current.pop()


def _builder(function: str) -> PackageBuilder:
    builder = _current[-1] if _current else None
    if builder is None:
        # A .bzl file calling a rule at its top level, outside any package.
        raise RuntimeError(
            f"{function}() can only be called while a BUILD file is evaluated "
            "(from a macro), not at the top level of a .bzl file"
        )
    return builder


def _rule_function(name: str) -> Callable[..., None]:
    rule = load_rule(name)

    def call(*args: Any, **kwargs: Any) -> None:
        _builder(name).call_rule(rule, args, kwargs)

    return call


def _glob(
    include: Any = None, exclude: Any = None, exclude_directories: int = 1, allow_empty: Any = True
) -> list[str]:
    del exclude_directories  # directories are never matched, as with Bazel's default
    return _builder("glob").glob(include or [], exclude or [], allow_empty)


def _package(**kwargs: Any) -> None:
    _builder("package").set_package(kwargs)


def _exports_files(srcs: Any = None, visibility: Any = None, licenses: Any = None) -> None:
    del licenses
    _builder("exports_files").exports_files(srcs, visibility)


def _package_name() -> str:
    return _builder("package_name").package


def functions() -> dict[str, Callable[..., Any]]:
    """Every native function by name: the rules of the catalogue and the helpers."""
    table: dict[str, Callable[..., Any]] = {name: _rule_function(name) for name in CATALOGUE}
    table.update(
        glob=_glob, package=_package, exports_files=_exports_files, package_name=_package_name
    )
    return table


def add_to(module: sl.Module, table: dict[str, Callable[..., Any]]) -> None:
    for name, function in table.items():
        module.add_callable(name, function)
