"""`@pip//timm`: the repository kiln makes of a locked set of Python packages.

    # the root BUILD file: the lock, declared once
    python_requirements(name = "pip", lock = "requirements_lock.txt")

    # any BUILD file: what a target imports, as rules_python spells it
    torch_model(name = "vit", ..., deps = ["@pip//timm"])

Repository `@<name>` belongs to the `python_requirements` target `//:<name>`
of the root package: a workspace-level declaration kept in the root BUILD file,
so it evaluates like any other target. Its package `@pip//timm` holds one
target, `timm`, of kind `python_requirement`, made here when the package is
first loaded, as Bazel's repository rules make `@pip` from the same lock: the
distribution as pinned (version and hashes) and its whole dependency closure
in the lock (kiln.pip_lock). Each target carries its closure instead of edges
to its dependencies' targets: Python packages may require each other in a
cycle, which a target graph refuses.

The package is stamped by the root package's stamps and the lock's, so the
graph cache (and through it the analysis cache) sees an edit of either.
"""

from __future__ import annotations

import difflib

from kiln import pip_lock
from kiln.errors import KilnError
from kiln.file_io import read_text
from kiln.loading.package import FileStamp, Package, Target
from kiln.loading.visibility import PUBLIC

REQUIREMENTS_RULE = "python_requirements"  # the rule that declares a repository
REQUIREMENT_KIND = "python_requirement"  # the kind of the targets made here


class NoSuchRepositoryPackage(KilnError):
    pass


def load_package(name: str, root_package: Package, root: str) -> Package:
    """The package `@repo//dist` (its `name`), made from `//:repo`'s lock."""
    repo, _, distribution = name[1:].partition("//")
    hub = root_package.targets.get(repo)
    if hub is None or hub.kind != REQUIREMENTS_RULE:
        raise NoSuchRepositoryPackage(
            f"no repository '@{repo}': the root BUILD file declares no "
            f'python_requirements(name = "{repo}")',
            hint="declare the lock once in the root BUILD file: "
            f'python_requirements(name = "{repo}", lock = "requirements_lock.txt")',
        )
    lock_label: str = hub.attrs["lock"]
    package, _, file = lock_label.removeprefix("//").partition(":")
    lock_path = f"{package}/{file}" if package else file
    stamps = (*root_package.stamps, FileStamp.of(root, lock_path))
    lock = read_lock(root, lock_path, hub.label)
    found = lock.packages.get(distribution)
    if found is None and pip_lock.is_toolchain_root(distribution):
        raise NoSuchRepositoryPackage(
            f"'{distribution}' is not in @{repo}: it is the toolchain's, and every Python "
            "action has it (kiln info toolchains)",
            hint=f"drop '@{repo}//{distribution}' from the deps: torch and its companions "
            "come with the toolchain, never from a lock",
        )
    if found is None:
        close = difflib.get_close_matches(
            pip_lock.normalized(distribution), list(lock.packages), n=1
        )
        raise NoSuchRepositoryPackage(
            f"no package '{distribution}' in @{repo}: {lock_path} pins no such distribution",
            hint=f"did you mean '@{repo}//{close[0]}'?"
            if close
            else f"lock it in {lock_path} (names are spelled lower case, with '_')",
        )
    attrs = {
        "name": distribution,
        # Any package may use it, as rules_python's hub aliases are public.
        "visibility": [PUBLIC],
        "hub": hub.label,
        **requirement_attrs(lock, distribution),
    }
    label = f"@{repo}//{distribution}:{distribution}"
    target = Target(label, REQUIREMENT_KIND, attrs, (hub.label,))
    return Package(name=name, build_file=lock_path, targets={distribution: target}, stamps=stamps)


def requirement_attrs(lock: pip_lock.Lock, distribution: str) -> dict[str, object]:
    """The attributes of `@<repo>//<distribution>` that come from the lock (its line and
    locked closure): kiln's loading and Bazel's @pip repository (kiln.bazel.pip_repository)
    make them here, so the model specs of both tools are the same bytes."""
    return {
        "lock": lock.path,
        "line": lock.packages[distribution].line,
        "closure": [
            {"name": p.name, "version": p.version, "hashes": list(p.hashes)}
            for p in lock.closure(distribution)
        ],
    }


def read_lock(root: str, lock_path: str, hub: str) -> pip_lock.Lock:
    try:
        text = read_text(f"{root}/{lock_path}")
    except OSError as error:
        raise KilnError(
            f"cannot read the lock {lock_path} of {hub}: {error.strerror}",
            hint="create it with `python -m kiln.pyenv.lock requirements.in`",
        ) from None
    except UnicodeDecodeError as error:
        raise KilnError(f"{lock_path} is not valid UTF-8 (byte {error.start})") from None
    return pip_lock.parse(text, lock_path)
