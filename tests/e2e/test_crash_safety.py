"""kiln killed with SIGKILL at random moments never leaves a corrupt cache or a partial output.

The soak of issue 11 (deliverable 10): TRIALS kills (200; KILN_SOAK_TRIALS
sets another number for a longer run), each at a random moment of a build
that has real work to do, spread over the whole build (loading, execution,
CAS writes, placing outputs, saving state) because its duration is measured
first and followed after (a build that ends before its kill counts for
nothing and shortens the next window). Every trial checks every blob and
action-cache entry that is new since the last check, and every file in
kiln-out/. The count of trials and their time are in README.md ("Robustness").
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.kiln_workspace import KILN, Workspace

PACKAGES = 6
TRIALS = int(os.environ.get("KILN_SOAK_TRIALS", "200"))


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
                # 3 MB, made in milliseconds: kills land in kiln's own writes too
                cmd = "(cat $(SRCS); head -c 3000000 /dev/zero) > $@",
            )
            genrule(name = "small{p}", srcs = [":big{p}"], outs = ["small{p}.txt"],
                    cmd = "sha256sum $< > $@")
            """,
        )
        ws.write(f"p{p}/seed.txt", f"seed {p}\n")


class _Store:
    """Checks of the disk cache, each blob and entry once (while its stat stays the same)."""

    def __init__(self, cache: Path):
        self.cache = cache
        self.checked: set[tuple[str, int, int, int]] = set()

    def check(self) -> None:
        """Every blob matches its name; every action-cache entry is whole JSON."""
        for kind in ("cas", "ac"):
            for path in (self.cache / kind).rglob("*"):
                if not path.is_file() or path.name.startswith("."):
                    continue
                st = path.stat()
                seen = (str(path), st.st_ino, st.st_size, st.st_mtime_ns)
                if seen in self.checked:
                    continue
                data = path.read_bytes()
                if kind == "cas":
                    digest = hashlib.sha256(data).hexdigest()
                    assert path.name.removesuffix(".x") == digest, f"corrupt blob {path}"
                else:
                    json.loads(data)
                self.checked.add(seen)


