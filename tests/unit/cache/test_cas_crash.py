"""A process killed at any moment while writing leaves only whole blobs."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from kiln.cache.cas import ContentStore
from kiln.cache.digest import Digest
from kiln.cache.gc import collect

WRITER = """
import os, sys
from pathlib import Path
from kiln.cache.cas import ContentStore

cas = ContentStore(Path(sys.argv[1]))
src = Path(sys.argv[2])
size = int(sys.argv[3])
print("ready", flush=True)
i = 0
while True:
    data = os.urandom(size)
    src.unlink(missing_ok=True)
    src.write_bytes(data)
    if i % 2:
        src.chmod(0o444)  # a finished output: stored by hard link
    cas.put_file(src)
    cas.put_bytes(data[: size // 8])
    i += 1
"""


def blobs(root: Path) -> list[Path]:
    return [p for p in (root / "cas").glob("??/*") if not p.name.startswith(".tmp.")]


@pytest.mark.slow
def test_sigkill_during_writes_leaves_only_whole_blobs(tmp_path: Path) -> None:
    root = tmp_path / "cache"
    cas = ContentStore(root)
    seed = random.randrange(2**32)
    rng = random.Random(seed)
    for round_ in range(6):
        size = rng.choice([4, 16, 32]) << 20
        child = subprocess.Popen(
            [sys.executable, "-c", WRITER, str(root), str(tmp_path / f"src{round_}"), str(size)],
            stdout=subprocess.PIPE,
        )
        assert child.stdout is not None
        assert child.stdout.readline() == b"ready\n"
        time.sleep(rng.uniform(0.0, 0.8))
        child.send_signal(signal.SIGKILL)
        child.wait()
        child.stdout.close()
        for blob in blobs(root):
            digest = Digest(blob.name.removesuffix(".x"), blob.stat().st_size)
            executable = blob.name.endswith(".x")
            assert cas.has(digest, executable), f"seed {seed}: {blob}"
            assert cas.verify(digest, executable), f"seed {seed}: torn blob {blob}"
    assert blobs(root), f"seed {seed}: the writer never finished a blob"
    # Whatever temps the kills left are GC's to remove once past the grace period.
    report = collect(root, max_bytes=2**62, grace_seconds=0)
    assert report.blobs_removed == 0
    assert list((root / "cas").rglob(".tmp.*")) == []
    assert all(os.access(b, os.R_OK) for b in blobs(root))
