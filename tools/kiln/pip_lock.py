"""The workspace's lock of third-party Python packages: pip's requirements format, pinned.

    # requirements_lock.txt, as pip-compile, `uv pip compile` or kiln's
    # `python -m kiln.pyenv.lock` write it (and as `pip install -r` reads it)
    huggingface-hub==0.36.2 \\
        --hash=sha256:48f0c8eac16145dfce371e9d2d7772854a4f591bcb56c9cf548accf531d54270
        # via
        #   timm
        #   transformers
    timm==1.0.31 \\
        --hash=sha256:5bd50f7d0fe6...
        # via -r requirements.in

Every line pins one distribution exactly (`name==version`, extras allowed) and
carries the digest of its wheel (`--hash=sha256:...`, one or more): that digest
is what an action's key holds, so a lock without hashes is refused. The
`# via` annotations name the packages that require each one; inverted, they
give every package's dependency closure, which is what a target declaring
`@pip//timm` may import (pip-tools and uv write them by default). Environment
markers, URLs, editable and nested requirement files are refused: a lock is
made for one platform, as pip-compile makes it. Index options (`--index-url`,
`--extra-index-url`, `--find-links`, `--trusted-host`) are ignored: where a
wheel comes from does not matter once its digest is pinned.

A leaf: loading reads it to make the `@pip` repository, the environment
manager to install it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from kiln.errors import KilnError, Location

# PEP 508 names; a version is anything pip would accept after `==` (checked by pip).
_REQUIREMENT = re.compile(
    r"^(?P<name>[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?)"
    r"\s*(?:\[(?P<extras>[^\]]*)\])?"
    r"\s*==\s*(?P<version>[A-Za-z0-9._+!-]+)$"
)
_HASH = re.compile(r"^(?P<algorithm>sha256|sha384|sha512):(?P<hex>[0-9a-fA-F]+)$")
_HASH_LENGTHS = {"sha256": 64, "sha384": 96, "sha512": 128}
_IGNORED_OPTIONS = ("--index-url", "--extra-index-url", "--find-links", "--trusted-host", "-i")
HINT = (
    "lock with hashes and annotations: `python -m kiln.pyenv.lock requirements.in`, "
    "`pip-compile --generate-hashes` or `uv pip compile --generate-hashes`"
)


# The toolchain's root distributions (kiln.pyenv.toolchain): every Python action has
# them and a lock never pins them; installed distributions whose names start with a
# family's are roots too.
TOOLCHAIN_ROOTS = (
    "torch",
    "torch_tensorrt",
    "torch_tensorrt_rtx",
    "numpy",
    "safetensors",
    "pydantic",
    "jinja2",
)
TOOLCHAIN_FAMILIES = ("tensorrt",)


def is_toolchain_root(name: str) -> bool:
    """Whether the distribution (any spelling) is a root of the toolchain."""
    name = normalized(name)
    return name in TOOLCHAIN_ROOTS or name.startswith(TOOLCHAIN_FAMILIES)


def normalized(name: str) -> str:
    """A distribution name as labels spell it: `@pip//huggingface_hub` (rules_python's form)."""
    return re.sub(r"[-_.]+", "_", name).lower()


class LockError(KilnError):
    pass


@dataclass(frozen=True, order=True)
class LockedPackage:
    """One pinned distribution of the lock."""

    name: str  # normalized: the label's package, `@pip//<name>`
    version: str
    hashes: tuple[str, ...]  # "sha256:<hex>", sorted
    line: int = field(compare=False)  # where the lock pins it
    display_name: str = field(compare=False)  # as the lock spells it, for pip and messages
    extras: tuple[str, ...] = field(default=(), compare=False)
    required_by: tuple[str, ...] = field(default=(), compare=False)  # normalized, from `# via`

    @property
    def pin(self) -> str:
        """The requirement as pip reads it: `name[extras]==version --hash=... ...`."""
        extras = f"[{','.join(self.extras)}]" if self.extras else ""
        hashes = "".join(f" --hash={h}" for h in self.hashes)
        return f"{self.display_name}{extras}=={self.version}{hashes}"


@dataclass(frozen=True)
class Lock:
    path: str  # workspace-relative, for messages
    packages: dict[str, LockedPackage]  # by normalized name

    def closure(self, name: str) -> tuple[LockedPackage, ...]:
        """`name` and every locked package it needs, transitively (cycles are fine), sorted."""
        needs: dict[str, list[str]] = {}
        for package in self.packages.values():
            for parent in package.required_by:
                needs.setdefault(parent, []).append(package.name)
        seen = {name}
        stack = [name]
        while stack:
            for child in needs.get(stack.pop(), ()):
                if child not in seen:
                    seen.add(child)
                    stack.append(child)
        return tuple(sorted(self.packages[n] for n in seen if n in self.packages))


def parse(text: str, path: str) -> Lock:
    """The lock in `text` (from the file `path`); a LockError naming the line otherwise."""
    packages: dict[str, LockedPackage] = {}
    current: _Entry | None = None
    in_via = False
    for number, line in _logical_lines(text):
        stripped = line.strip()
        if not stripped:
            in_via = False
            continue
        if stripped.startswith("#"):
            comment = stripped[1:].strip()
            if current is not None and re.match(r"via\b", comment):
                rest = comment[3:].strip()
                in_via = not rest
                if rest:
                    current.add_via(rest)
            elif current is not None and in_via and comment:
                current.add_via(comment)
            else:
                in_via = False
            continue
        in_via = False
        if current is not None:
            _add(packages, current.finish(), path)
            current = None
        if stripped.startswith("-"):
            option = re.split(r"[\s=]", stripped, maxsplit=1)[0]
            if option in _IGNORED_OPTIONS:
                continue
            raise _error(path, number, f"'{option}' is not supported in a lock", HINT)
        current = _Entry.read(stripped, number, path)
    if current is not None:
        _add(packages, current.finish(), path)
    return Lock(path, packages)


@dataclass
class _Entry:
    number: int
    name: str
    version: str
    extras: tuple[str, ...]
    hashes: list[str]
    via: list[str] = field(default_factory=list)

    @staticmethod
    def read(text: str, number: int, path: str) -> _Entry:
        text = re.sub(r"\s+#.*$", "", text)  # an inline comment
        words = text.split()
        requirement: list[str] = []
        hashes: list[str] = []
        i = 0
        while i < len(words):
            word = words[i]
            if word == "--hash" and i + 1 < len(words):
                hashes.append(_hash(words[i + 1], path, number))
                i += 2
                continue
            if word.startswith("--hash="):
                hashes.append(_hash(word[len("--hash=") :], path, number))
            elif word.startswith("-"):
                raise _error(path, number, f"option '{word}' is not supported on a requirement")
            else:
                requirement.append(word)
            i += 1
        spec = " ".join(requirement)
        if ";" in spec:
            raise _error(
                path,
                number,
                f"'{spec}' has an environment marker; a lock pins one platform",
                "lock for the platform the actions run on (no markers)",
            )
        if "@" in spec or "/" in spec:
            raise _error(path, number, f"'{spec}' is a direct reference; pin name==version", HINT)
        found = _REQUIREMENT.match(spec)
        if found is None:
            raise _error(
                path, number, f"'{spec}' is not pinned as name==version (a lock pins exactly)", HINT
            )
        if not hashes:
            raise _error(
                path,
                number,
                f"'{spec}' has no --hash: an action's key holds the digest of every "
                "package it can import",
                HINT,
            )
        extras = tuple(sorted(e.strip() for e in (found.group("extras") or "").split(",") if e))
        return _Entry(number, found.group("name"), found.group("version"), extras, hashes)

    def add_via(self, text: str) -> None:
        for item in text.split(","):
            part = item.strip()
            if part and not part.startswith(("-r ", "-c ", "--")):
                self.via.append(normalized(part.split()[0]))

    def finish(self) -> LockedPackage:
        return LockedPackage(
            name=normalized(self.name),
            version=self.version,
            hashes=tuple(sorted(set(self.hashes))),
            line=self.number,
            display_name=self.name,
            extras=self.extras,
            required_by=tuple(dict.fromkeys(self.via)),
        )


def _add(packages: dict[str, LockedPackage], package: LockedPackage, path: str) -> None:
    before = packages.get(package.name)
    if before is not None:
        raise _error(
            path,
            package.line,
            f"{package.display_name} is pinned twice (also on line {before.line})",
        )
    packages[package.name] = package


def _hash(text: str, path: str, number: int) -> str:
    found = _HASH.match(text)
    if found is None or len(found.group("hex")) != _HASH_LENGTHS[found.group("algorithm")]:
        raise _error(path, number, f"'{text}' is not a hash pip checks (sha256:<64 hex digits>)")
    return f"{found.group('algorithm')}:{found.group('hex').lower()}"


def _logical_lines(text: str) -> Iterable[tuple[int, str]]:
    """Lines with backslash continuations joined, each with the number of its first line."""
    pending: list[str] = []
    start = 0
    for number, line in enumerate(text.splitlines(), start=1):
        if not pending:
            start = number
        if line.endswith("\\") and not line.lstrip().startswith("#"):
            pending.append(line[:-1])
            continue
        pending.append(line)
        yield start, " ".join(pending)
        pending = []
    if pending:
        yield start, " ".join(pending)


def _error(path: str, line: int, message: str, hint: str | None = None) -> LockError:
    return LockError(message, location=Location(path, line), hint=hint)


def format_lock(
    packages: Iterable[LockedPackage], header: str, *, requested: str = "requirements.in"
) -> str:
    """A lock in the form parse() reads and pip installs: sorted, hashed, annotated.

    A package with no `required_by` is one the input file `requested` asked for.
    """
    out = [f"# {line}".rstrip() for line in header.splitlines()]
    for package in sorted(packages, key=lambda p: p.name):
        extras = f"[{','.join(package.extras)}]" if package.extras else ""
        out.append(f"{package.display_name}{extras}=={package.version} \\")
        last = len(package.hashes) - 1
        out += [
            f"    --hash={h}" + (" \\" if i < last else "") for i, h in enumerate(package.hashes)
        ]
        via = list(package.required_by) or [f"-r {requested}"]
        if len(via) == 1:
            out.append(f"    # via {via[0]}")
        else:
            out.append("    # via")
            out += [f"    #   {name}" for name in via]
    return "\n".join(out) + "\n"
