"""fork_server.current() in a worker's action: the action runs `python -m module` in a child
forked from the action itself, still in the worker's pristine state (kiln.workers.forking),
and what the child does, an abort included, ends with the child, never the action."""

from __future__ import annotations

import json

from kiln.workers import WorkerPool, WorkResponse
from worker_helpers import MakeExecroot, action_env

# Runs in the worker: the child's status, output and identity, as the action saw them.
ACTION = """
    import json, os, sys, tempfile
    from kiln import fork_server
    server = fork_server.current()
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        env = dict(os.environ, KILN_TEST="given")
        code = server.run("kiln_test_child", sys.argv[1:], env, os.getcwd(),
                          (0, out.fileno(), err.fileno()))
        out.seek(0); err.seek(0)
        print(json.dumps({"code": code, "out": out.read().decode(), "err": err.read().decode(),
                          "action": os.getpid(), "server": server.pid, "cwd": os.getcwd()}))
"""

CHILD = """
    import json, os, signal, sys
    print(json.dumps({"pid": os.getpid(), "ppid": os.getppid(), "cwd": os.getcwd(),
                      "env": os.environ.get("KILN_TEST"), "argv": sys.argv[1:],
                      "name": __name__}))
    print("to stderr", file=sys.stderr)
    if sys.argv[1] == "abort":
        sys.stdout.flush()
        os.abort()
    raise SystemExit(int(sys.argv[1]))
"""


def _run(pool: WorkerPool, make_execroot: MakeExecroot, *args: str) -> dict[str, object]:
    root = make_execroot(ACTION, kiln_test_child=CHILD)
    assert pool.run(root.request(*args, env=action_env())) == WorkResponse(0), root.err()
    result: dict[str, object] = json.loads(root.out())
    return result


def test_a_child_runs_as_python_m_would_in_the_action_s_cwd_env_and_files(
    pool: WorkerPool, make_execroot: MakeExecroot
) -> None:
    result = _run(pool, make_execroot, "3", "x")
    assert result["code"] == 3
    child = json.loads(str(result["out"]).splitlines()[0])
    assert child["ppid"] == result["server"] == result["action"]
    assert child["pid"] != result["action"]
    assert child == {**child, "cwd": result["cwd"], "env": "given", "name": "__main__"}
    assert child["argv"] == ["3", "x"]
    assert result["err"] == "to stderr\n"


def test_a_child_that_aborts_is_a_signal_status_and_the_worker_runs_on(
    pool: WorkerPool, make_execroot: MakeExecroot
) -> None:
    aborted = _run(pool, make_execroot, "abort")
    assert aborted["code"] == -6  # SIGABRT, as subprocess reports it
    assert json.loads(str(aborted["out"]).splitlines()[0])["argv"] == ["abort"]
    after = _run(pool, make_execroot, "0")
    assert after["code"] == 0
    assert after["action"] != aborted["action"]  # each action is a fork of its own
