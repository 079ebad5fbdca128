"""What an action sees in a worker: its output files, exit code, env, cwd, and nothing left over."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
from kiln.workers import WorkerPool, WorkRequest, WorkResponse
from kiln.workers.inprocess import run_request
from kiln.workers.isolation import Baseline
from worker_helpers import MakeExecroot, action_env

PROBE = """
    import json, os, sys
    print(json.dumps({"cwd": os.getcwd(), "env": dict(os.environ), "argv": sys.argv,
                      "path0": sys.path[0], "pid": os.getppid()}))
"""


def probe(pool: WorkerPool, request: WorkRequest) -> dict[str, object]:
    assert pool.run(request) == WorkResponse(0)
    result: dict[str, object] = json.loads(Path(request.stdout_path).read_text())
    return result


def test_python_prints_and_raw_fd_writes_land_in_the_action_files(
    pool: WorkerPool, make_execroot: MakeExecroot
) -> None:
    root = make_execroot("""
        import os, sys
        print("printed")
        os.write(1, b"raw stdout\\n")
        print("printed to stderr", file=sys.stderr)
        os.write(2, b"raw stderr\\n")
    """)
    response = pool.run(root.request())
    assert response == WorkResponse(0)
    assert response.worker_id == "worker-1"
    # stdout is block-buffered and stderr line-buffered, as in a plain `python -m`.
    assert root.out() == "raw stdout\nprinted\n"
    assert root.err() == "printed to stderr\nraw stderr\n"


def test_output_of_c_code_and_child_processes_is_captured(
    pool: WorkerPool, make_execroot: MakeExecroot
) -> None:
    root = make_execroot("""
        import ctypes, subprocess, sys
        ctypes.CDLL(None).printf(b"from C\\n")
        subprocess.run(["sh", "-c", "echo from child; echo child err >&2"], check=True)
    """)
    assert pool.run(root.request()) == WorkResponse(0)
    assert sorted(root.out().splitlines()) == ["from C", "from child"]
    assert root.err() == "child err\n"


def test_stdout_and_stderr_may_share_one_file(
    pool: WorkerPool, make_execroot: MakeExecroot
) -> None:
    root = make_execroot("""
        import sys
        print("out", flush=True)
        print("err", file=sys.stderr)
        print("out again")
    """)
    request = root.request()
    shared = WorkRequest(request.argv, request.env, request.cwd, str(root.stdout), str(root.stdout))
    assert pool.run(shared) == WorkResponse(0)
    assert root.out() == "out\nerr\nout again\n"


def test_output_files_are_truncated_not_appended(
    pool: WorkerPool, make_execroot: MakeExecroot
) -> None:
    root = make_execroot("print('short')")
    root.stdout.write_text("a much longer leftover from before\n")
    assert pool.run(root.request()) == WorkResponse(0)
    assert root.out() == "short\n"


@pytest.mark.parametrize(
    ("statement", "exit_code", "stderr"),
    [
        ("sys.exit(3)", 3, ""),
        ("sys.exit()", 0, ""),
        ("sys.exit(0)", 0, ""),
        ("sys.exit(256)", 0, ""),
        ("sys.exit(-1)", 255, ""),
        ("sys.exit('bad input')", 1, "bad input\n"),
        ("pass", 0, ""),
    ],
)
def test_exit_code_is_what_the_interpreter_would_exit_with(
    pool: WorkerPool, make_execroot: MakeExecroot, statement: str, exit_code: int, stderr: str
) -> None:
    root = make_execroot(f"import sys\n{statement}\n")
    assert pool.run(root.request()) == WorkResponse(exit_code)
    assert root.err() == stderr


def test_uncaught_exception_exits_1_with_the_traceback_on_stderr(
    pool: WorkerPool, make_execroot: MakeExecroot
) -> None:
    root = make_execroot("""
        def fail():
            raise ValueError("boom")
        fail()
    """)
    assert pool.run(root.request()) == WorkResponse(1)
    action = root.path / "kiln_test_action.py"
    assert root.err() == (
        "Traceback (most recent call last):\n"
        f'  File "{action}", line 4, in <module>\n'
        "    fail()\n"
        f'  File "{action}", line 3, in fail\n'
        '    raise ValueError("boom")\n'
        "ValueError: boom\n"
    )


def test_missing_module_fails_as_python_m_reports_it(
    pool: WorkerPool, make_execroot: MakeExecroot
) -> None:
    root = make_execroot("")
    assert pool.run(root.request(module="kiln_no_such_action")) == WorkResponse(1)
    assert root.err() == f"{sys.executable}: No module named kiln_no_such_action\n"


def test_env_cwd_and_argv_are_the_requests(pool: WorkerPool, make_execroot: MakeExecroot) -> None:
    first = make_execroot(PROBE)
    second = make_execroot(PROBE)
    seen1 = probe(pool, first.request("a", "b", env=action_env(KILN_ONLY_FIRST="1")))
    seen2 = probe(pool, second.request(env=action_env()))
    assert seen1["pid"] == seen2["pid"]  # one worker ran both
    assert seen1["env"] == action_env(KILN_ONLY_FIRST="1")
    assert seen2["env"] == action_env()
    assert seen1["cwd"] == seen1["path0"] == str(first.path.resolve())
    assert seen2["cwd"] == str(second.path.resolve())
    assert seen1["argv"] == [str(first.path / "kiln_test_action.py"), "a", "b"]
    assert seen2["argv"] == [str(second.path / "kiln_test_action.py")]


def test_environment_values_that_are_not_utf8_survive(
    pool: WorkerPool, make_execroot: MakeExecroot
) -> None:
    root = make_execroot("import os; print(os.environb[b'KILN_BYTES'].hex())")
    value = os.fsdecode(b"caf\xe9")  # a surrogate escape
    assert pool.run(root.request(env=action_env(KILN_BYTES=value))) == WorkResponse(0)
    assert root.out() == "636166e9\n"


def test_modules_under_one_execroot_are_not_seen_by_the_next_action(
    pool: WorkerPool, make_execroot: MakeExecroot
) -> None:
    action = "import helper, os; print(helper.VALUE, os.getppid())"
    first = make_execroot(action, helper="VALUE = 'first'")
    second = make_execroot(action, helper="VALUE = 'second'")
    assert pool.run(first.request()) == WorkResponse(0)
    assert pool.run(second.request()) == WorkResponse(0)
    (value1, pid1), (value2, pid2) = first.out().split(), second.out().split()
    assert (value1, value2) == ("first", "second")
    assert pid1 == pid2


def test_request_pythonpath_is_on_sys_path_for_that_action_only(
    pool: WorkerPool, make_execroot: MakeExecroot, tmp_path: Path
) -> None:
    library = tmp_path / "library"
    library.mkdir()
    (library / "kiln_test_library.py").write_text("NAME = 'from the library'\n")
    root = make_execroot("""
        import sys
        sys.path.append("/kiln/left/behind")
        try:
            import kiln_test_library
            print(kiln_test_library.NAME)
        except ImportError:
            print("no library", "/kiln/left/behind" in sys.path[:-1])
    """)
    assert pool.run(root.request(env=action_env(PYTHONPATH=str(library)))) == WorkResponse(0)
    assert root.out() == "from the library\n"
    assert pool.run(root.request()) == WorkResponse(0)
    assert root.out() == "no library False\n"


def test_warnings_are_shown_again_in_every_action(
    pool: WorkerPool, make_execroot: MakeExecroot
) -> None:
    root = make_execroot("""
        import warnings
        warnings.warn("careful")
        warnings.simplefilter("ignore")
    """)
    for _ in range(2):
        assert pool.run(root.request()) == WorkResponse(0)
        assert "UserWarning: careful" in root.err()


def test_a_replaced_or_closed_sys_stdout_does_not_break_the_next_action(
    pool: WorkerPool, make_execroot: MakeExecroot
) -> None:
    breaks = make_execroot("import sys; sys.stdout.close(); sys.stdout = None")
    follows = make_execroot("print('still printing')")
    assert pool.run(breaks.request()) == WorkResponse(0)
    assert pool.run(follows.request()) == WorkResponse(0)
    assert follows.out() == "still printing\n"


def test_missing_execroot_fails_the_action_and_keeps_the_worker(
    pool: WorkerPool, make_execroot: MakeExecroot, tmp_path: Path
) -> None:
    root = make_execroot(PROBE)
    before = probe(pool, root.request())
    request = root.request()
    missing = WorkRequest(
        request.argv, request.env, str(tmp_path / "gone"), request.stdout_path, request.stderr_path
    )
    response = pool.run(missing)
    assert (response.exit_code, response.crashed) == (1, False)
    assert response.message == (
        f"cannot start kiln_test_action: [Errno 2] No such file or directory: '{tmp_path / 'gone'}'"
    )
    assert probe(pool, root.request())["pid"] == before["pid"]


def test_argv_without_dash_m_is_not_a_worker_action(pool: WorkerPool, tmp_path: Path) -> None:
    request = WorkRequest(("python", "script.py"), {}, str(tmp_path), "out", "err")
    with pytest.raises(ValueError, match="not a worker action"):
        pool.run(request)


def test_running_an_action_restores_the_interpreter_state(make_execroot: MakeExecroot) -> None:
    # In this process rather than a worker, so that the restored state can be inspected.
    root = make_execroot(
        """
        import os, sys
        os.environ["KILN_LEAK"] = "1"
        os.chdir("/")
        sys.path.insert(0, "/kiln/leak")
        sys.argv.append("leak")
        import helper
        sys.stdout = sys.stderr = None
        print("unreachable")
        """,
        helper="X = 1",
    )
    env, cwd, path, argv = dict(os.environ), os.getcwd(), list(sys.path), list(sys.argv)
    stdout, stderr = sys.stdout, sys.stderr
    assert run_request(root.request(), Baseline.capture()) == 0
    assert (dict(os.environ), os.getcwd(), sys.path, sys.argv) == (env, cwd, path, argv)
    assert (sys.stdout, sys.stderr) == (stdout, stderr)
    assert "helper" not in sys.modules


def test_umask_signal_handlers_and_alarms_do_not_reach_the_next_action(
    pool: WorkerPool, make_execroot: MakeExecroot
) -> None:
    changes = make_execroot("""
        import os, signal
        os.umask(0o077)
        signal.signal(signal.SIGUSR1, lambda *_: None)
        signal.setitimer(signal.ITIMER_REAL, 0.2)  # would kill the worker in the next action
    """)
    checks = make_execroot("""
        import os, signal, time
        time.sleep(0.4)
        print(oct(os.umask(0o022)), signal.getsignal(signal.SIGUSR1) == signal.SIG_DFL)
    """)
    umask = os.umask(0o022)
    os.umask(umask)
    assert pool.run(changes.request()) == WorkResponse(0)
    assert pool.run(checks.request()) == WorkResponse(0)
    assert checks.out() == f"{oct(umask)} True\n"


def test_module_an_earlier_action_imported_runs_without_a_warning(
    make_execroot: MakeExecroot, tmp_path: Path
) -> None:
    package = tmp_path / "library" / "kiln_test_package"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "tool.py").write_text("if __name__ == '__main__':\n    print('ran as main')\n")
    importer = make_execroot("import kiln_test_package.tool")
    env = {**os.environ, "PYTHONPATH": str(package.parent)}
    with WorkerPool(sys.executable, max_instances=1, preload=(), base_env=env) as pool:
        assert pool.run(importer.request()) == WorkResponse(0)
        request = importer.request(module="kiln_test_package.tool")
        assert pool.run(request) == WorkResponse(0)
    assert (importer.out(), importer.err()) == ("ran as main\n", "")


def test_an_execroot_path_used_again_shows_its_new_sources(
    pool: WorkerPool, make_execroot: MakeExecroot
) -> None:
    root = make_execroot("import helper, warnings\nwarnings.warn(helper.TEXT)  # first\n")
    (root.path / "helper.py").write_text("TEXT = 'one'\n")
    assert pool.run(root.request()) == WorkResponse(0)
    assert root.err().endswith("UserWarning: one\n  warnings.warn(helper.TEXT)  # first\n")
    (root.path / "kiln_test_action.py").write_text(
        "import helper, warnings\nwarnings.warn(helper.TEXT)  # the second\n"
    )
    (root.path / "helper.py").write_text("TEXT = 'two, longer'\n")
    assert pool.run(root.request()) == WorkResponse(0)
    assert root.err().endswith(
        "UserWarning: two, longer\n  warnings.warn(helper.TEXT)  # the second\n"
    )
