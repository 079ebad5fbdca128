"""kiln build of genrules: outputs, incrementality, hermeticity and failures."""

from __future__ import annotations

import json
import os
import subprocess

import pytest
from kiln.loading import package

from tests.kiln_workspace import Workspace

CHAIN = """
genrule(name = "a", srcs = ["a.txt"], outs = ["a.out"], cmd = "tr a-z A-Z < $< > $@")
genrule(name = "b", srcs = [":a.out"], outs = ["b.out"], cmd = "cat $(SRCS) $(SRCS) > $@")
genrule(name = "c", srcs = [":b", "//lib:data.txt"], outs = ["c.out"], cmd = "cat $(SRCS) > $@")
genrule(name = "d", srcs = ["d.txt"], outs = ["d.out"], cmd = "wc -c < $< > $@")
"""


def chain(ws: Workspace) -> None:
    ws.write("app/BUILD", CHAIN)
    ws.write("app/a.txt", "hello\n")
    ws.write("app/d.txt", "four\n")
    ws.write("lib/BUILD", 'exports_files(["data.txt"])\n')
    ws.write("lib/data.txt", "data\n")


def test_build_writes_outputs_under_kiln_out(ws: Workspace) -> None:
    chain(ws)
    run = ws.kiln("build", "//app:c", "//app:d")
    assert run.code == 0, run.err
    assert ws.out("app/a.out") == "HELLO\n"
    assert ws.out("app/c.out") == "HELLO\nHELLO\ndata\n"
    assert ws.out("app/d.out").strip() == "5"
    assert run.executed == 4
    assert "kiln-out/app/c.out" in run.err


def test_changing_one_source_reruns_only_what_depends_on_it(ws: Workspace) -> None:
    chain(ws)
    assert ws.kiln("build", "//app:all").code == 0
    ws.write("app/a.txt", "world\n")
    run = ws.kiln("build", "//app:all")
    assert run.code == 0
    assert (run.executed, run.hits) == (3, 1)  # a, b, c ran; d was a hit
    assert ws.out("app/c.out") == "WORLD\nWORLD\ndata\n"
    ws.write("app/a.txt", "hello\n")
    reverted = ws.kiln("build", "//app:all")
    assert (reverted.executed, reverted.hits) == (0, 4)
    assert ws.out("app/c.out") == "HELLO\nHELLO\ndata\n"


def test_noop_build_executes_nothing(ws: Workspace) -> None:
    chain(ws)
    ws.kiln("build", "//app:all")
    run = ws.kiln("build", "//app:all")
    assert (run.executed, run.hits) == (0, 4)


def test_outputs_are_read_only_hardlinks_of_the_cache(ws: Workspace) -> None:
    chain(ws)
    ws.kiln("build", "//app:a")
    out = ws.root / "kiln-out/app/a.out"
    assert os.stat(out).st_nlink >= 2
    assert not os.access(out, os.W_OK) or os.geteuid() == 0
    assert oct(os.stat(out).st_mode & 0o222) == "0o0"


def test_reading_an_undeclared_workspace_file_fails(ws: Workspace) -> None:
    ws.write("app/BUILD", 'genrule(name = "x", outs = ["x.out"], cmd = "cat app/secret > $@")\n')
    ws.write("app/secret", "not declared\n")
    run = ws.kiln("build", "//app:x")
    assert run.code == 1
    assert "app/secret: No such file or directory" in run.err
    assert "ERROR: app/BUILD:1:1: Executing genrule //app:x failed: exited with code 1" in run.err
    assert not (ws.root / "kiln-out/app/x.out").exists()


def test_missing_declared_output_fails_naming_it(ws: Workspace) -> None:
    ws.write(
        "app/BUILD",
        'genrule(name = "x", outs = ["x.out", "y.out"], cmd = "touch $(RULEDIR)/x.out")\n',
    )
    run = ws.kiln("build", "//app:x")
    assert run.code == 1
    assert "did not create declared output kiln-out/app/y.out" in run.err


def test_stray_outputs_are_not_collected(ws: Workspace) -> None:
    ws.write(
        "app/BUILD",
        'genrule(name = "x", outs = ["x.out"], cmd = "echo 1 > $@; echo 2 > $(RULEDIR)/stray")\n',
    )
    assert ws.kiln("build", "//app:x").code == 0
    assert not (ws.root / "kiln-out/app/stray").exists()


def test_action_timeout_kills_the_action(ws: Workspace) -> None:
    ws.write("app/BUILD", 'genrule(name = "x", outs = ["x.out"], cmd = "sleep 30; touch $@")\n')
    run = ws.kiln("build", "//app:x", "--action_timeout=0.5")
    assert run.code == 1
    assert "timed out after 0.5 s" in run.err


