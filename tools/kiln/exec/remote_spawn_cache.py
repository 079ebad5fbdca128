"""The remote cache in the executor's hands: look a result up before running, upload after.

What Bazel's RemoteSpawnCache does, over a RemoteStore (cache/remote_store.py):

    lookup  (a local action-cache miss)  GET /ac/<key>; the result must name the
            action's declared outputs and nothing else (so every path is relative
            and inside kiln-out/); blobs the local CAS lacks are downloaded in
            parallel, each verified against its digest; then the result goes into
            the local action cache, so the next build is a disk hit.
    upload  (after a local run)          HEAD the result's blobs, PUT the missing
            ones in parallel, then PUT the entry: last, so an entry never names
            a blob the server lacks. Every blob is verified locally first
            (ContentStore.check): nothing is uploaded for a result whose blob
            is damaged or gone.

A remote never fails a build. One that is down, slow (--remote_timeout,
--remote_min_rate: remote.py), refusing (401) or answering 5xx gets one
warning for the whole build and is not asked again until the next build. A
result whose blobs (by the sizes the remote claims) would not fit what the
disk cache's file system can spare is not downloaded: a warning, and the
action runs here. An entry kiln cannot use, or a blob that does not
match its digest (tampered, truncated, missing), gets a warning naming the
action, which then runs locally; its result overwrites the bad one.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from typing import Literal

from kiln.action_graph import Action
from kiln.cache.action_cache import ActionCache, ActionResult
from kiln.cache.cas import BlobMismatch, ContentStore, NoRoom
from kiln.cache.digest import Digest
from kiln.cache.remote_store import RemoteError, RemoteStore

# hit: served from the remote; miss: asked, not there (or unusable); "": not asked.
RemoteStatus = Literal["hit", "miss", ""]


class RemoteSpawnCache:
    def __init__(
        self,
        remote: RemoteStore,
        cas: ContentStore,
        action_cache: ActionCache,
        *,
        accept_cached: bool = True,
        upload_local_results: bool = True,
        warn: Callable[[str], None],
    ) -> None:
        self.remote = remote
        self.cas = cas
        self.action_cache = action_cache
        self.accept_cached = accept_cached
        self.upload_local_results = upload_local_results
        self._warn = warn
        self._lock = threading.Lock()
        self.failed = False  # the remote was found unusable: not used again in this build

    def lookup(self, action: Action, key: str) -> tuple[ActionResult | None, RemoteStatus]:
        """The remote's result for key with every blob now in the local CAS, or None."""
        if not self.accept_cached or self.failed:
            return None, ""
        try:
            result = self.remote.get_action_result(key)
        except ValueError as e:
            self._warn(f"{action.describe()}: unusable remote cache entry ({e}); building locally")
            return None, "miss"
        except RemoteError as e:
            self._fail(e)
            return None, ""
        if result is None:
            return None, "miss"
        problem = _outputs_problem(action, result)
        if problem:
            self._warn(f"{action.describe()}: remote cache entry {problem}; building locally")
            return None, "miss"
        try:
            self._fetch_blobs(result)
        except BlobMismatch as e:
            self._warn(
                f"{action.describe()}: rejected a blob from the remote cache ({e.message}); "
                "building locally"
            )
            return None, "miss"
        except NoRoom as e:
            self._warn(f"{action.describe()}: not downloaded: {e.message}; building locally")
            return None, "miss"
        except RemoteError as e:
            self._fail(e)
            return None, ""
        self.action_cache.put(key, result)
        return result, "hit"

    def upload(self, key: str) -> None:
        """Send the local result for key, and the blobs the server lacks."""
        if not self.upload_local_results or self.failed:
            return
        result = self.action_cache.get(key)
        if result is None or not all(self.cas.intact(d, x) for d, x in result.digests()):
            return
        variant: dict[Digest, bool] = {}
        for digest, executable in result.digests():
            variant.setdefault(digest, executable)
        remote = self.remote
        try:
            missing = remote.find_missing(variant)
            remote.transfer_many(
                [functools.partial(remote.upload, d, self.cas, variant[d]) for d in missing]
            )
            remote.put_action_result(key, result)
        except RemoteError as e:
            self._fail(e)

    def close(self) -> None:
        self.remote.close()

    def _fetch_blobs(self, result: ActionResult) -> None:
        wanted = [(d, x) for d, x in dict.fromkeys(result.digests()) if not self.cas.intact(d, x)]
        downloads: list[tuple[Digest, bool]] = []
        for digest, executable in wanted:
            if self.cas.intact(digest, not executable):  # the other variant: a local copy
                self.cas.put_file(self.cas.path(digest, not executable), digest, executable)
            else:
                downloads.append((digest, executable))
        # The sizes are the remote's claims: they must fit what the disk can spare first.
        self.cas.check_room(sum(d.size for d, _ in downloads), "the remote cache's result")
        self.remote.transfer_many(
            [functools.partial(self.remote.download, d, self.cas, x) for d, x in downloads]
        )

    def _fail(self, error: RemoteError) -> None:
        with self._lock:
            if self.failed:
                return
            self.failed = True
        self._warn(
            f"remote cache {self.remote.url} is unusable: {error.message}; "
            "building locally without it for the rest of this build"
        )


def _outputs_problem(action: Action, result: ActionResult) -> str:
    """Why result cannot be this action's (names an undeclared output, lacks one), or ''."""
    files = {f.path for f in action.outputs if not f.directory}
    directories = [f.path + "/" for f in action.outputs if f.directory]
    paths = {f.path for f in result.output_files}
    for path in sorted(paths):
        if path not in files and not any(path.startswith(d) for d in directories):
            return f"names an output the action does not declare: {path!r}"
    lacking = sorted(files - paths)
    if lacking:
        return f"lacks declared output {lacking[0]!r}"
    return ""
