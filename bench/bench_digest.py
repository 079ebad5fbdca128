"""Digest and CAS throughput on a fresh file (1 GiB by default).

    .venv/bin/python bench/bench_digest.py [--size-mib 1024] [--repeat 3] [--dir /tmp]

Prints GB/s (10^9 bytes per second) for kiln.cache.digest.digest_file with
sha256 and blake3 next to coreutils `sha256sum` on the same file, then the
time to store the file in a ContentStore (a copy of a writable file, hashed,
and fsynced: the disk's write speed shows here) and to materialize the blob (a
hard link into an existing directory; "already there" is the no-op rebuild).
The file is freshly written, so it is in the page cache: this measures
hashing, not the disk. Best and median of --repeat runs.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

from kiln.cache.cas import ContentStore
from kiln.cache.digest import digest_file

CHUNK = 64 << 20


def write_random(path: Path, size: int) -> None:
    with open(path, "wb") as f:
        left = size
        while left:
            n = min(CHUNK, left)
            f.write(os.urandom(n))
            left -= n


def timed(repeat: int, run: Callable[[], object]) -> list[float]:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return times


def rate(size: int, times: list[float]) -> str:
    best, median = min(times), statistics.median(times)
    return f"{size / best / 1e9:6.2f} GB/s best  {size / median / 1e9:6.2f} GB/s median"


def millis(times: list[float]) -> str:
    return f"{min(times) * 1e3:8.2f} ms best  {statistics.median(times) * 1e3:8.2f} ms median"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mib", type=int, default=1024)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--dir", type=Path, default=None, help="where the test file goes")
    args = parser.parse_args()
    size = args.size_mib << 20

    with tempfile.TemporaryDirectory(dir=args.dir, prefix="kiln-bench-") as tmp:
        work = Path(tmp)
        src = work / "weights.bin"
        write_random(src, size)
        os.sync()  # else the file's own writeback competes with what is measured
        load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
        print(f"file: {size / 2**30:.2f} GiB of random bytes in {work}")
        print(f"machine: {os.cpu_count()} CPUs, load average {load} before the runs")

        results = {}
        for function in ("sha256", "blake3"):
            expected = digest_file(src, function)  # also warms up imports and caches
            times = timed(args.repeat, partial(digest_file, src, function))
            results[function] = expected
            print(f"digest_file {function:<8} {rate(size, times)}")
        sha256sum = shutil.which("sha256sum")
        if sha256sum:
            out = subprocess.run([sha256sum, src], capture_output=True, check=True).stdout
            assert out.split()[0].decode() == results["sha256"].hash, "sha256sum disagrees"
            command = [sha256sum, str(src)]

            def run_sha256sum() -> None:
                subprocess.run(command, check=True, stdout=subprocess.DEVNULL)

            times = timed(args.repeat, run_sha256sum)
            print(f"sha256sum            {rate(size, times)}")

        for function in ("sha256", "blake3"):
            cas = ContentStore(work / f"cache-{function}", function)
            os.sync()
            copy = timed(1, partial(cas.put_file, src))
            digest = results[function]
            print(f"CAS put_file {function:<7} (copy + hash)      {millis(copy)}")
            cas_path = cas.path(digest)
            out_dir = work / "out" / function
            out_dir.mkdir(parents=True)  # as kiln-out/<package> usually already is
            times = []
            for i in range(args.repeat):
                dest = out_dir / f"{i}.bin"
                start = time.perf_counter()
                cas.materialize(digest, dest)
                times.append(time.perf_counter() - start)
                assert os.stat(dest).st_ino == os.stat(cas_path).st_ino
            print(f"CAS materialize {function:<7} (hard link)     {millis(times)}")
            dest = out_dir / "0.bin"
            again = timed(args.repeat, partial(cas.materialize, digest, dest))
            print(f"CAS materialize {function:<7} (already there) {millis(again)}")


if __name__ == "__main__":
    main()
