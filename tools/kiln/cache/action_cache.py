"""The action cache: action key -> the result of running that action.

On disk, under the cache root:

    ac/<first 2 hex digits of the key>/<key>

Each entry is one ActionResult as canonical JSON (sorted keys, no spaces),
written whole or not at all (atomic.py, without fsync: see put), mode 0444:

    {"execution_seconds":1.5,"exit_code":0,
     "output_files":[{"digest":{"hash":"<64 hex>","size":123},
                      "is_executable":false,"path":"model.pt2"}],
     "stderr_digest":null,"stdout_digest":{"hash":"...","size":0},
     "version":1,"worker":"local"}

Output paths are relative to the action's output root and sorted; an entry
that names an absolute path or a `..` segment is refused, since materializing
it would write outside the output tree. Unknown keys and another version
are refused too: an entry is a cache, so anything unexpected is a miss, and
get() deletes it.

An entry is a hit only while every blob it names is in the CAS and intact
(lookup: ContentStore.check, a stat while the blob's stamp holds); the blobs
and the entry are touched on a hit, which is what garbage collection reads
as "last used". The entry is touched first, so of
an entry and its blobs, the entry looks the older and is collected first.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from kiln.cache.atomic import mark_used, write_atomic
from kiln.cache.cas import ContentStore
from kiln.cache.digest import Digest
from kiln.layout import DiskCache

VERSION = 1

_KEY = re.compile(r"[0-9a-f]{8,128}")
_RESULT_KEYS = frozenset(
    {
        "version",
        "output_files",
        "exit_code",
        "stdout_digest",
        "stderr_digest",
        "execution_seconds",
        "worker",
    }
)
_OUTPUT_KEYS = frozenset({"path", "digest", "is_executable"})
_DIGEST_KEYS = frozenset({"hash", "size"})

T = TypeVar("T")


def check_output_path(path: str) -> None:
    """ValueError unless path is relative, normalised and stays below its root."""
    if not isinstance(path, str) or not path:
        raise ValueError(f"output path must be a non-empty string: {path!r}")
    if path.startswith("/") or "\0" in path:
        raise ValueError(f"output path must be relative: {path!r}")
    if any(part in ("", ".", "..") for part in path.split("/")):
        raise ValueError(f"output path must be normalised, without '..': {path!r}")


@dataclass(frozen=True)
class OutputFile:
    path: str
    digest: Digest
    is_executable: bool = False

    def __post_init__(self) -> None:
        check_output_path(self.path)


@dataclass(frozen=True)
class ActionResult:
    """What running an action produced; outputs are kept sorted by path."""

    output_files: tuple[OutputFile, ...]
    exit_code: int = 0
    stdout_digest: Digest | None = None
    stderr_digest: Digest | None = None
    execution_seconds: float = 0.0
    worker: str = field(default="")

    def __post_init__(self) -> None:
        outputs = tuple(sorted(self.output_files, key=lambda f: f.path))
        paths = [f.path for f in outputs]
        if len(set(paths)) != len(paths):
            raise ValueError(f"duplicate output paths: {paths}")
        if not math.isfinite(self.execution_seconds) or self.execution_seconds < 0:
            raise ValueError(f"execution_seconds must be >= 0: {self.execution_seconds!r}")
        object.__setattr__(self, "output_files", outputs)
        object.__setattr__(self, "execution_seconds", float(self.execution_seconds))

    def digests(self) -> list[tuple[Digest, bool]]:
        """Every blob the result names, with whether it is the executable variant."""
        named = [(f.digest, f.is_executable) for f in self.output_files]
        named += [(d, False) for d in (self.stdout_digest, self.stderr_digest) if d is not None]
        return named

    def to_json(self) -> bytes:
        doc = {
            "version": VERSION,
            "output_files": [
                {"path": f.path, "digest": _digest_doc(f.digest), "is_executable": f.is_executable}
                for f in self.output_files
            ],
            "exit_code": self.exit_code,
            "stdout_digest": _digest_doc(self.stdout_digest),
            "stderr_digest": _digest_doc(self.stderr_digest),
            "execution_seconds": self.execution_seconds,
            "worker": self.worker,
        }
        return json.dumps(doc, sort_keys=True, separators=(",", ":"), allow_nan=False).encode()

    @staticmethod
    def from_json(data: bytes) -> ActionResult:
        """Parse an entry; ValueError on anything that is not exactly what to_json writes."""
        try:
            doc = json.loads(data.decode("utf-8"))
        except (UnicodeDecodeError, RecursionError) as e:
            raise ValueError(f"action result is not UTF-8 JSON: {e}") from None
        doc = _table(doc, _RESULT_KEYS, "action result")
        if doc["version"] != VERSION or isinstance(doc["version"], bool):
            raise ValueError(f"action result version {doc['version']!r}, expected {VERSION}")
        files = doc["output_files"]
        if not isinstance(files, list):
            raise ValueError("output_files must be a list")
        outputs = []
        for item in files:
            entry = _table(item, _OUTPUT_KEYS, "output file")
            outputs.append(
                OutputFile(
                    path=entry["path"],
                    digest=_parse_digest(entry["digest"]),
                    is_executable=_typed(entry["is_executable"], bool, "is_executable"),
                )
            )
        seconds = doc["execution_seconds"]
        if isinstance(seconds, bool) or not isinstance(seconds, int | float):
            raise ValueError(f"execution_seconds must be a number: {seconds!r}")
        return ActionResult(
            output_files=tuple(outputs),
            exit_code=_int(doc["exit_code"], "exit_code"),
            stdout_digest=_parse_optional_digest(doc["stdout_digest"]),
            stderr_digest=_parse_optional_digest(doc["stderr_digest"]),
            execution_seconds=float(seconds),
            worker=_typed(doc["worker"], str, "worker"),
        )


def _digest_doc(digest: Digest | None) -> dict[str, Any] | None:
    return None if digest is None else {"hash": digest.hash, "size": digest.size}


def _table(value: object, keys: frozenset[str], what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ValueError(f"{what} must be an object")
    if value.keys() != keys:
        missing = sorted(keys - value.keys())
        unknown = sorted(value.keys() - keys)
        raise ValueError(f"{what}: missing keys {missing}, unknown keys {unknown}")
    return value


def _typed(value: object, kind: type[T], name: str) -> T:
    if not isinstance(value, kind):
        raise ValueError(f"{name} must be a {kind.__name__}: {value!r}")
    return value


def _int(value: object, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name} must be an integer: {value!r}")
    return value


def _parse_digest(value: object) -> Digest:
    doc = _table(value, _DIGEST_KEYS, "digest")
    return Digest(_typed(doc["hash"], str, "hash"), _int(doc["size"], "size"))


def _parse_optional_digest(value: object) -> Digest | None:
    return None if value is None else _parse_digest(value)


class ActionCache:
    """Action results under `root/ac`, keyed by action key (lowercase hex)."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self._dir = DiskCache(self.root).ac

    def path(self, key: str) -> Path:
        if not _KEY.fullmatch(key):
            raise ValueError(f"not an action key (lowercase hex): {key!r}")
        return self._dir / key[:2] / key

    def get(self, key: str) -> ActionResult | None:
        """The stored result, or None if absent; a corrupt entry is deleted."""
        path = self.path(key)
        try:
            with open(path, "rb") as f:
                data = f.read()
                read_stat = os.fstat(f.fileno())
        except FileNotFoundError:
            return None
        try:
            return ActionResult.from_json(data)
        except ValueError:
            # Delete only what was read: a writer may have replaced it since.
            with contextlib.suppress(FileNotFoundError):
                if os.path.samestat(os.stat(path), read_stat):
                    os.unlink(path)
            return None

    def put(self, key: str, result: ActionResult) -> None:
        # Not fsynced (half of an action's fsyncs): after a power cut the entry is
        # whole, missing or empty, and get() reads the last two as misses. The
        # blobs it names were fsynced before, so a surviving entry names none lost.
        write_atomic(self.path(key), result.to_json(), 0o444, sync=False)

    def lookup(self, key: str, cas: ContentStore) -> ActionResult | None:
        """The result, only if every blob it names is in cas and intact (a damaged one is
        removed there); a hit touches them all."""
        result = self.get(key)
        if result is None:
            return None
        # Touch before checking: a collection that starts now then spares them.
        mark_used(self.path(key))
        named = result.digests()
        for digest, executable in named:
            cas.touch(digest, executable)
        if all(cas.intact(digest, executable) for digest, executable in named):
            return result
        return None
