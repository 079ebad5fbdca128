"""Evaluating BUILD and .bzl files in real Starlark, into packages of targets."""

from __future__ import annotations

import os

import pytest
from kiln.errors import KilnError
from kiln.loading import glob
from kiln.loading.package import GENERATED_FILE, Package

from tests.kiln_workspace import MakeWorkspace, Workspace

MACROS = """\
    def py_group(name, srcs = [], **kwargs):
        native.filegroup(name = name, srcs = srcs, **kwargs)

    def stamped(name):
        # A macro may declare several targets, and see which package it is in.
        native.genrule(
            name = name,
            outs = [name + ".txt"],
            cmd = "echo " + native.package_name() + " > $@",
        )
        py_group(name = name + "_files", srcs = [":" + name + ".txt"])
    """


def _package(ws: Workspace, name: str) -> Package:
    return ws.loader().package(name)


def test_rules_record_targets_with_canonical_labels(make_workspace: MakeWorkspace) -> None:
    ws = make_workspace(
        {
            "app/BUILD": """\
                genrule(
                    name = "gen",
                    srcs = ["in.txt", ":lib", "//other:x", "sub/data.txt"],
                    outs = ["out.txt"],
                    cmd = "cat $(SRCS) > $@",
                )
                filegroup(name = "lib")
                """,
        }
    )
    package = _package(ws, "app")
    gen = package.targets["gen"]
    assert (gen.label, gen.kind) == ("//app:gen", "genrule")
    assert gen.attrs["srcs"] == ["//app:in.txt", "//app:lib", "//other:x", "//app:sub/data.txt"]
    assert gen.deps == ("//app:in.txt", "//app:lib", "//other:x", "//app:sub/data.txt")
    out = package.targets["out.txt"]
    assert (out.label, out.kind, out.deps) == ("//app:out.txt", GENERATED_FILE, ("//app:gen",))
    assert [t.index for t in package.targets.values()] == [0, 0, 1]


def test_load_brings_macros_and_aliases(make_workspace: MakeWorkspace) -> None:
    ws = make_workspace(
        {
            "tools/BUILD": "",
            "tools/macros.bzl": MACROS,
            "app/BUILD": """\
                load("//tools:macros.bzl", "stamped", group = "py_group")

                group(name = "g", srcs = ["a.py"])
                stamped(name = "s")
                """,
            "app/a.py": "",
        }
    )
    targets = _package(ws, "app").targets
    assert list(targets) == ["g", "s", "s.txt", "s_files"]
    assert targets["s"].attrs["cmd"] == "echo app > $@"
    assert targets["s_files"].deps == ("//app:s.txt",)


def test_load_label_is_relative_to_the_loading_package(make_workspace: MakeWorkspace) -> None:
    ws = make_workspace(
        {
            "app/BUILD": 'load(":defs.bzl", "NAME")\nfilegroup(name = NAME)\n',
            "app/defs.bzl": 'load("//tools:more.bzl", "SUFFIX")\nNAME = "x" + SUFFIX\n',
            "tools/BUILD": "",
            "tools/more.bzl": 'SUFFIX = "_y"\n',
        }
    )
    assert list(_package(ws, "app").targets) == ["x_y"]


def test_kiln_rules_load_from_the_label_bazel_reads(make_workspace: MakeWorkspace) -> None:
    """`load("@kiln//rules:defs.bzl", ...)`, the line shared with Bazel, gives kiln's own
    rules, in BUILD files and in macros, under aliases too; no file is read for it."""
    model = 'src = "m.py", factory = "m:build", inputs = [{"name": "x", "shape": [2]}]'
    ws = make_workspace(
        {
            "tools/BUILD": "",
            "tools/macros.bzl": f"""\
                load("@kiln//rules:defs.bzl", "torch_model")

                def model(name):
                    torch_model(name = name, {model})
                """,
            "app/BUILD": f"""\
                load("@kiln//rules:defs.bzl", "torch_model", package = "aoti_package")
                load("//tools:macros.bzl", "model")

                torch_model(name = "m", {model})
                model(name = "n")
                package(name = "m_pt2", model = ":m")
                """,
            "app/m.py": "",
        }
    )
    package = _package(ws, "app")
    assert {name: t.kind for name, t in package.targets.items()} == {
        "m": "torch_model",
        "n": "torch_model",
        "m_pt2": "aoti_package",
    }
    # The files the graph cache re-checks: the BUILD file, the macros and the BUILD file
    # of their package, nothing of @kiln.
    files = {stamp.path for stamp in package.stamps} - {"app"}  # "app": the lookup of m.py
    assert files == {"app/BUILD", "tools/BUILD", "tools/macros.bzl"}