def _check_outputs(root: Path, cache: Path, digests: dict[tuple[int, ...], str]) -> None:
    """Every visible output is a whole blob of the cache (never a partial file).

    `digests` remembers each file's hash by its stat data (inode, size, times): most
    outputs stay from one trial to the next (up to 18 MB each), and are hashed once."""
    out = root / "kiln-out"
    if not out.exists():
        return
    for path in out.rglob("*"):
        if path.is_file():
            st = path.stat()
            seen = (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
            if seen not in digests:
                digests[seen] = hashlib.sha256(path.read_bytes()).hexdigest()
            digest = digests[seen]
            assert (cache / "cas" / digest[:2] / digest).exists(), f"partial output {path}"


def _build(ws: Workspace, root: Path | None = None, env: dict[str, str] | None = None) -> None:
    run = subprocess.run(
        [*KILN, "build", "//...", "--jobs=2"],
        cwd=root or ws.root,
        env=env or ws.env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert run.returncode == 0, run.stderr


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_sigkill_at_random_moments_never_corrupts(ws: Workspace, tmp_path: Path) -> None:
    _workspace(ws)
    cache = ws.disk_cache
    store = _Store(cache)
    digests: dict[tuple[int, ...], str] = {}
    rng = random.Random(1234)
    _build(ws)
    # How long a trial's build takes to the end: kills are spread over all of it.
    started = time.monotonic()
    ws.write("p0/seed.txt", "seed 0 measured\n")  # all six packages build again
    _build(ws)
    duration = time.monotonic() - started
    # The kill's moment is drawn from [0, window x the share of the chain that runs]. The
    # window follows the builds' real length, which the machine's load changes from one
    # minute to the next: shorter after a build that ended before its kill, longer again
    # after one that did not. A fixed window let 115 of 200 kills land in a loaded run.
    window = duration
    killed = attempts = 0
    while killed < TRIALS:
        attempts += 1
        assert attempts <= 3 * TRIALS, f"{killed} of {attempts - 1} kills landed before the end"
        # Change a seed so that some actions really execute in this trial: those of
        # package p and the ones after it, the share of the chain the kill is spread over.
        p = rng.randrange(PACKAGES)
        ws.write(f"p{p}/seed.txt", f"seed {p} attempt {attempts}\n")
        process = ws.kiln_process("build", "//...", "--jobs=2")
        try:
            process.wait(timeout=rng.uniform(0.0, window * (PACKAGES - p) / PACKAGES))
        except subprocess.TimeoutExpired:
            process.send_signal(signal.SIGKILL)
        process.communicate()
        if process.returncode == -signal.SIGKILL:
            killed += 1
            window = min(window * 1.05, 2 * duration)
        else:
            assert process.returncode == 0, f"attempt {attempts}: exit {process.returncode}"
            window *= 0.8
        store.check()
        _check_outputs(ws.root, cache, digests)
    with ws.capsys.disabled():  # shown with -s
        print(f"\nsoak: {killed} builds killed with SIGKILL before their end, of {attempts}")

    _build(ws)
    store.check()

    # The same sources built from scratch in a fresh clone with a fresh cache.
    clone = ws.copy("clone").root
    _build(ws, clone, dict(ws.env, XDG_CACHE_HOME=str(tmp_path / "fresh-cache")))
    for path in (clone / "kiln-out").rglob("*"):
        if path.is_file():
            mine = ws.root / "kiln-out" / path.relative_to(clone / "kiln-out")
            assert mine.read_bytes() == path.read_bytes(), f"wrong output {mine}"


@pytest.fixture
def default_sigint() -> Iterator[tuple[object, bool]]:
    """SIGINT as a terminal's Ctrl-C finds a fresh process: unblocked, Python's handler.

    These tests failed in the full suite, never alone: the test process had SIGINT in
    a state (ignored or blocked, left by earlier work in it) that kiln's child process
    inherits, so it never saw the signal. Yields what it found, for the messages."""
    handler = signal.getsignal(signal.SIGINT)
    mask = signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield handler, signal.SIGINT in mask
    finally:
        signal.signal(signal.SIGINT, handler)
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)


def test_ctrl_c_stops_the_build_with_exit_8_and_one_line(
    ws: Workspace, tmp_path: Path, default_sigint: tuple[object, bool]
) -> None:
    ws.write(
        "app/BUILD",
        'genrule(name = "slow", outs = ["slow.out"], cmd = "touch started; sleep 60; touch $@")\n',
    )
    process = ws.kiln_process("build", "//app:slow")
    try:
        deadline = time.monotonic() + 60
        # The command runs (it wrote its marker in its execroot): a loaded machine may take
        # seconds to get there.
        while not list(Path(ws.env["XDG_CACHE_HOME"]).rglob("execroot/*/started")):
            assert time.monotonic() < deadline, "the action never started"
            assert process.poll() is None, process.communicate()
            time.sleep(0.05)
        process.send_signal(signal.SIGINT)
        try:  # the sleep (60 s) was killed, not waited for
            _, err = process.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            pytest.fail(f"kiln went on 30 s after SIGINT (the test's SIGINT: {default_sigint})")
    finally:
        process.kill()
    assert process.returncode == 8, (default_sigint, err)
    assert err.rstrip().endswith("kiln: interrupted")
    assert "Traceback" not in err and "INTERNAL ERROR" not in err
    assert not (ws.root / "kiln-out/app/slow.out").exists()


def test_ctrl_c_before_the_first_action_has_a_spawner_starts_no_command(
    ws: Workspace, monkeypatch: pytest.MonkeyPatch, default_sigint: tuple[object, bool]
) -> None:
    """A Ctrl-C handled after the first action's execroot was made but before its spawner
    (and the sandbox's first host, which takes a while on a loaded machine) existed found
    no spawner to cancel: the action then ran to its end (60 s here)."""
    from kiln.exec.executor import Executor
    from kiln.exec.strategies import LocalStrategy

    handled: list[Executor] = []
    interrupt, spawner_for = Executor.interrupt, LocalStrategy.spawner

    def interrupt_and_tell(self: Executor) -> None:
        interrupt(self)
        handled.append(self)

    def spawner_after_ctrl_c(self: LocalStrategy, *args: Any, **kwargs: Any) -> Any:
        signal.pthread_kill(threading.main_thread().ident or 0, signal.SIGINT)
        deadline = time.monotonic() + 20
        while not handled and time.monotonic() < deadline:
            time.sleep(0.01)
        return spawner_for(self, *args, **kwargs)

    monkeypatch.setattr(Executor, "interrupt", interrupt_and_tell)
    monkeypatch.setattr(LocalStrategy, "spawner", spawner_after_ctrl_c)
    ws.write("app/BUILD", 'genrule(name = "slow", outs = ["slow.out"], cmd = "sleep 60")\n')
    began = time.monotonic()
    run = ws.kiln("build", "//app:slow", "--sandbox")
    assert run.code == 8, run.err
    assert run.err.rstrip().endswith("kiln: interrupted")
    assert handled, f"the Ctrl-C was never handled (the test's SIGINT: {default_sigint})"
    assert time.monotonic() - began < 30  # the sleep (60 s) never started
