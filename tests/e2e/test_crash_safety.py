"""kiln killed with SIGKILL at random moments never leaves a corrupt cache or a partial output."""

from __future__ import annotations

import hashlib
import json
import random
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.e2e.harness import KILN, Workspace

PACKAGES = 6


def _workspace(ws: Workspace) -> None:
    for p in range(PACKAGES):
        dep = f'"//p{p - 1}:big{p - 1}", ' if p else ""
        ws.write(
            f"p{p}/BUILD",
            f"""
            genrule(
                name = "big{p}",
                visibility = ["//p{p + 1}:__pkg__"],  # the next package builds on it
                srcs = [{dep}"seed.txt"],
                outs = ["big{p}.bin"],
                # a few MB, so kills land inside writes too
                cmd = "for i in $$(seq 1 2000); do cat $(SRCS); done > $@; truncate -s 3000000 $@",
            )
            genrule(name = "small{p}", srcs = [":big{p}"], outs = ["small{p}.txt"],
                    cmd = "sha256sum $< > $@")
            """,
        )
        ws.write(f"p{p}/seed.txt", f"seed {p}\n")


def _check_store(cache: Path) -> None:
    """Every blob matches its name; every action-cache entry is whole JSON."""
    for blob in (cache / "cas").rglob("*"):
        if blob.is_file() and not blob.name.startswith("."):
            digest = hashlib.sha256(blob.read_bytes()).hexdigest()
            assert blob.name.removesuffix(".x") == digest, f"corrupt blob {blob}"
    for entry in (cache / "ac").rglob("*"):
        if entry.is_file() and not entry.name.startswith("."):
            json.loads(entry.read_bytes())


def _check_outputs(root: Path, cache: Path) -> None:
    """Every visible output is a whole blob of the cache (never a partial file)."""
    out = root / "kiln-out"
    if not out.exists():
        return
    for path in out.rglob("*"):
        if path.is_file():
            digest = hashlib.sha256(path.read_bytes()).hexdigest()
            assert (cache / "cas" / digest[:2] / digest).exists(), f"partial output {path}"


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_sigkill_at_random_moments_never_corrupts(ws: Workspace, tmp_path: Path) -> None:
    _workspace(ws)
    cache = tmp_path / "cache" / "kiln"
    rng = random.Random(1234)
    for trial in range(50):
        # Change a seed so that some actions really execute in this trial.
        p = rng.randrange(PACKAGES)
        ws.write(f"p{p}/seed.txt", f"seed {p} trial {trial}\n")
        process = ws.kiln_process("build", "//...", "--jobs=2")
        time.sleep(rng.uniform(0.0, 2.0))
        process.send_signal(signal.SIGKILL)
        process.communicate()
        _check_store(cache)
        _check_outputs(ws.root, cache)

    final = subprocess.run(
        [*KILN, "build", "//..."],
        cwd=ws.root,
        env=ws.env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert final.returncode == 0, final.stderr
    _check_store(cache)

    # The same sources built from scratch in a fresh clone with a fresh cache.
    clone = tmp_path / "clone"
    shutil.copytree(ws.root, clone, ignore=shutil.ignore_patterns("kiln-out"))
    env = dict(ws.env, XDG_CACHE_HOME=str(tmp_path / "fresh-cache"))
    fresh = subprocess.run(
        [*KILN, "build", "//..."], cwd=clone, env=env, capture_output=True, text=True, check=False
    )
    assert fresh.returncode == 0, fresh.stderr
    for path in (clone / "kiln-out").rglob("*"):
        if path.is_file():
            mine = ws.root / "kiln-out" / path.relative_to(clone / "kiln-out")
            assert mine.read_bytes() == path.read_bytes(), f"wrong output {mine}"


def test_ctrl_c_stops_the_build_with_exit_8_and_one_line(ws: Workspace, tmp_path: Path) -> None:
    ws.write(
        "app/BUILD", 'genrule(name = "slow", outs = ["slow.out"], cmd = "sleep 60; touch $@")\n'
    )
    process = ws.kiln_process("build", "//app:slow")
    try:
        deadline = time.monotonic() + 30
        while not list((tmp_path / "cache").rglob("execroot/*/kiln-out")):  # the action runs
            assert time.monotonic() < deadline, "the action never started"
            assert process.poll() is None, process.communicate()
            time.sleep(0.05)
        time.sleep(0.2)
        process.send_signal(signal.SIGINT)
        _, err = process.communicate(timeout=10)  # the sleep was killed, not waited for
    finally:
        process.kill()
    assert process.returncode == 8, err
    assert err.rstrip().endswith("kiln: interrupted")
    assert "Traceback" not in err and "INTERNAL ERROR" not in err
    assert not (ws.root / "kiln-out/app/slow.out").exists()
