"""An action run by a worker gives what the same argv gives as a plain subprocess."""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
from dataclasses import dataclass, replace
from pathlib import Path

import pytest
from kiln.workers import WorkerPool, WorkRequest
from worker_helpers import Execroot, MakeExecroot, action_env


@dataclass(frozen=True)
class Result:
    exit_code: int
    stdout: bytes
    stderr: bytes
    files: dict[str, str]  # path under the execroot -> sha256 of its content


def run_subprocess(request: WorkRequest) -> Result:
    with open(request.stdout_path, "wb") as out, open(request.stderr_path, "ab") as err:
        shared = request.stderr_path == request.stdout_path
        done = subprocess.run(
            request.argv,
            env=request.env,
            cwd=request.cwd,
            stdout=out,
            stderr=subprocess.STDOUT if shared else err,
            check=False,
        )
    return collect(request, done.returncode)


def run_worker(pool: WorkerPool, request: WorkRequest) -> Result:
    response = pool.run(request)
    assert not response.crashed, response.message
    return collect(request, response.exit_code)


def collect(request: WorkRequest, exit_code: int) -> Result:
    root = Path(request.cwd)
    files = {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }
    result = Result(
        exit_code,
        Path(request.stdout_path).read_bytes(),
        Path(request.stderr_path).read_bytes(),
        files,
    )
    # Back to the execroot as it was given, so that the other run starts from the same tree.
    Path(request.stderr_path).write_bytes(b"")
    for path in root.iterdir():
        if path.name not in {"kiln_test_action.py", "helper.py"}:
            shutil.rmtree(path) if path.is_dir() else path.unlink()
    return result


def both_ways(pool: WorkerPool, root: Execroot, *args: str, **env: str) -> tuple[Result, Result]:
    # Bytecode is written here (no PYTHONDONTWRITEBYTECODE): the .pyc files must match too.
    request = root.request(*args, env=action_env(KILN_GREETING="grüezi", **env))
    return run_subprocess(request), run_worker(pool, request)


def test_worker_run_matches_a_subprocess_run(pool: WorkerPool, make_execroot: MakeExecroot) -> None:
    root = make_execroot(
        """
        import ctypes, os, sys, warnings
        import helper
        print("argv", sys.argv[1:], "greeting", os.environ["KILN_GREETING"])
        os.write(1, b"raw bytes before the buffered print\\n")
        ctypes.CDLL(None).printf(b"printf from C\\n")
        print("to stderr", file=sys.stderr)
        warnings.warn("deprecated thing", DeprecationWarning)
        warnings.warn("careful")
        os.makedirs("kiln-out/pkg", exist_ok=True)
        with open("kiln-out/pkg/artifact.bin", "wb") as f:
            f.write(helper.payload())
        print("x" * 10000)  # more than one buffer: interleaves with the raw write below
        os.write(1, b"raw bytes after\\n")
        print("unicode: \\u00e9\\u4e2d", "\\udcff".encode("utf-8", "surrogateescape"))
        sys.exit(3)
        """,
        helper="def payload():\n    return bytes(range(256)) * 4\n",
    )
    plain, worker = both_ways(pool, root, "first", "--flag=2")
    assert worker == plain
    assert plain.exit_code == 3
    assert "kiln-out/pkg/artifact.bin" in plain.files
    assert "__pycache__/helper.cpython-311.pyc".replace("311", _tag()) in plain.files
    # Twice in the same worker gives the same again.
    assert both_ways(pool, root, "first", "--flag=2") == (plain, plain)


@pytest.mark.parametrize("shared_file", [False, True], ids=["separate", "2>&1"])
@pytest.mark.parametrize("unbuffered", [False, True], ids=["buffered", "PYTHONUNBUFFERED"])
@pytest.mark.parametrize(
    "ending", ["pass", "sys.exit(3)", "sys.exit('bad input')", "raise KeyError('k')"]
)
def test_order_of_python_c_and_raw_output_matches_a_subprocess_run(
    pool: WorkerPool, make_execroot: MakeExecroot, ending: str, unbuffered: bool, shared_file: bool
) -> None:
    root = make_execroot(f"""
        import ctypes, os, sys
        print("python stdout")
        print("python stderr", file=sys.stderr)
        ctypes.CDLL(None).printf(b"C stdout\\n")
        os.write(1, b"raw stdout\\n")
        {ending}
    """)
    env = action_env(**({"PYTHONUNBUFFERED": "1"} if unbuffered else {}))
    request = root.request(env=env)
    if shared_file:
        request = WorkRequest(
            request.argv, request.env, request.cwd, request.stdout_path, request.stdout_path
        )
    plain = run_subprocess(request)
    worker = run_worker(pool, request)
    if ending.startswith("raise"):  # the two `<frozen runpy>` frames only a plain run shows
        plain = replace(plain, stdout=without_runpy_frames(plain.stdout))
        plain = replace(plain, stderr=without_runpy_frames(plain.stderr))
    assert worker == plain


def without_runpy_frames(text: bytes) -> bytes:
    lines = text.splitlines(keepends=True)
    return b"".join(line for line in lines if not line.startswith(b'  File "<frozen runpy>"'))


def test_failing_action_matches_a_subprocess_run_but_for_the_runpy_frames(
    pool: WorkerPool, make_execroot: MakeExecroot
) -> None:
    root = make_execroot("""
        print("partial output")
        raise RuntimeError("the model does not export")
    """)
    plain, worker = both_ways(pool, root)
    runpy_frames = [
        line
        for line in plain.stderr.decode().splitlines(keepends=True)
        if line.startswith('  File "<frozen runpy>"')
    ]
    assert len(runpy_frames) == 2
    expected = plain.stderr.decode()
    for line in runpy_frames:
        expected = expected.replace(line, "", 1)
    assert (worker.exit_code, worker.stdout, worker.stderr.decode(), worker.files) == (
        plain.exit_code,
        plain.stdout,
        expected,
        plain.files,
    )


def test_missing_module_matches_a_subprocess_run(
    pool: WorkerPool, make_execroot: MakeExecroot
) -> None:
    root = make_execroot("")
    request = root.request(module="kiln_no_such_action")
    assert run_worker(pool, request) == run_subprocess(request)


def test_forked_child_that_returns_from_the_action_matches_a_subprocess_run(
    pool: WorkerPool, make_execroot: MakeExecroot
) -> None:
    root = make_execroot("""
        import os
        pid = os.fork()
        if pid == 0:
            print("child")
        else:
            os.waitpid(pid, 0)
            print("parent")
    """)
    plain, worker = both_ways(pool, root)
    assert worker == plain
    assert plain.stdout == b"child\nparent\n"
    # The child did not answer in the worker's place: the worker still serves requests.
    assert both_ways(pool, root) == (plain, plain)


def _tag() -> str:
    return f"{sys.version_info.major}{sys.version_info.minor}"