def test_failure_shows_the_actions_output_and_caches_nothing(ws: Workspace) -> None:
    ws.write("app/BUILD", 'genrule(name = "x", outs = ["x.out"], cmd = "echo oops >&2; exit 3")\n')
    first = ws.kiln("build", "//app:x")
    assert first.code == 1
    assert "exited with code 3" in first.err and "oops" in first.err
    second = ws.kiln("build", "//app:x")
    assert second.executed == 0 and "exited with code 3" in second.err  # ran again: not cached


def test_keep_going_builds_what_does_not_depend_on_the_failure(ws: Workspace) -> None:
    ws.write(
        "app/BUILD",
        """
        genrule(name = "bad", outs = ["bad.out"], cmd = "exit 1")
        genrule(name = "after", srcs = [":bad.out"], outs = ["after.out"], cmd = "cp $< $@")
        genrule(name = "good", outs = ["good.out"], cmd = "echo ok > $@")
        """,
    )
    run = ws.kiln("build", "//app:all", "--keep_going", "--jobs=1")
    assert run.code == 1
    assert ws.out("app/good.out") == "ok\n"
    assert not (ws.root / "kiln-out/app/after.out").exists()
    assert "1 failed, 1 not run" in run.err


def test_genrule_make_variables(ws: Workspace) -> None:
    ws.write(
        "app/BUILD",
        """
        genrule(name = "tool", outs = ["tool.sh"], cmd = "printf 'echo tool:$$1' > $@")
        genrule(
            name = "use",
            srcs = ["in.txt"],
            outs = ["use.out"],
            tools = [":tool"],
            cmd = "bash $(location :tool) $$(cat $(location in.txt)) > $@",
        )
        """,
    )
    ws.write("app/in.txt", "payload")
    run = ws.kiln("build", "//app:use")
    assert run.code == 0, run.err
    assert ws.out("app/use.out") == "tool:payload\n"  # echo adds the newline


def test_unknown_make_variable_is_an_analysis_error_naming_the_target(ws: Workspace) -> None:
    ws.write("app/BUILD", 'genrule(name = "x", outs = ["x.out"], cmd = "echo $(FOO) > $@")\n')
    run = ws.kiln("build", "//app:x")
    assert run.code == 1
    assert "ERROR: app/BUILD:1:1: //app:x: $(FOO) in cmd is not a known variable" in run.err
    assert "Traceback" not in run.err


def test_filegroup_passes_files_through(ws: Workspace) -> None:
    ws.write(
        "app/BUILD",
        """
        filegroup(name = "inputs", srcs = glob(["*.txt"]))
        genrule(name = "all", srcs = [":inputs"], outs = ["all.out"], cmd = "cat $(SRCS) > $@")
        """,
    )
    ws.write("app/1.txt", "one\n")
    ws.write("app/2.txt", "two\n")
    assert ws.kiln("build", "//app:all").code == 0
    assert ws.out("app/all.out") == "one\ntwo\n"


def test_explain_says_which_input_changed(ws: Workspace) -> None:
    chain(ws)
    first = ws.kiln("build", "//app:d", "--explain")
    assert "EXPLAIN: Genrule //app:d: new action" in first.err
    ws.write("app/d.txt", "forty\n")
    run = ws.kiln("build", "//app:d", "--explain")
    assert "EXPLAIN: Genrule //app:d: input changed: app/d.txt" in run.err


def test_clean_removes_outputs_and_expunge_disk_cache_the_cache(ws: Workspace) -> None:
    chain(ws)
    ws.kiln("build", "//app:d")
    assert ws.kiln("clean").code == 0
    assert not (ws.root / "kiln-out").exists()
    assert ws.kiln("build", "//app:d").hits == 1  # the disk cache survived
    assert ws.kiln("clean", "--expunge_disk_cache").code == 0
    assert ws.kiln("build", "//app:d").executed == 1


def test_clean_expunge_removes_this_workspaces_state_and_never_the_shared_disk_cache(
    ws: Workspace,
) -> None:
    """Issue 11 B2: `--expunge` deleted a disk cache other workspaces share; Bazel's never
    touches --disk_cache."""
    chain(ws)
    ws.kiln("build", "//app:d")
    base = next((ws.disk_cache / "workspaces").iterdir())
    assert (base / "action-state.pickle").exists()
    run = ws.kiln("clean", "--expunge")
    assert run.code == 0
    assert run.err == f"INFO: removed kiln-out/ and this workspace's state ({base})\n"
    assert sorted(p.name for p in base.iterdir()) == ["lock"]
    assert ws.kiln("build", "//app:d").hits == 1  # the disk cache is all there


