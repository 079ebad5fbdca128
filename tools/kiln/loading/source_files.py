"""The source files a package's targets name, found on disk once, when it is evaluated.

The graph needs every file a target refers to to exist and not to lie in a
subpackage. Most of them were just listed by glob(); the others are looked up
here, after the directories that decide the answer have been stamped. A
package read back from the graph cache then answers without touching the disk.
"""

from __future__ import annotations

import os
from collections.abc import Iterable

from kiln.loading.package import Target
from kiln.loading.workspace import BUILD_FILES


def referenced(package: str, targets: dict[str, Target]) -> set[str]:
    """Names of the same-package files the targets refer to (deps that are no target)."""
    prefix = f"//{package}:"
    start = len(prefix)
    names = {
        dep[start:] for target in targets.values() for dep in target.deps if dep.startswith(prefix)
    }
    return names - targets.keys()


def lookup_dirs(names: Iterable[str]) -> set[str]:
    """The directories, relative to the package, whose entries say whether `names` are files
    of the package: each one's directory and those above it (a BUILD file in any of them
    makes it a subpackage's)."""
    dirs: set[str] = set()
    for name in names:
        parts = name.split("/")[:-1]
        dirs.update("/".join(parts[:i]) for i in range(len(parts) + 1))
    return dirs


def on_disk(package_dir: str, name: str) -> bool:
    """Whether `name` is a file of the package: it exists, and no directory between the
    package and the file holds a BUILD file."""
    if not os.path.isfile(os.path.join(package_dir, name)):
        return False
    parts = name.split("/")[:-1]
    return not any(
        os.path.isfile(os.path.join(package_dir, *parts[:i], build))
        for i in range(1, len(parts) + 1)
        for build in BUILD_FILES
    )
