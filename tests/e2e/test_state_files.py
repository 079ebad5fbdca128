"""kiln's state files of the wrong shape cost a warning and some time, never a build.

A state file that unpickles but holds other types (written by other code, or
by a kiln whose classes differ under the same format number), or a directory
where the file belongs, broke every later build with a traceback (issue 11,
B8), although state_file.py promised that such a file "costs only time".
"""

from __future__ import annotations

import pickle
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest
from kiln.cli.session import Session, StartupOptions

from tests.kiln_workspace import KILN, Workspace

BUILD = 'genrule(name = "g", srcs = ["in.txt"], outs = ["g.txt"], cmd = "cat $< > $@")\n'

STATES = {
    "graph-cache.pickle": "the graph cache",
    "analysis-cache.pickle": "the analysis cache",
    "action-state.pickle": "the action state",
    "explain.pickle": "the explain log",
    "placed-outputs.pickle": "the record of placed outputs",
}


def _built(ws: Workspace) -> Path:
    ws.write("p/BUILD", BUILD)
    ws.write("p/in.txt", "one\n")
    run = ws.kiln("build", "//p:g", "--explain")
    assert run.code == 0, run.err
    output_base = Session.create(ws.root, StartupOptions()).output_base.root
    assert sorted(p.name for p in output_base.glob("*.pickle")) == sorted(STATES)
    return output_base


# What tells the reader that the file is its own, and current: kept as they are.
STAMPS = ("format", "fingerprint", "code", "toolchains")


def _wrong_shape(path: Path) -> None:
    """The same pickle, with every field but those of STAMPS of the wrong type."""
    data = pickle.loads(path.read_bytes())
    wrong = {key: (value if key in STAMPS else [1, 2]) for key, value in data.items()}
    path.write_bytes(pickle.dumps(wrong))


@pytest.mark.parametrize("name", sorted(STATES))
def test_state_file_of_the_wrong_shape_is_discarded_with_a_warning(
    ws: Workspace, name: str
) -> None:
    path = _built(ws) / name
    _wrong_shape(path)
    ws.write("p/in.txt", "two\n")  # so that every state file is read and written again

    run = ws.kiln("build", "//p:g", "--explain")

    assert run.code == 0, run.err
    assert "Traceback" not in run.err
    assert (
        f"WARNING: {path} does not hold {STATES[name]} in the shape this kiln writes: discarded\n"
    ) in run.err
    assert ws.out("p/g.txt") == "two\n"
    assert pickle.loads(path.read_bytes())  # written anew, in the right shape
    again = ws.kiln("build", "//p:g", "--explain")
    assert again.code == 0
    assert "WARNING" not in again.err


@pytest.mark.parametrize("name", sorted(STATES))
def test_directory_in_place_of_a_state_file_is_a_warning_not_a_crash(
    ws: Workspace, name: str
) -> None:
    path = _built(ws) / name
    path.unlink()
    path.mkdir()
    (path / "something").write_text("")
    for text in ("two\n", "three\n"):
        ws.write("p/in.txt", text)
        run = ws.kiln("build", "//p:g", "--explain")
        assert run.code == 0, run.err
        assert "Traceback" not in run.err
        assert run.err.count("WARNING") == 1
        assert (
            f"WARNING: {path} is a directory, not {STATES[name]}: ignored, and not kept "
            "until it is removed\n"
        ) in run.err
        assert ws.out("p/g.txt") == text
    assert (path / "something").exists()  # the directory is left alone


@pytest.mark.timeout(120)
def test_a_full_disk_while_state_is_saved_is_one_line_naming_the_file(ws: Workspace) -> None:
    """Issue 20: ENOSPC while kiln wrote its own state was an INTERNAL ERROR (write() on a
    descriptor names no file, so the CLI's net let it through). A real full disk: a
    64 KiB tmpfs as the output base, in a user and mount namespace of the test's own."""
    if shutil.which("unshare") is None:
        pytest.skip("no unshare(1) (util-linux) on this machine")
    ws.write("p/BUILD", 'genrule(name = "g", outs = ["g.txt"], cmd = "echo hi > $@")\n')
    base = ws.root.parent / "full-output-base"
    base.mkdir()
    kiln = " ".join(shlex.quote(word) for word in (*KILN, f"--output_base={base}"))
    script = f"""
        set -u
        mount -t tmpfs -o size=64k tmpfs {base} || exit 99
        {kiln} build //p:g --nosandbox >/dev/null 2>&1 || exit 98
        head -c 1000000 /dev/zero > {base}/filler 2>/dev/null
        echo '# edited: the graph cache is saved again' >> p/BUILD
        {kiln} build //p:g --nosandbox
        echo "exit=$?"
        ls -a {base}
    """
    ran = subprocess.run(
        ["unshare", "--user", "--map-root-user", "--mount", "sh", "-c", script],
        cwd=ws.root,
        env=ws.env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert "exit=1\n" in ran.stdout, (ran.returncode, ran.stdout, ran.stderr)
    assert ran.stderr.endswith(
        f"ERROR: {base}/graph-cache.pickle: No space left on device\n"
        "  hint: free some space (kiln clean --expunge_disk_cache, or "
        "--disk_cache_max_size=SIZE)\n"
    ), ran.stderr
    assert "Traceback" not in ran.stderr
    # Nothing half-written: the temp file of the failed save is gone.
    assert not [name for name in ran.stdout.split() if name.startswith(".graph-")]