def test_bzl_may_define_functions_and_lambdas(make_workspace: MakeWorkspace) -> None:
    ws = make_workspace(
        {
            "defs.bzl": """\
                def names(n):
                    return [str(i) for i in range(n)]

                SQUARE = lambda x: x * x

                def _private():
                    return "never exported"
                """,
            "BUILD": """\
                load("//:defs.bzl", "SQUARE", "names")

                [filegroup(name = "t" + n) for n in names(2)]
                filegroup(name = "sq" + str(SQUARE(3)))
                """,
        }
    )
    assert list(_package(ws, "").targets) == ["t0", "t1", "sq9"]


def test_same_bzl_serves_every_package_with_its_own_package(
    make_workspace: MakeWorkspace,
) -> None:
    ws = make_workspace(
        {
            "tools/BUILD": "",
            "tools/macros.bzl": MACROS,
            "a/BUILD": 'load("//tools:macros.bzl", "stamped")\nstamped(name = "s")\n',
            "b/BUILD": 'load("//tools:macros.bzl", "stamped")\nstamped(name = "s")\n',
        }
    )
    loader = ws.loader()
    assert loader.package("a").targets["s"].attrs["cmd"] == "echo a > $@"
    assert loader.package("b").targets["s"].attrs["cmd"] == "echo b > $@"
    assert loader.package("b").targets["s_files"].deps == ("//b:s.txt",)


def test_glob_include_and_exclude(make_workspace: MakeWorkspace) -> None:
    ws = make_workspace(
        {
            "app/BUILD": """\
                filegroup(
                    name = "py",
                    srcs = glob(["*.py", "lib/**/*.py"], exclude = ["*_test.py", "lib/skip/**"]),
                )
                filegroup(name = "none", srcs = glob(["*.rs"]))
                """,
            "app/a.py": "",
            "app/a_test.py": "",
            "app/b.py": "",
            "app/notes.txt": "",
            "app/lib/c.py": "",
            "app/lib/deep/d.py": "",
            "app/lib/skip/e.py": "",
            "app/sub/BUILD": "",
            "app/sub/f.py": "",
        }
    )
    targets = _package(ws, "app").targets
    assert targets["py"].attrs["srcs"] == [
        "//app:a.py",
        "//app:b.py",
        "//app:lib/c.py",
        "//app:lib/deep/d.py",
    ]
    assert targets["none"].attrs["srcs"] == []


def test_package_default_visibility_applies_to_targets(make_workspace: MakeWorkspace) -> None:
    ws = make_workspace(
        {
            "app/BUILD": """\
                package(default_visibility = ["//visibility:public"])

                filegroup(name = "a")
                filegroup(name = "b", visibility = ["//app:__pkg__"])
                """,
        }
    )
    package = _package(ws, "app")
    assert package.default_visibility == ["//visibility:public"]
    assert package.targets["a"].attrs["visibility"] == ["//visibility:public"]
    assert package.targets["b"].attrs["visibility"] == ["//app:__pkg__"]


def test_exports_files_makes_files_targets_of_the_package(make_workspace: MakeWorkspace) -> None:
    ws = make_workspace({"BUILD": 'exports_files(["README.md"])\n', "README.md": ""})
    assert _package(ws, "").source_files == ("//:README.md",)


def test_build_file_bazel_spelling_is_a_package(make_workspace: MakeWorkspace) -> None:
    ws = make_workspace({"app/BUILD.bazel": 'filegroup(name = "a")\n'})
    package = _package(ws, "app")
    assert (package.build_file, list(package.targets)) == ("app/BUILD.bazel", ["a"])


@pytest.mark.parametrize(
    ("build", "message"),
    [
        ('x = open("f")\n', "name 'open' is not defined (no such rule or function)"),
        ("import os\n", "syntax error: cannot use reserved keyword `import`"),
        ('x = __import__("os")\n', "name '__import__' is not defined (no such rule or function)"),
        ('x = getattr(native, "x")\n', "name 'native' is not defined (no such rule or function)"),
        ("def f():\n    pass\n", "functions may not be defined in BUILD files"),
        ("f = lambda: 1\n", "lambda expressions may not be used in BUILD files"),
        ("for x in []:\n    pass\n", "'for' statements are not allowed in BUILD files"),
    ],
)
def test_build_files_can_do_no_io_and_import_nothing(
    make_workspace: MakeWorkspace, build: str, message: str
) -> None:
    ws = make_workspace({"app/BUILD": build})
    with pytest.raises(KilnError) as raised:
        _package(ws, "app")
    assert raised.value.message == message
    assert raised.value.location is not None
    assert raised.value.location.file == "app/BUILD"


