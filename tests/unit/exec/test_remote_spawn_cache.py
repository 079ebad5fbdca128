"""RemoteSpawnCache: which remote results are used, and one warning per unusable remote."""

from __future__ import annotations

import collections
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import pytest
from kiln.action_graph import Action, File
from kiln.cache import cas as cas_module
from kiln.cache.action_cache import ActionCache, ActionResult, OutputFile
from kiln.cache.cas import ContentStore
from kiln.cache.digest import Digest, digest_bytes
from kiln.cache.remote import RemoteError
from kiln.exec.remote_spawn_cache import RemoteSpawnCache

T = TypeVar("T")
KEY = "ab" * 32
BLOB = b"model bytes"


class FakeRemote:
    """RemoteCache's surface, from a dict; `error` makes every call fail."""

    url = "http://cache.test"

    def __init__(self, result: ActionResult | None = None, error: str = "") -> None:
        self.result = result
        self.error = error
        self.calls: list[str] = []
        self.entries: dict[str, ActionResult] = {}

    def _call(self, name: str) -> None:
        self.calls.append(name)
        if self.error:
            raise RemoteError(self.error)

    def get_action_result(self, key: str) -> ActionResult | None:
        self._call("get")
        return self.result

    def put_action_result(self, key: str, result: ActionResult) -> None:
        self._call("put")
        self.entries[key] = result

    def find_missing(self, digests: Any) -> list[Digest]:
        self._call("find_missing")
        return list(digests)

    def download(self, digest: Digest, cas: ContentStore, executable: bool = False) -> None:
        self._call("download")
        cas.put_stream(digest, _reader(BLOB), executable)

    def upload(self, digest: Digest, cas: ContentStore, executable: bool = False) -> None:
        self._call("upload")

    def transfer_many(self, calls: Sequence[Callable[[], T]]) -> list[T]:
        return [call() for call in calls]

    def close(self) -> None:
        pass


def _reader(data: bytes) -> Callable[[memoryview], int]:
    view = memoryview(data)

    def readinto(buffer: memoryview) -> int:
        nonlocal view
        n = min(len(buffer), len(view))
        buffer[:n] = view[:n]
        view = view[n:]
        return n

    return readinto


def _action(*outputs: File) -> Action:
    return Action("//m:x", "Gen", ("true",), (), outputs)


def _spawn_cache(tmp_path: Path, remote: FakeRemote) -> tuple[RemoteSpawnCache, list[str]]:
    warnings: list[str] = []
    cache = RemoteSpawnCache(
        remote,  # type: ignore[arg-type]
        ContentStore(tmp_path),
        ActionCache(tmp_path),
        warn=warnings.append,
    )
    return cache, warnings


def test_a_hit_downloads_the_blobs_and_stores_the_result_locally(tmp_path: Path) -> None:
    result = ActionResult((OutputFile("kiln-out/m/x.bin", digest_bytes(BLOB)),))
    cache, warnings = _spawn_cache(tmp_path, FakeRemote(result))
    found, status = cache.lookup(_action(File("kiln-out/m/x.bin")), KEY)
    assert (found, status, warnings) == (result, "hit", [])
    assert ActionCache(tmp_path).lookup(KEY, ContentStore(tmp_path)) == result


def test_files_under_a_declared_directory_output_are_accepted(tmp_path: Path) -> None:
    result = ActionResult((OutputFile("kiln-out/m/dir/a/b.bin", digest_bytes(BLOB)),))
    cache, _ = _spawn_cache(tmp_path, FakeRemote(result))
    action = _action(File("kiln-out/m/dir", directory=True))
    assert cache.lookup(action, KEY)[1] == "hit"


@pytest.mark.parametrize(
    ("paths", "problem"),
    [
        (["kiln-out/m/other.bin"], "names an output the action does not declare"),
        (["kiln-out/m/dirx/a"], "names an output the action does not declare"),
        ([], "lacks declared output 'kiln-out/m/x.bin'"),
    ],
)
def test_a_result_for_other_outputs_is_refused(
    tmp_path: Path, paths: list[str], problem: str
) -> None:
    result = ActionResult(tuple(OutputFile(p, digest_bytes(BLOB)) for p in paths))
    remote = FakeRemote(result)
    cache, warnings = _spawn_cache(tmp_path, remote)
    action = _action(File("kiln-out/m/x.bin"), File("kiln-out/m/dir", directory=True))
    assert cache.lookup(action, KEY) == (None, "miss")
    assert problem in warnings[0]
    assert "download" not in remote.calls


def test_an_unusable_remote_warns_once_and_is_not_asked_again(tmp_path: Path) -> None:
    remote = FakeRemote(error="GET http://cache.test/ac/x: HTTP 503 Service Unavailable")
    cache, warnings = _spawn_cache(tmp_path, remote)
    action = _action(File("kiln-out/m/x.bin"))
    assert cache.lookup(action, KEY) == (None, "")
    assert cache.lookup(action, KEY) == (None, "")
    cache.upload(KEY)
    assert remote.calls == ["get"]
    assert warnings == [
        "remote cache http://cache.test is unusable: GET http://cache.test/ac/x: HTTP 503 "
        "Service Unavailable; building locally without it for the rest of this build"
    ]


def test_upload_sends_missing_blobs_then_the_entry(tmp_path: Path) -> None:
    remote = FakeRemote()
    cache, _ = _spawn_cache(tmp_path, remote)
    cas = ContentStore(tmp_path)
    result = ActionResult((OutputFile("kiln-out/m/x.bin", cas.put_bytes(BLOB)),))
    ActionCache(tmp_path).put(KEY, result)
    cache.upload(KEY)
    assert remote.calls == ["find_missing", "upload", "put"]
    assert remote.entries == {KEY: result}


def test_nothing_is_asked_or_sent_when_the_flags_say_so(tmp_path: Path) -> None:
    remote = FakeRemote()
    cache, _ = _spawn_cache(tmp_path, remote)
    cache.accept_cached = cache.upload_local_results = False
    ActionCache(tmp_path).put(KEY, ActionResult(()))
    assert cache.lookup(_action(File("kiln-out/m/x.bin")), KEY) == (None, "")
    cache.upload(KEY)
    assert remote.calls == []


def test_a_result_larger_than_the_disk_can_spare_is_not_downloaded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 11 A5: a remote claiming a 10 GB output filled a small disk; the claim is
    weighed against the free space before anything is downloaded."""
    Usage = collections.namedtuple("Usage", "total used free")
    monkeypatch.setattr(cas_module, "_disk_usage", lambda _p: Usage(8 << 30, 0, 3 << 30))
    claimed = Digest("ab" * 32, 10 << 30)
    remote = FakeRemote(ActionResult((OutputFile("kiln-out/m/x.bin", claimed),)))
    cache, warnings = _spawn_cache(tmp_path, remote)
    assert cache.lookup(_action(File("kiln-out/m/x.bin")), KEY) == (None, "miss")
    assert "download" not in remote.calls
    assert warnings == [
        "Gen //m:x: not downloaded: the remote cache's result needs 10.0 GiB, and the disk "
        f"cache's file system ({tmp_path / 'cas'}) can spare 2.2 GiB; building locally"
    ]
    assert not cache.failed  # the remote stays in use for other actions
