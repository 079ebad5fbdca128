"""A target that did not build leaves nothing in kiln-out/ that looks built (issue 12).

Reproduced first: a validation that failed left the package and its C++ loader in
kiln-out/ (placed as each earlier action succeeded), and outputs of the last good
build stayed there looking up to date. Now every output of a target that had an
action fail, or not run, is removed; the summary names those targets; the next good
build places them again from the cache without running anything.
"""

from __future__ import annotations

from tests.kiln_workspace import Workspace

BUILD = """
genrule(name = "a", srcs = ["a.txt"], outs = ["a.out"], cmd = "cp $< $@")
genrule(
    name = "b",
    srcs = [":a.out"],
    outs = ["b.out", "b.log"],
    cmd = "cp $< $(location b.out); echo checked > $(location b.log); grep -q good $<",
)
genrule(name = "c", srcs = [":b.out"], outs = ["c.out"], cmd = "cp $< $@")
genrule(name = "d", srcs = ["d.txt"], outs = ["d.out"], cmd = "cp $< $@")
"""


def _workspace(ws: Workspace, content: str) -> None:
    ws.write("app/BUILD", BUILD)
    ws.write("app/a.txt", content)
    ws.write("app/d.txt", "d\n")


def test_outputs_of_a_failed_target_and_its_dependents_are_removed(ws: Workspace) -> None:
    _workspace(ws, "good\n")
    assert ws.kiln("build", "//app:all").code == 0
    built = ws.root / "kiln-out/app"
    assert {p.name for p in built.iterdir()} == {"a.out", "b.out", "b.log", "c.out", "d.out"}

    ws.write("app/a.txt", "bad\n")
    run = ws.kiln("build", "--keep_going", "//app:all")
    assert run.code == 1
    # a and d built; b failed (its last good outputs must not look current), c did not run.
    assert {p.name for p in built.iterdir()} == {"a.out", "d.out"}
    assert (
        "INFO: not built, so their outputs were removed from kiln-out/: //app:b, //app:c\n"
        in run.err
    )
    assert "up-to-date" not in run.err


def test_the_next_good_build_places_them_again_from_the_cache(ws: Workspace) -> None:
    _workspace(ws, "good\n")
    assert ws.kiln("build", "//app:all").code == 0
    ws.write("app/a.txt", "bad\n")
    assert ws.kiln("build", "--keep_going", "//app:all").code == 1
    ws.write("app/a.txt", "good\n")
    run = ws.kiln("build", "//app:all")
    assert run.code == 0, run.err
    assert run.executed == 0  # every output came back from the disk cache
    assert ws.out("app/c.out") == "good\n"


def test_without_keep_going_nothing_that_did_not_build_stays(ws: Workspace) -> None:
    _workspace(ws, "good\n")
    assert ws.kiln("build", "//app:c").code == 0
    ws.write("app/a.txt", "bad\n")
    run = ws.kiln("build", "//app:c")
    assert run.code == 1
    built = ws.root / "kiln-out/app"
    assert not (built / "b.out").exists() and not (built / "c.out").exists()
    assert (built / "a.out").exists()


BROKEN_B = BUILD.replace('grep -q good $<"', 'grep -q $(NOPE) $<"')  # fails analysis


def test_a_target_failing_analysis_loses_what_its_last_good_build_placed(ws: Workspace) -> None:
    """It has no actions this build, so what it made before is known from the record
    of placed outputs; its dependents go too, unrelated targets stay."""
    _workspace(ws, "good\n")
    assert ws.kiln("build", "//app:all").code == 0
    built = ws.root / "kiln-out/app"
    ws.write("app/BUILD", BROKEN_B)
    run = ws.kiln("build", "//app:all")
    assert run.code == 1 and "$(NOPE)" in run.err
    assert {p.name for p in built.iterdir()} == {"a.out", "d.out"}
    assert (
        "INFO: not built, so their outputs were removed from kiln-out/: //app:b, //app:c\n"
        in run.err
    )


def test_with_keep_going_too(ws: Workspace) -> None:
    _workspace(ws, "good\n")
    assert ws.kiln("build", "//app:all").code == 0
    ws.write("app/BUILD", BROKEN_B)
    run = ws.kiln("build", "--keep_going", "//app:all")
    assert run.code == 1
    assert {p.name for p in (ws.root / "kiln-out/app").iterdir()} == {"a.out", "d.out"}
    assert "removed from kiln-out/: //app:b, //app:c\n" in run.err


def test_a_target_whose_package_fails_to_load_loses_its_outputs_with_keep_going(
    ws: Workspace,
) -> None:
    _workspace(ws, "good\n")
    ws.write(
        "lib/BUILD",
        'package(default_visibility = ["//visibility:public"])\n'
        'genrule(name = "x", outs = ["x.out"], cmd = "echo x > $@")\n',
    )
    ws.write(
        "app/BUILD",
        BUILD + 'genrule(name = "uses", srcs = ["//lib:x"], outs = ["u.out"], cmd = "cp $< $@")\n',
    )
    assert ws.kiln("build", "//app:all").code == 0
    ws.write("lib/BUILD", "genrule(name = \n")  # a syntax error
    run = ws.kiln("build", "--keep_going", "//app:all")
    assert run.code == 1 and "lib/BUILD:" in run.err
    assert not (ws.root / "kiln-out/app/u.out").exists()
    assert ws.out("app/c.out") == "good\n"
    assert "removed from kiln-out/: //app:uses\n" in run.err