def test_bzl_files_can_do_no_io_either(make_workspace: MakeWorkspace) -> None:
    ws = make_workspace(
        {
            "defs.bzl": 'def read():\n    return open("/etc/passwd")\n',
            "BUILD": 'load("//:defs.bzl", "read")\n',
        }
    )
    with pytest.raises(KilnError) as raised:
        _package(ws, "")
    assert raised.value.format().startswith(
        "defs.bzl:2:12: name 'open' is not defined (no such rule or function)"
    )


def test_rule_at_bzl_top_level_does_not_leak_into_the_loading_package(
    make_workspace: MakeWorkspace,
) -> None:
    ws = make_workspace(
        {
            "BUILD": "",
            "defs.bzl": 'native.filegroup(name = "sneaky")\nX = 1\n',
            "a/BUILD": 'load("//:defs.bzl", "X")\nfilegroup(name = "a")\n',
        }
    )
    with pytest.raises(KilnError, match=r"filegroup\(\) can only be called while a BUILD file"):
        _package(ws, "a")


def test_unknown_rule_error_names_the_target_it_declared(make_workspace: MakeWorkspace) -> None:
    ws = make_workspace({"app/BUILD": 'filegroup(name = "a")\n\nfilegrop(\n    name = "b",\n)\n'})
    with pytest.raises(KilnError) as raised:
        _package(ws, "app")
    assert raised.value.format() == (
        "app/BUILD:3:1: //app:b: name 'filegrop' is not defined (no such rule or function)\n"
        "  hint: did you mean 'filegroup'?"
    )


def test_non_utf8_build_file_is_an_error_not_a_crash(make_workspace: MakeWorkspace) -> None:
    ws = make_workspace({})
    (ws.root / "app").mkdir()
    (ws.root / "app/BUILD").write_bytes(b'filegroup(name = "\xff")\n')
    with pytest.raises(KilnError) as raised:
        _package(ws, "app")
    assert raised.value.format() == "app/BUILD: app/BUILD is not valid UTF-8 (byte 18)"


def test_verbose_details_hold_the_starlark_stack_of_a_macro_error(
    make_workspace: MakeWorkspace,
) -> None:
    ws = make_workspace(
        {
            "tools/BUILD": "",
            "tools/macros.bzl": MACROS,
            "app/BUILD": 'load("//tools:macros.bzl", "py_group")\npy_group(name = "g", srcs = 3)\n',
        }
    )
    with pytest.raises(KilnError) as raised:
        _package(ws, "app")
    error = raised.value
    assert error.format() == (
        "app/BUILD:2:1: //app:g: attribute 'srcs' of filegroup() should be a valid list (got 3)"
    )
    verbose = error.format(verbose=True)
    assert "* app/BUILD:2, in <module>" in verbose
    assert "* tools/macros.bzl:2, in py_group" in verbose


def test_glob_skips_kiln_out_and_ignored_directories(make_workspace: MakeWorkspace) -> None:
    ws = make_workspace(
        {
            "BUILD": 'filegroup(name = "all", srcs = glob(["**/*.txt"]))\n',
            ".kilnignore": "data/big\n",
            "a.txt": "",
            "data/small.txt": "",
            "data/big/huge.txt": "",
            "kiln-out/app/out.txt": "",
            ".git/objects/x.txt": "",
            "src/.hidden/kept.txt": "",
        }
    )
    srcs = _package(ws, "").targets["all"].attrs["srcs"]
    assert srcs == ["//:a.txt", "//:data/small.txt", "//:src/.hidden/kept.txt"]


def test_every_rule_has_a_strict_pydantic_schema() -> None:
    from kiln.rule_api import RuleAttrs
    from kiln.rules import all_rules

    for name, rule in all_rules().items():
        assert rule.name == name
        assert issubclass(rule.attrs, RuleAttrs)
        config = rule.attrs.model_config
        assert (config.get("extra"), config.get("strict"), config.get("frozen")) == (
            "forbid",
            True,
            True,
        ), name


def test_glob_through_symlinks_fanning_out_is_an_error_not_a_hang(
    make_workspace: MakeWorkspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(glob, "MAX_ENTRIES", 1_000)
    ws = make_workspace({"p/BUILD": 'filegroup(name = "all", srcs = glob(["**"]))\n'})
    for level in range(12):  # each level links twice to the next: 4,096 paths to the last
        (ws.root / f"p/l{level}").mkdir()
        if level:
            os.symlink(f"../l{level}", ws.root / f"p/l{level - 1}/a")
            os.symlink(f"../l{level}", ws.root / f"p/l{level - 1}/b")
    run = ws.kiln("query", "//...")
    assert run.code == 1
    assert run.err == (
        "ERROR: p/BUILD:1:32: //p:all: glob(['**']) examined more than 1,000 directory "
        "entries in package 'p'\n"
        "  hint: symlinks inside the package may lead into the same directories again and "
        "again; narrow the pattern, or list the directory in .kilnignore\n"
    )
