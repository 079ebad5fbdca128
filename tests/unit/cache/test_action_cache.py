"""kiln.cache.action_cache: the result format and hits that need every blob."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from kiln.cache.action_cache import ActionCache, ActionResult, OutputFile
from kiln.cache.cas import ContentStore
from kiln.cache.digest import Digest, digest_bytes

KEY = "ab" + "c" * 62
D1 = digest_bytes(b"one")
D2 = digest_bytes(b"two")


def result(**overrides: object) -> ActionResult:
    fields: dict[str, object] = {
        "output_files": (OutputFile("out/b.pt2", D2), OutputFile("out/a.so", D1, True)),
        "exit_code": 0,
        "stdout_digest": digest_bytes(b""),
        "stderr_digest": None,
        "execution_seconds": 1.5,
        "worker": "worker-1",
    }
    fields.update(overrides)
    return ActionResult(**fields)  # type: ignore[arg-type]


@pytest.fixture
def cas(tmp_path: Path) -> ContentStore:
    return ContentStore(tmp_path)


@pytest.fixture
def ac(tmp_path: Path) -> ActionCache:
    return ActionCache(tmp_path)


def test_json_is_canonical_and_round_trips() -> None:
    r = ActionResult(output_files=(OutputFile("x", D1),), stdout_digest=D2)
    assert (
        r.to_json()
        == (
            '{"execution_seconds":0.0,"exit_code":0,"output_files":[{"digest":{"hash":"'
            + D1.hash
            + '","size":3},"is_executable":false,"path":"x"}],"stderr_digest":null,'
            '"stdout_digest":{"hash":"' + D2.hash + '","size":3},"version":1,"worker":""}'
        ).encode()
    )
    assert ActionResult.from_json(r.to_json()) == r
    assert ActionResult.from_json(result().to_json()) == result()


def test_outputs_are_sorted_so_order_does_not_change_the_entry() -> None:
    a, b = OutputFile("a", D1), OutputFile("b", D2)
    assert ActionResult((b, a)) == ActionResult((a, b))
    assert ActionResult((b, a)).to_json() == ActionResult((a, b)).to_json()
    assert ActionResult([b, a]).output_files == (a, b)  # type: ignore[arg-type]


def test_duplicate_output_paths_are_refused() -> None:
    with pytest.raises(ValueError, match="duplicate output paths"):
        ActionResult((OutputFile("a", D1), OutputFile("a", D2)))


@pytest.mark.parametrize("path", ["../x", "/abs", "a/../b", "a/..", "", ".", "a//b", "./a", "a/"])
def test_output_paths_outside_or_unnormalised_are_refused(path: str) -> None:
    with pytest.raises(ValueError, match="output path"):
        OutputFile(path, D1)
    doc = json.loads(result().to_json())
    doc["output_files"][0]["path"] = path
    with pytest.raises(ValueError, match="output path"):
        ActionResult.from_json(json.dumps(doc).encode())


def _mutations() -> list[tuple[str, object]]:
    doc = json.loads(result().to_json())

    def changed(**kv: object) -> dict[str, object]:
        return {**doc, **kv}

    out = doc["output_files"][0]
    return [
        ("version 2", changed(version=2)),
        ("version true", changed(version=True)),
        ("no version", {k: v for k, v in doc.items() if k != "version"}),
        ("unknown key", changed(extra=1)),
        ("exit code bool", changed(exit_code=False)),
        ("exit code str", changed(exit_code="0")),
        ("seconds str", changed(execution_seconds="1")),
        ("negative seconds", changed(execution_seconds=-1.0)),
        ("worker int", changed(worker=3)),
        ("outputs not list", changed(output_files={})),
        ("output not object", changed(output_files=["x"])),
        ("output unknown key", changed(output_files=[{**out, "mode": 1}])),
        ("executable int", changed(output_files=[{**out, "is_executable": 1}])),
        ("digest str", changed(output_files=[{**out, "digest": str(D1)}])),
        ("hash upper", changed(stdout_digest={"hash": D1.hash.upper(), "size": 3})),
        ("size negative", changed(stdout_digest={"hash": D1.hash, "size": -3})),
        ("size float", changed(stdout_digest={"hash": D1.hash, "size": 3.0})),
        ("not an object", [doc]),
    ]


@pytest.mark.parametrize(("why", "doc"), _mutations(), ids=[m[0] for m in _mutations()])
def test_malformed_results_are_refused(why: str, doc: object) -> None:
    with pytest.raises(ValueError):
        ActionResult.from_json(json.dumps(doc).encode())


@pytest.mark.parametrize("data", [b"", b"{", b"\xff\xfe", b"null", b"[[[[" * 10000, b"NaN"])
def test_garbage_is_refused_with_value_error(data: bytes) -> None:
    with pytest.raises(ValueError):
        ActionResult.from_json(data)


def test_put_then_get(ac: ActionCache, tmp_path: Path) -> None:
    assert ac.get(KEY) is None
    ac.put(KEY, result())
    assert ac.get(KEY) == result()
    path = tmp_path / "ac" / KEY[:2] / KEY
    assert path.read_bytes() == result().to_json()
    assert list(path.parent.glob(".tmp.*")) == []


def test_put_replaces_an_entry(ac: ActionCache) -> None:
    ac.put(KEY, result())
    ac.put(KEY, result(exit_code=3))
    assert ac.get(KEY) == result(exit_code=3)


@pytest.mark.parametrize("key", ["../../etc", "AB" * 32, "ab/cd" * 8, "a", ""])
def test_keys_that_are_not_hex_are_refused(ac: ActionCache, key: str) -> None:
    with pytest.raises(ValueError, match="not an action key"):
        ac.get(key)


def test_every_truncated_entry_is_a_miss_and_is_deleted(ac: ActionCache) -> None:
    ac.put(KEY, result())
    path = ac.path(KEY)
    whole = path.read_bytes()
    path.unlink()
    for n in range(len(whole)):
        path.write_bytes(whole[:n])
        assert ac.get(KEY) is None, n
        assert not path.exists(), n


def test_corrupt_entry_is_a_miss_and_is_deleted(ac: ActionCache) -> None:
    ac.put(KEY, result())
    path = ac.path(KEY)
    path.chmod(0o644)
    path.write_bytes(result().to_json().replace(b'"version":1', b'"version":9'))
    assert ac.get(KEY) is None
    assert not path.exists()


def store_all(cas: ContentStore) -> None:
    cas.put_bytes(b"two")
    cas.put_file(cas.path(cas.put_bytes(b"one")), D1, executable=True)
    cas.put_bytes(b"")


def test_lookup_hits_when_every_blob_is_present_and_touches_them(
    ac: ActionCache, cas: ContentStore
) -> None:
    store_all(cas)
    ac.put(KEY, result())
    old = 10**9
    paths = [ac.path(KEY), cas.path(D2), cas.path(D1, True), cas.path(digest_bytes(b""))]
    for p in paths:
        os.utime(p, ns=(old, old))
    assert ac.lookup(KEY, cas) == result()
    assert all(os.stat(p).st_atime_ns > old for p in paths)  # used now
    assert all(os.stat(p).st_mtime_ns == old for p in paths)  # contents untouched


def test_lookup_misses_when_absent(ac: ActionCache, cas: ContentStore) -> None:
    assert ac.lookup(KEY, cas) is None


def test_lookup_misses_when_an_output_blob_is_missing(ac: ActionCache, cas: ContentStore) -> None:
    store_all(cas)
    ac.put(KEY, result())
    os.unlink(cas.path(D2))
    assert ac.lookup(KEY, cas) is None
    assert ac.get(KEY) == result()  # the entry stays: a later run re-stores the blob


def test_lookup_misses_when_only_the_plain_blob_of_an_executable_is_present(
    ac: ActionCache, cas: ContentStore
) -> None:
    store_all(cas)
    ac.put(KEY, result())
    os.unlink(cas.path(D1, executable=True))
    assert cas.has(D1)
    assert ac.lookup(KEY, cas) is None


def test_lookup_misses_when_stdout_is_missing(ac: ActionCache, cas: ContentStore) -> None:
    store_all(cas)
    ac.put(KEY, result(stdout_digest=digest_bytes(b"some log")))
    assert ac.lookup(KEY, cas) is None


def test_lookup_misses_when_a_blob_has_the_wrong_size(ac: ActionCache, cas: ContentStore) -> None:
    store_all(cas)
    ac.put(KEY, result())
    blob = cas.path(D2)
    blob.chmod(0o644)
    blob.write_bytes(b"two and more")
    assert ac.lookup(KEY, cas) is None


def test_lookup_of_a_result_naming_no_blobs_hits(ac: ActionCache, cas: ContentStore) -> None:
    empty = ActionResult(output_files=())
    ac.put(KEY, empty)
    assert ac.lookup(KEY, cas) == empty


def test_digests_lists_every_blob_a_result_names() -> None:
    assert result().digests() == [(D1, True), (D2, False), (digest_bytes(b""), False)]
    assert isinstance(result().digests()[0][0], Digest)