@pytest.mark.parametrize("sandbox", ["--sandbox", "--nosandbox"])
def test_an_action_writing_to_its_input_fails_and_the_cache_stays_intact(
    ws: Workspace, sandbox: str
) -> None:
    ws.write(
        "app/BUILD",
        """
        genrule(name = "a", outs = ["a.out"], cmd = "echo original > $@")
        genrule(name = "b", srcs = [":a.out"], outs = ["b.out"], cmd = "echo evil >> $<; cp $< $@")
        """,
    )
    run = ws.kiln("build", "//app:b", sandbox)
    assert run.code == 1
    if sandbox == "--sandbox":  # the write itself fails
        assert "kiln-out/app/a.out: Read-only file system" in run.err
    else:  # caught afterwards, the blob dropped
        assert "modified its input kiln-out/app/a.out (inputs are read-only" in run.err
    assert ws.kiln("clean").code == 0
    assert ws.kiln("build", "//app:a").code == 0
    assert ws.out("app/a.out") == "original\n"


def test_blake3_digests_keep_their_own_cache(ws: Workspace) -> None:
    chain(ws)
    assert ws.kiln("build", "//app:d", "--digest_function=blake3").executed == 1
    assert ws.kiln("build", "//app:d", "--digest_function=blake3").hits == 1
    assert ws.kiln("build", "//app:d").executed == 1  # sha256 keys: another cache


def test_keep_going_builds_past_a_target_that_fails_analysis(ws: Workspace) -> None:
    ws.write(
        "app/BUILD",
        """
        genrule(name = "broken", outs = ["broken.out"], cmd = "echo $(NOPE) > $@")
        genrule(name = "fine", outs = ["fine.out"], cmd = "echo fine > $@")
        """,
    )
    stopped = ws.kiln("build", "//app:all")
    assert stopped.code == 1 and not (ws.root / "kiln-out/app/fine.out").exists()
    run = ws.kiln("build", "//app:all", "--keep_going")
    assert run.code == 1
    assert "//app:broken: $(NOPE) in cmd is not a known variable" in run.err
    assert ws.out("app/fine.out") == "fine\n"
    assert "1 targets failed before execution" in run.err


def broken_package_beside_a_good_one(ws: Workspace) -> None:
    ws.write(
        "broken/BUILD",
        'genrule(name = "x", outs = ["x.out"], cmd = "true")\nfail("broken/BUILD was loaded")\n',
    )
    ws.write(
        "app/BUILD",
        """
        genrule(name = "uses", srcs = ["//broken:x"], outs = ["uses.out"], cmd = "cp $< $@")
        genrule(name = "fine", outs = ["fine.out"], cmd = "echo fine > $@")
        """,
    )


def test_a_package_excluded_after_double_dash_is_never_loaded(ws: Workspace) -> None:
    broken_package_beside_a_good_one(ws)
    ws.write("app/BUILD", 'genrule(name = "fine", outs = ["fine.out"], cmd = "echo fine > $@")\n')
    everything = ws.kiln("build", "//...")
    assert everything.code == 1 and "broken/BUILD:2" in everything.err
    run = ws.kiln("build", "--", "//...", "-//broken/...")
    assert run.code == 0, run.err
    assert "broken/BUILD was loaded" not in run.err
    assert ws.out("app/fine.out") == "fine\n"


def test_keep_going_builds_what_does_not_depend_on_a_package_that_failed_to_load(
    ws: Workspace,
) -> None:
    broken_package_beside_a_good_one(ws)
    stopped = ws.kiln("build", "//...")
    assert stopped.code == 1 and not (ws.root / "kiln-out/app/fine.out").exists()
    run = ws.kiln("build", "//...", "--keep_going")
    assert run.code == 1
    assert "Traceback" not in run.err
    # One error for the broken package, though two patterns' targets reach it.
    assert run.err.count("broken/BUILD was loaded") == 1, run.err
    assert "broken/BUILD:2" in run.err
    assert ws.out("app/fine.out") == "fine\n"
    assert not (ws.root / "kiln-out/app/uses.out").exists()


def test_action_env_reaches_the_action_and_its_key(ws: Workspace) -> None:
    ws.write("app/BUILD", 'genrule(name = "x", outs = ["x.out"], cmd = "echo $$GREETING > $@")\n')
    assert ws.kiln("build", "//app:x", "--action_env=GREETING=hello").code == 0
    assert ws.out("app/x.out") == "hello\n"
    changed = ws.kiln("build", "//app:x", "--action_env=GREETING=bye")
    assert changed.executed == 1
    assert ws.out("app/x.out") == "bye\n"


