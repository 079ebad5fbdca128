"""`@pip//name`: targets made from the workspace's lock, as rules_python's hub makes them."""

from __future__ import annotations

import os
import time

import pytest

from tests.kiln_workspace import MakeWorkspace

H1 = "sha256:" + "1" * 64
H2 = "sha256:" + "2" * 64
LOCK = f"""\
huggingface-hub==0.36.2 --hash={H1}
    # via timm
pyyaml==6.0.4 --hash={H2}
    # via huggingface-hub
timm==1.0.31 --hash={H2}
    # via -r requirements.in
"""
FILES = {
    "BUILD": 'python_requirements(name = "pip", lock = "requirements_lock.txt")\n',
    "requirements_lock.txt": LOCK,
    "app/BUILD": 'filegroup(name = "a", srcs = ["@pip//timm", "a.txt"])\n',
    "app/a.txt": "",
}


def test_a_pip_label_is_a_target_of_the_lock(make_workspace: MakeWorkspace) -> None:
    ws = make_workspace(FILES)
    assert ws.query("deps(//app:a)") == [
        "//:pip",
        "//:requirements_lock.txt",
        "@pip//timm:timm",
        "//app:a",
        "//app:a.txt",
    ]
    shown = ws.kiln("query", "--output=label_kind", "deps(//app:a)")
    assert "python_requirement rule @pip//timm:timm" in shown.out


def test_its_closure_comes_from_the_via_annotations(make_workspace: MakeWorkspace) -> None:
    ws = make_workspace(FILES)
    loader = ws.loader()
    target = loader.package("@pip//timm").targets["timm"]
    assert [(p["name"], p["version"]) for p in target.attrs["closure"]] == [
        ("huggingface_hub", "0.36.2"),
        ("pyyaml", "6.0.4"),
        ("timm", "1.0.31"),
    ]
    assert target.attrs["line"] == 5
    assert str(loader.location_of(target)) == "requirements_lock.txt"


def test_editing_the_lock_loads_the_package_again(make_workspace: MakeWorkspace) -> None:
    ws = make_workspace(FILES)
    assert "@pip//timm:timm" in ws.query("deps(//app:a)")
    time.sleep(0.01)
    lock = ws.root / "requirements_lock.txt"
    lock.write_text(LOCK.replace("timm==1.0.31", "timm==1.0.32"))
    os.utime(lock, ns=(time.time_ns(), time.time_ns() + 10**9))  # surely not racily clean
    target = ws.loader().package("@pip//timm").targets["timm"]
    assert target.attrs["closure"][-1]["version"] == "1.0.32"


def test_an_unknown_package_is_named_with_the_closest_one(make_workspace: MakeWorkspace) -> None:
    ws = make_workspace({**FILES, "app/BUILD": 'filegroup(name = "a", srcs = ["@pip//tim"])\n'})
    result = ws.kiln("query", "deps(//app:a)")
    assert result.code == 1
    assert result.err == (
        "ERROR: app/BUILD:1:1: //app:a: attribute 'srcs' refers to '@pip//tim:tim': no package "
        "'tim' in @pip: requirements_lock.txt pins no such distribution\n"
        "  hint: did you mean '@pip//timm'?\n"
    )


@pytest.mark.parametrize("name", ["torch", "Torch_TensorRT", "tensorrt_rtx_cu13_libs"])
def test_a_toolchain_package_is_named_as_the_toolchains(
    make_workspace: MakeWorkspace, name: str
) -> None:
    """Issue 20: `@pip//torch` suggested '@pip//rich' (the closest name in the lock)."""
    ws = make_workspace({**FILES, "app/BUILD": f'filegroup(name = "a", srcs = ["@pip//{name}"])\n'})
    result = ws.kiln("query", "deps(//app:a)")
    assert result.code == 1
    assert result.err == (
        f"ERROR: app/BUILD:1:1: //app:a: attribute 'srcs' refers to '@pip//{name}:{name}': "
        f"'{name}' is not in @pip: it is the toolchain's, and every Python action has it "
        "(kiln info toolchains)\n"
        f"  hint: drop '@pip//{name}' from the deps: torch and its companions come with the "
        "toolchain, never from a lock\n"
    )


def test_a_repository_nobody_declared_says_where_to_declare_it(
    make_workspace: MakeWorkspace,
) -> None:
    ws = make_workspace({**FILES, "app/BUILD": 'filegroup(name = "a", srcs = ["@pypi//timm"])\n'})
    result = ws.kiln("query", "deps(//app:a)")
    assert result.code == 1
    assert "no repository '@pypi': the root BUILD file declares no " in result.err
    assert 'python_requirements(name = "pypi", lock = "requirements_lock.txt")' in result.err


def test_a_bad_lock_line_is_reported_at_its_line(make_workspace: MakeWorkspace) -> None:
    ws = make_workspace({**FILES, "requirements_lock.txt": LOCK + "numpy==2.4.6\n"})
    result = ws.kiln("query", "deps(//app:a)")
    assert result.code == 1
    assert result.err.startswith("ERROR: requirements_lock.txt:7: 'numpy==2.4.6' has no --hash"), (
        result.err
    )


def test_a_pip_label_is_a_pattern_of_its_own(make_workspace: MakeWorkspace) -> None:
    """Issue 20: `kiln query '@pip//timm'` was refused although deps() prints such labels."""
    ws = make_workspace(FILES)
    assert ws.query("@pip//timm") == ["@pip//timm:timm"]
    assert ws.query("@pip//timm:timm + //app:a") == ["@pip//timm:timm", "//app:a"]
    assert ws.query("deps(//app:a) - @pip//timm") == [
        "//:pip",
        "//:requirements_lock.txt",
        "//app:a",
        "//app:a.txt",
    ]


@pytest.mark.parametrize("pattern", ["@pip//...", "@pip//timm:all", "@pip//timm/...:*"])
def test_wildcards_over_a_pip_repository_say_to_name_a_target(
    make_workspace: MakeWorkspace, pattern: str
) -> None:
    result = make_workspace(FILES).kiln("query", pattern)
    assert (result.code, result.out) == (1, "")
    assert result.err == (
        f"ERROR: invalid target pattern '{pattern}': wildcards over an external repository "
        "are not supported: name one of its targets, as in '@pip//name'\n"
    )
