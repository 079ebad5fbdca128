"""EnvironmentStore: the interpreter of the environment holding the toolchain plus a closure.

    store = EnvironmentStore(disk_cache / "python-envs", sys.executable, find_links=(...))
    python = store.python_for(action.python_env)     # made on first use, then a stat

Made once per closure (and toolchain), in place under its digest, and usable
only once its manifest (kiln-env.json) is written, last and atomically: an
environment a crash or a failed install left behind has no manifest, is never
used, and is removed and made again by the next build that needs it. An flock
per environment keeps two kiln processes sharing a disk cache from making
the same one at once; a lock per digest does the same for this process's
threads. Another, held shared while a process uses it (hold_in_use), keeps the
disk cache's collection from removing it meanwhile.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import sysconfig
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from kiln import code_digest
from kiln.action_graph import PythonPackage
from kiln.errors import KilnError
from kiln.layout import PYTHON_ENV_IN_USE
from kiln.pip_lock import normalized
from kiln.pyenv import pip, toolchain

FORMAT = 2
MANIFEST = "kiln-env.json"


class PythonEnvError(KilnError):
    pass


@dataclass
class EnvironmentStore:
    root: Path
    python: str  # the toolchain's interpreter: kiln's own, which runs pip and gives the base
    find_links: tuple[str, ...] = ()  # wheelhouses: install offline from these
    # From find_links only, even where they lack a wheel: a remote node's environments,
    # whose wheels the driver sent (kiln.remote_exec.node_env), never reach an index.
    offline: bool = False
    report: Callable[[str], None] = lambda text: None
    _ready: dict[str, str] = field(default_factory=dict)
    _locks: dict[str, threading.Lock] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def python_for(self, packages: Sequence[PythonPackage]) -> str:
        """The interpreter of the environment of the toolchain and exactly `packages`.

        The environment is held in use by this process from now on (hold_in_use): the
        disk cache's collection never removes it while this process lives."""
        packages = tuple(sorted(set(packages)))
        digest = self.digest(packages)
        ready = self._ready.get(digest)
        if ready is not None:
            return ready
        with self._lock:
            lock = self._locks.setdefault(digest, threading.Lock())
        with lock:
            self.root.mkdir(parents=True, exist_ok=True)
            hold_in_use(self.root, digest)
            env = self.root / digest
            if not (env / MANIFEST).is_file():
                with flock(self.root / f"{digest}.lock"):
                    if not (env / MANIFEST).is_file():
                        self._make(env, packages)
            python = str(env / "bin" / "python")
            self._ready[digest] = python
            return python

    def has(self, packages: Sequence[PythonPackage]) -> bool:
        """The environment of `packages` is made already: python_for() would be a stat."""
        return (self.root / self.digest(tuple(sorted(set(packages)))) / MANIFEST).is_file()

    @staticmethod
    def digest(packages: Sequence[PythonPackage]) -> str:
        """The environment's name: its format, the toolchain and the packages (no paths of it)."""
        parts = {
            "format": FORMAT,
            "interpreter": os.path.realpath(_base_interpreter()),
            "prefix": os.path.realpath(sysconfig.get_config_var("prefix") or ""),
            "site": [str(p) for p in toolchain.site_directories()],
            "toolchain": [[d.name, d.version] for d in toolchain.distributions()],
            "kiln": str(code_digest.KILN_ROOT),
            "packages": [[p.name, p.version, list(p.hashes)] for p in packages],
        }
        text = json.dumps(parts, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()[:20]

    # -- making one -------------------------------------------------------------------

    def _make(self, env: Path, packages: tuple[PythonPackage, ...]) -> None:
        start = time.monotonic()
        if env.exists() or env.is_symlink():
            shutil.rmtree(env, ignore_errors=True)  # unfinished: no manifest
        provided = toolchain.by_name()
        install = to_install(packages, provided)
        described = _describe(packages)
        self.report(
            f"making the Python environment {env.name[:8]}: the toolchain"
            + (f" and {described}" if packages else "")
            + (f"; installing {len(install)} with pip" if install else "")
            + (f" from {', '.join(self.find_links)}" if install and self.find_links else "")
        )
        try:
            site = _create_venv(env)
            if install:
                pip.install(
                    self.python,
                    install,
                    site,
                    find_links=self.find_links,
                    offline=self.offline,
                    progress=lambda line: self.report(f"  {line}"),
                )
            _link_toolchain(site, provided)
            check_requirements(site, {p.name for p in install})
            _write_manifest(env, packages, provided)
        except BaseException as error:
            shutil.rmtree(env, ignore_errors=True)
            if isinstance(error, pip.PipError):
                raise PythonEnvError(
                    f"cannot make the Python environment of {described}: {error.message}",
                    hint=error.hint,
                ) from None
            raise
        self.report(f"Python environment {env.name[:8]} ready in {time.monotonic() - start:.1f}s")


def to_install(
    packages: Sequence[PythonPackage], provided: dict[str, toolchain.Distribution]
) -> list[PythonPackage]:
    """The packages pip installs: those the toolchain does not provide. A locked package
    the toolchain provides is linked instead, and must be locked at its version."""
    for package in packages:
        have = provided.get(package.name)
        if have is not None and not _same_release(package.version, have.version):
            raise PythonEnvError(
                f"the lock pins {package.name}=={package.version}, but the toolchain has "
                f"{package.name} {have.version} (torch or kiln's actions use it)",
                hint=f"lock {package.name}=={have.version.split('+')[0]}: the toolchain's "
                "distributions are never replaced",
            )
    return [p for p in packages if p.name not in provided]


def _same_release(locked: str, installed: str) -> bool:
    return locked == installed or ("+" not in locked and installed.split("+", 1)[0] == locked)


def _describe(packages: Sequence[PythonPackage]) -> str:
    shown = ", ".join(f"{p.name} {p.version}" for p in packages[:3])
    more = f" and {len(packages) - 3} more" if len(packages) > 3 else ""
    return f"{len(packages)} locked package{'s' if len(packages) != 1 else ''} ({shown}{more})"


def _base_interpreter() -> str:
    import sys

    return getattr(sys, "_base_executable", sys.executable)


def _create_venv(env: Path) -> Path:
    """An empty venv (no pip, no system site-packages) on the toolchain's base interpreter."""
    import venv

    venv.EnvBuilder(symlinks=True, with_pip=False, system_site_packages=False).create(env)
    site = Path(sysconfig.get_path("purelib", vars={"base": str(env), "platbase": str(env)}))
    site.mkdir(parents=True, exist_ok=True)
    return site


def _link_toolchain(site: Path, provided: dict[str, toolchain.Distribution]) -> None:
    """Symlink every top-level entry of the toolchain's distributions, and kiln itself."""
    entries = [e for d in provided.values() for e in d.entries]
    entries.append(code_digest.KILN_ROOT)
    linked: set[str] = set()
    for entry in entries:
        dest = site / entry.name
        if entry.name in linked:
            continue  # a namespace folder several distributions share (nvidia/)
        if dest.exists() or dest.is_symlink():
            owner = next((d.name for d in provided.values() if entry in d.entries), "kiln")
            raise toolchain_clash(entry.name, owner)
        dest.symlink_to(entry, target_is_directory=entry.is_dir())
        linked.add(entry.name)
    _write_toolchain_finder(site, entries)


def toolchain_clash(entry: str, owner: str) -> PythonEnvError:
    """A locked package installs `entry`, a top-level name of the toolchain's `owner`."""
    return PythonEnvError(
        f"a locked package installs '{entry}', which the toolchain's {owner} "
        "provides: the toolchain's files are never replaced",
        hint="leave that package out of the lock, or lock the toolchain's version",
    )


# Imported by a .pth at start-up: the toolchain's modules are imported from where they are
# installed, not through the environment's symlinks, so their __file__ (and everything
# derived from it: inductor's -I flags, which end up in a package's bytes) is the same
# whichever environment, in whichever disk cache, imports them.
_FINDER = """\
\"\"\"The toolchain's modules, from where they are installed (made by kiln.pyenv).\"\"\"
import importlib.machinery
import sys

PLACES = {places!r}


class ToolchainFinder:
    @staticmethod
    def find_spec(name, path=None, target=None):
        place = PLACES.get(name) if path is None else None
        if place is None:
            return None
        return importlib.machinery.PathFinder.find_spec(name, [place])


sys.meta_path.insert(0, ToolchainFinder)
"""


def _write_toolchain_finder(site: Path, entries: list[Path]) -> None:
    places: dict[str, str] = {}
    for entry in entries:
        name = entry.name
        if name.endswith((".dist-info", ".egg-info", ".pth", ".libs")) or name.startswith("."):
            continue
        module = name.split(".", 1)[0] if entry.is_file() else name
        if module.isidentifier():
            places.setdefault(module, str(entry.resolve().parent))
    (site / "_kiln_toolchain.py").write_text(_FINDER.format(places=places), encoding="utf-8")
    (site / "_kiln_toolchain.pth").write_text("import _kiln_toolchain\n", encoding="utf-8")


def check_requirements(site: Path | Sequence[Path], installed: set[str]) -> None:
    """Every requirement of every installed package is met inside the environment.

    The lock's `# via` annotations decide what a package's closure holds; a lock
    that leaves out a dependency would make an environment that fails at import.
    `site` is the environment's site-packages (holding the toolchain's links), or the
    folders a closure's packages and the toolchain are installed in (kiln's Bazel @pip).
    """
    problems = requirement_problems([site] if isinstance(site, Path) else site, installed)
    if problems:
        raise incomplete_closure(problems)


def incomplete_closure(problems: Sequence[str]) -> PythonEnvError:
    return PythonEnvError(
        "the lock's closure is incomplete: " + "; ".join(problems),
        hint="a package's closure is what the lock's '# via' annotations say: lock again "
        "(python -m kiln.pyenv.lock requirements.in), or annotate the missing pin "
        "'# via <the package that requires it>'",
    )


def requirement_problems(
    paths: Sequence[Path], installed: set[str], provided: Mapping[str, str] | None = None
) -> list[str]:
    """What check_requirements reports: each unmet requirement of the `installed`
    distributions found in `paths`, met by those or by `provided` (name -> version: the
    toolchain's, where `paths` do not hold its links)."""
    from importlib import metadata

    from packaging.requirements import InvalidRequirement, Requirement

    found: dict[str, metadata.Distribution] = {}
    for d in metadata.distributions(path=[str(p) for p in paths]):
        if d.metadata["Name"]:
            found.setdefault(normalized(d.metadata["Name"]), d)
    versions = {**(provided or {}), **{n: d.version for n, d in found.items()}}
    problems: list[str] = []
    for name in sorted(installed):
        dist = found.get(name)
        if dist is None:
            problems.append(f"{name} was installed, but pip left no metadata of it")
            continue
        for text in dist.requires or ():
            try:
                requirement = Requirement(text)
            except InvalidRequirement:
                continue
            if requirement.marker is not None and not requirement.marker.evaluate({"extra": ""}):
                continue
            need = normalized(requirement.name)
            have = versions.get(need)
            if have is None:
                problems.append(f"{name} {dist.version} requires {need}, which it does not hold")
            elif not requirement.specifier.contains(have, prereleases=True):
                problems.append(
                    f"{name} {dist.version} requires {requirement}, but it holds {need} {have}"
                )
    return problems


def _write_manifest(
    env: Path, packages: Sequence[PythonPackage], provided: dict[str, toolchain.Distribution]
) -> None:
    manifest = {
        "format": FORMAT,
        "packages": [p.requirement for p in packages],
        "toolchain": [f"{d.name}=={d.version}" for d in provided.values()],
    }
    tmp = env / f".{MANIFEST}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(manifest, f, indent=2, sort_keys=True)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, env / MANIFEST)


# Each environment this process uses: the descriptor of its in-use lock, held shared for
# the process's life (a build; a node's Ray worker), by path.
_in_use: dict[str, int] = {}
_in_use_lock = threading.Lock()


def hold_in_use(root: Path, digest: str) -> None:
    """Hold `<root>/<digest>.in-use` shared for the rest of this process, and mark the
    environment used now (the lock file's mtime: the collection removes the least recently
    used first). The collection takes it exclusively, without waiting, to remove the
    environment: so it never removes one a process uses, and a process that comes while
    it removes one waits here, then finds no manifest and makes the environment again."""
    path = root / f"{digest}{PYTHON_ENV_IN_USE}"
    with _in_use_lock:
        if str(path) in _in_use:
            return
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
        fcntl.flock(fd, fcntl.LOCK_SH)
        os.utime(fd)
        _in_use[str(path)] = fd


@contextlib.contextmanager
def flock(path: Path) -> Iterator[None]:
    with open(path, "a+b") as f:
        fcntl.flock(f.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f.fileno(), fcntl.LOCK_UN)
