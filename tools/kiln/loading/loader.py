"""Packages on demand: from the graph cache when current, else by evaluating BUILD files.

The Starlark evaluator (and with it starlark, pydantic and the rule
catalogue) is imported only when some package actually has to be evaluated.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from kiln.errors import KilnError, Location
from kiln.loading import parallel
from kiln.loading.graph_cache import GraphCache
from kiln.loading.package import FileStamp, Package, Target
from kiln.loading.workspace import IGNORE_FILE, Workspace

if TYPE_CHECKING:
    from kiln.loading.build_file import BuildFileEvaluator


class NoSuchPackage(KilnError):
    pass


class PackageLoader:
    def __init__(self, workspace: Workspace, cache_file: Path | None):
        self.workspace = workspace
        self.cache = GraphCache(cache_file, str(workspace.root))
        self.packages: dict[str, Package] = {}
        self.evaluated = 0  # packages evaluated this run (the rest came from the cache)
        self._evaluator: BuildFileEvaluator | None = None

    @property
    def evaluator(self) -> BuildFileEvaluator:
        if self._evaluator is None:
            from kiln.loading.build_file import BuildFileEvaluator

            self._evaluator = BuildFileEvaluator(self.workspace)
        return self._evaluator

    def package(self, name: str) -> Package:
        loaded = self.packages.get(name)
        if loaded is not None:
            return loaded
        loaded = self.cache.package(name)
        if loaded is None:
            if name.startswith("@"):
                loaded = self._repository_package(name)
            else:
                loaded = self.evaluator.evaluate(name, self._build_file(name))
                self.evaluated += 1
            self.cache.put(loaded)
        self.packages[name] = loaded
        return loaded

    def prefetch(self, names: list[str]) -> None:
        """Load the packages `names` ahead of package(), evaluating those the graph
        cache lacks in parallel (see parallel.py). Errors wait for package()."""
        missing: list[str] = []
        for name in names:
            if name not in self.packages:
                cached = self.cache.package(name)
                if cached is None:
                    missing.append(name)
                else:
                    self.packages[name] = cached
        if parallel.jobs_for(len(missing)) < 2:
            return
        evaluator = self.evaluator  # imported before forking, so every process shares it
        for package in parallel.evaluate_all(
            lambda name: evaluator.evaluate(name, self._build_file(name)), missing
        ):
            self.packages[package.name] = package
            self.cache.put(package)
            self.evaluated += 1

    def is_package(self, name: str) -> bool:
        return name in self.packages or self.workspace.build_file(name) is not None

    def packages_beneath(self, prefix: str) -> list[str]:
        every = self.cache.packages_walked()
        if every is None:
            # .kilnignore decides which directories are walked at all.
            ignore = FileStamp.of(str(self.workspace.root), IGNORE_FILE)
            every, listed = self.workspace.walk_packages()
            self.cache.put_walk(every, (ignore, *listed))
        if not prefix:
            return every
        return [p for p in every if p == prefix or p.startswith(prefix + "/")]

    def _build_file(self, name: str) -> str:
        build_file = self.workspace.build_file(name)
        if build_file is None:
            raise NoSuchPackage(
                f"no such package '{name}': no BUILD file in "
                f"{name + '/' if name else 'the workspace root'}"
            )
        return build_file

    def _repository_package(self, name: str) -> Package:
        """A package of a repository kiln makes (`@pip//timm`), from the root package."""
        from kiln.loading import pip_repository

        root = self.package("")
        try:
            return pip_repository.load_package(name, root, str(self.workspace.root))
        except pip_repository.NoSuchRepositoryPackage as error:
            raise NoSuchPackage(error.message, hint=error.hint) from None

    def location_of(self, target: Target) -> Location:
        package = self.package(target.package)
        if target.index < 0:
            return Location(package.build_file)
        found = self.evaluator.locate(package.name, package.build_file, target.index)
        return found or Location(package.build_file)

    def save(self) -> None:
        self.cache.save()