def test_what_an_action_prints_is_shown_as_bazel_does(ws: Workspace) -> None:
    ws.write("app/BUILD", 'genrule(name = "x", outs = ["x.out"], cmd = "echo hello; touch $@")\n')
    run = ws.kiln("build", "//app:x")
    assert "INFO: From Executing genrule //app:x:\nhello" in run.err


def test_an_executable_output_can_be_the_input_of_another_action(ws: Workspace) -> None:
    ws.write(
        "app/BUILD",
        """
        genrule(name = "tool", outs = ["tool.sh"], executable = True,
                cmd = "printf '#!/bin/sh\\\\necho from-tool' > $@; chmod +x $@")
        genrule(name = "use", outs = ["use.out"], tools = [":tool"],
                cmd = "./$(location :tool) > $@")
        """,
    )
    run = ws.kiln("build", "//app:use")
    assert run.code == 0, run.err
    assert ws.out("app/use.out") == "from-tool\n"
    assert ws.kiln("clean").code == 0
    assert ws.kiln("build", "//app:use").hits == 2  # from the disk cache, still executable
    assert ws.out("app/use.out") == "from-tool\n"


def test_build_events_say_where_each_result_came_from(ws: Workspace) -> None:
    chain(ws)
    events = ws.root.parent / "events.json"

    def finished(*args: str) -> dict[str, tuple[object, ...]]:
        assert ws.kiln("build", *args, f"--build_event_json_file={events}").code == 0
        lines = [json.loads(line) for line in events.read_text().splitlines()]
        assert [lines[0]["type"], lines[-1]["type"]] == ["build_started", "build_finished"]
        return {
            e["label"]: (e["status"], e["strategy"], e["cache"], e["cache_hit"], e["failure"])
            for e in lines
            if e["type"] == "action_finished"
        }

    assert finished("//app:a") == {"//app:a": ("executed", "local", None, False, None)}
    assert finished("//app:a") == {"//app:a": ("cached", "up-to-date", "up-to-date", True, None)}
    (ws.root / "kiln-out/app/a.out").unlink()
    assert finished("//app:a") == {"//app:a": ("cached", "disk", "disk", True, None)}


def test_profile_has_the_phases_and_an_event_per_action_on_its_lane(ws: Workspace) -> None:
    chain(ws)
    profile = ws.root.parent / "profile.json"
    assert ws.kiln("build", "//app:c", "--jobs=1", f"--profile={profile}").code == 0
    events = json.loads(profile.read_text())["traceEvents"]
    phases = [e["name"] for e in events if e.get("cat") == "phase"]
    assert phases == ["loading", "analysis", "execution"]
    actions = [e for e in events if e.get("cat") == "executed"]
    assert sorted(e["name"] for e in actions) == [
        "Genrule //app:a",
        "Genrule //app:b",
        "Genrule //app:c",
    ]
    lanes = {e["tid"]: e["args"]["name"] for e in events if e.get("name") == "thread_name"}
    assert {lanes[e["tid"]] for e in actions} == {"local-1"}  # --jobs=1: one lane
    assert all(e["args"]["strategy"] == "local" and e["dur"] > 0 for e in actions)


def test_a_profile_is_written_when_the_build_fails_before_execution(ws: Workspace) -> None:
    ws.write("app/BUILD", 'genrule(name = "x", outs = ["x.out"], cmd = "echo $(NOPE) > $@")\n')
    profile = ws.root.parent / "profile.json"
    assert ws.kiln("build", "//app:x", f"--profile={profile}").code == 1
    events = json.loads(profile.read_text())["traceEvents"]
    assert [e["name"] for e in events if e.get("cat") == "phase"] == ["loading", "analysis"]


def test_cp_p_of_a_same_size_build_file_builds_the_new_command(
    ws: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A stamp without ctime kept both the graph cache and the analysis cache:
    # the old command (or a removed target) was built again. The clock is
    # taken as fine-grained, so that only ctime can tell the copies apart.
    monkeypatch.setattr(package, "RACY_NS", 0)
    ws.write("p/BUILD", 'genrule(name = "g", outs = ["g.txt"], cmd = "echo aaa > $@")\n')
    assert ws.kiln("build", "//p:g").code == 0
    assert ws.out("p/g.txt") == "aaa\n"
    build = ws.root / "p/BUILD"
    copy = ws.write("copy", 'genrule(name = "g", outs = ["g.txt"], cmd = "echo bbb > $@")\n')
    before = build.stat()
    os.utime(copy, ns=(before.st_atime_ns, before.st_mtime_ns))
    subprocess.run(["cp", "-p", str(copy), str(build)], check=True)
    assert (build.stat().st_ino, build.stat().st_size) == (before.st_ino, before.st_size)
    run = ws.kiln("build", "//p:g")
    assert run.code == 0, run.err
    assert ws.out("p/g.txt") == "bbb\n"
