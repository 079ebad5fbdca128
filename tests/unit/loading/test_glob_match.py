"""glob() matching, with Bazel's semantics, over one package's directory tree."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from kiln.loading import glob as glob_module
from kiln.loading.glob import check_pattern, glob

FILES = [
    "a.py",
    "b.py",
    "b_test.py",
    ".hidden.py",
    "x.pyc",
    "a+b[1].py",
    "lib/c.py",
    "lib/deep/d.py",
    "lib/deep/data.json",
    "sub/BUILD",
    "sub/e.py",
    "sub/inner/f.py",
]


@pytest.fixture
def package(tmp_path: Path) -> Path:
    for name in FILES:
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("")
    (tmp_path / "empty_dir").mkdir()
    return tmp_path


def _matches(package: Path, include: list[str], exclude: list[str] | None = None) -> list[str]:
    return glob(package, include, exclude or [])[0]


@pytest.mark.parametrize(
    ("include", "expected"),
    [
        (["*.py"], [".hidden.py", "a+b[1].py", "a.py", "b.py", "b_test.py"]),
        (["?.py"], ["a.py", "b.py"]),
        (["lib/*.py"], ["lib/c.py"]),
        (
            ["**/*.py"],
            [".hidden.py", "a+b[1].py", "a.py", "b.py", "b_test.py", "lib/c.py", "lib/deep/d.py"],
        ),
        (["lib/**"], ["lib/c.py", "lib/deep/d.py", "lib/deep/data.json"]),
        (["lib/**/d.py"], ["lib/deep/d.py"]),
        (["**/deep/*"], ["lib/deep/d.py", "lib/deep/data.json"]),
        (["a+b[1].py"], ["a+b[1].py"]),  # regex characters are literal
        (["*"], [".hidden.py", "a+b[1].py", "a.py", "b.py", "b_test.py", "x.pyc"]),
        (["lib", "empty_dir", "lib/deep"], []),  # directories are never matched
        (["*.rs"], []),
        (
            ["b.py", "*.py"],
            [".hidden.py", "a+b[1].py", "a.py", "b.py", "b_test.py"],
        ),  # no duplicates
    ],
)
def test_include_patterns(package: Path, include: list[str], expected: list[str]) -> None:
    assert _matches(package, include) == expected


def test_star_does_not_cross_a_slash(package: Path) -> None:
    assert _matches(package, ["l*"]) == []
    assert _matches(package, ["*/c.py"]) == ["lib/c.py"]


def test_exclude_removes_matches(package: Path) -> None:
    assert _matches(package, ["**/*.py"], ["*_test.py", "lib/deep/**", ".*"]) == [
        "a+b[1].py",
        "a.py",
        "b.py",
        "lib/c.py",
    ]


def test_subpackages_are_not_entered(package: Path) -> None:
    everything = _matches(package, ["**"])
    assert not [path for path in everything if path.startswith("sub/")]
    assert _matches(package, ["sub/*.py"]) == []


def test_listed_directories_include_subpackages_for_the_graph_cache(package: Path) -> None:
    _, listed = glob(package, ["**"], [])
    assert sorted(listed) == ["", "empty_dir", "lib", "lib/deep", "sub"]


def test_symlinks_are_followed_but_cycles_are_not(package: Path) -> None:
    os.symlink("../a.py", package / "lib/link.py")
    os.symlink("deep", package / "lib/alias")
    os.symlink(".", package / "lib/deep/self")
    os.symlink("..", package / "lib/deep/up")
    os.symlink("nowhere", package / "lib/dangling.py")
    matches = _matches(package, ["lib/**/*.py"])
    assert matches == [
        "lib/alias/d.py",
        "lib/c.py",
        "lib/dangling.py",
        "lib/deep/d.py",
        "lib/link.py",
    ]


@pytest.mark.parametrize(
    ("pattern", "problem"),
    [
        ("", "empty glob pattern"),
        ("/abs/*.py", "glob pattern '/abs/*.py' may not start or end with '/'"),
        ("dir/", "glob pattern 'dir/' may not start or end with '/'"),
        ("../*.py", "glob pattern '../*.py' may not contain '.' or '..' segments"),
        ("./a.py", "glob pattern './a.py' may not contain '.' or '..' segments"),
        ("a**/b", "glob pattern 'a**/b': '**' must be a whole path segment"),
        ("*.py", None),
        ("**/x/**", None),
    ],
)
def test_check_pattern(pattern: str, problem: str | None) -> None:
    assert check_pattern(pattern) == problem


def test_ignored_directories_are_not_entered(package: Path) -> None:
    matches, listed = glob(package, ["**/*.py"], [], lambda rel: rel == "lib/deep")
    assert "lib/deep/d.py" not in matches
    assert "lib/c.py" in matches
    assert "lib/deep" not in listed


def test_symlinks_out_of_the_package_add_nothing(
    package: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    # Issue 11, B4: a link to /usr/include made 17,161 files outside the workspace sources.
    outside = tmp_path_factory.mktemp("outside")
    (outside / "stdio.h").write_text("")
    (outside / "sys").mkdir()
    (outside / "sys/types.h").write_text("")
    os.symlink(outside, package / "lib/include")
    os.symlink(outside / "stdio.h", package / "lib/stdio.h")
    os.symlink("../../outside_nowhere/../" + outside.name, package / "lib/relative")
    assert _matches(package, ["lib/**"]) == ["lib/c.py", "lib/deep/d.py", "lib/deep/data.json"]


@pytest.mark.timeout(20)
def test_symlink_to_the_root_directory_does_not_hang(package: Path) -> None:
    os.symlink("/", package / "lib/root")
    os.symlink("/usr/include", package / "lib/include")
    assert _matches(package, ["**/*.h", "lib/**"]) == [
        "lib/c.py",
        "lib/deep/d.py",
        "lib/deep/data.json",
    ]


def test_fifo_is_no_source(package: Path) -> None:
    os.mkfifo(package / "lib/pipe.py")
    assert _matches(package, ["lib/*.py"]) == ["lib/c.py"]


def test_symlinks_fanning_out_inside_the_package_stop_at_the_entry_limit(
    package: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # 20 levels, each linking twice to the next: 2**20 paths to the last one.
    monkeypatch.setattr(glob_module, "MAX_ENTRIES", 10_000)
    for level in range(20):
        (package / f"fan/l{level}").mkdir(parents=True)
        (package / f"fan/l{level}/f.txt").write_text("")
        if level:
            os.symlink(f"../l{level}", package / f"fan/l{level - 1}/a")
            os.symlink(f"../l{level}", package / f"fan/l{level - 1}/b")
    with pytest.raises(glob_module.GlobTooLarge):
        _matches(package, ["fan/**"])
