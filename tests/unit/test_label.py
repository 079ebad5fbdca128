"""Labels and target patterns, written exactly as Bazel writes them."""

from __future__ import annotations

import string

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kiln.errors import LabelError
from kiln.label import Label, PatternKind, TargetPattern, target_name_problem

# Characters Bazel allows that need no quoting; ':' '"' '\\' and whitespace never appear.
_PACKAGE_CHARS = string.ascii_letters + string.digits + "-_.+=~,"
_NAME_CHARS = _PACKAGE_CHARS + "@!%^#$&'()*;<>?[]{|}"


def _segments(chars: str) -> st.SearchStrategy[str]:
    return st.text(chars, min_size=1, max_size=8).filter(lambda s: s.strip(".") != "")


packages = st.lists(_segments(_PACKAGE_CHARS), max_size=4).map("/".join)
names = st.lists(_segments(_NAME_CHARS), min_size=1, max_size=3).map("/".join)
labels = st.builds(Label, packages, names)


# -- round trip and canonical form ---------------------------------------------


@given(labels)
def test_str_then_parse_round_trips(label: Label) -> None:
    assert Label.parse(str(label)) == label


@given(labels, packages)
def test_absolute_label_ignores_current_package(label: Label, current: str) -> None:
    assert Label.parse(str(label), current) == label


@given(labels)
def test_str_is_the_canonical_double_slash_colon_form(label: Label) -> None:
    text = str(label)
    assert text == f"//{label.package}:{label.name}"
    assert str(Label.parse(text)) == text


@given(packages.filter(bool))
def test_package_alone_means_the_target_named_after_its_last_segment(package: str) -> None:
    last = package.rsplit("/", 1)[-1]
    assert Label.parse(f"//{package}") == Label(package, last)
    assert str(Label.parse(f"//{package}")) == f"//{package}:{last}"


@given(packages, names)
def test_colon_name_resolves_against_the_current_package(package: str, name: str) -> None:
    assert Label.parse(f":{name}", package) == Label(package, name)


@given(packages, names.filter(lambda n: not n.startswith("@")))
def test_bare_name_resolves_against_the_current_package(package: str, name: str) -> None:
    assert Label.parse(name, package) == Label(package, name)


@given(labels)
def test_relative_to_own_package_is_colon_name(label: Label) -> None:
    assert label.relative_to(label.package) == f":{label.name}"
    assert Label.parse(label.relative_to(label.package), label.package) == label
    assert label.relative_to(label.package + "x") == str(label)


@given(st.text(max_size=30))
def test_parse_of_any_text_gives_a_label_or_a_label_error(text: str) -> None:
    try:
        label = Label.parse(text, "pkg")
    except LabelError as error:
        assert "\n" not in error.format()  # one line saying what is wrong
        return
    assert Label.parse(str(label)) == label


@pytest.mark.parametrize(
    ("text", "current", "expected"),
    [
        ("//pkg:name", "", Label("pkg", "name")),
        ("//pkg", "", Label("pkg", "pkg")),
        ("//a/b/c", "", Label("a/b/c", "c")),
        ("//:root", "elsewhere", Label("", "root")),
        (":name", "a/b", Label("a/b", "name")),
        ("name", "a/b", Label("a/b", "name")),
        ("dir/file.txt", "pkg", Label("pkg", "dir/file.txt")),
        ("name", "", Label("", "name")),
        ("//pkg:a.b-c_d+e@f", "", Label("pkg", "a.b-c_d+e@f")),
        ("//pkg:...", "", Label("pkg", "...")),
        ("//pkg/a...:x", "", Label("pkg/a...", "x")),
        ("@//pkg:name", "", Label("pkg", "name")),  # the main repository
        ("@@//pkg:name", "", Label("pkg", "name")),
    ],
)
def test_parse_accepts_bazel_forms(text: str, current: str, expected: Label) -> None:
    assert Label.parse(text, current) == expected


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "invalid label '': empty label"),
        (
            "//",
            "invalid label '//': the root package needs an explicit target name, as in '//:name'",
        ),
        ("//pkg:", "invalid label '//pkg:': empty target name"),
        (":", "invalid label ':': empty target name"),
        ("//pkg:a:b", "invalid label '//pkg:a:b': target name contains the character ':'"),
        (
            "a:b",
            "invalid label 'a:b': a relative label with a package must be written '//pkg:name'",
        ),
        ("/pkg:x", "invalid label '/pkg:x': absolute labels start with '//', not '/'"),
        ("///pkg:x", "invalid label '///pkg:x': package name may not start or end with '/'"),
        ("//pkg/:x", "invalid label '//pkg/:x': package name may not start or end with '/'"),
        ("//pkg:x/", "invalid label '//pkg:x/': target name may not start or end with '/'"),
        ("//a//b:c", "invalid label '//a//b:c': package name contains '//'"),
        ("//pkg:a//b", "invalid label '//pkg:a//b': target name contains '//'"),
        (
            "//a/../b:c",
            "invalid label '//a/../b:c': package name may not contain '..' as a path segment",
        ),
        (
            "//pkg:../x",
            "invalid label '//pkg:../x': target name may not contain '..' as a path segment",
        ),
        (
            "//pkg:a/./b",
            "invalid label '//pkg:a/./b': target name may not contain '.' as a path segment",
        ),
        (
            "//a/.../b:c",
            "invalid label '//a/.../b:c': package name may not contain '...' as a path segment",
        ),
        ("//p@x:y", "invalid label '//p@x:y': package name contains the character '@'"),
        ("//pkg:a b", "invalid label '//pkg:a b': target name contains the character ' '"),
        ("//pkg:a\tb", "invalid label '//pkg:a\\tb': target name contains the character '\\t'"),
        ('//pkg:a"b', "invalid label '//pkg:a\"b': target name contains the character '\"'"),
        (
            "@repo//a:b",
            "invalid label '@repo//a:b': external repositories (@repo//...) are not supported",
        ),
    ],
)
def test_invalid_label_is_one_line_saying_what_is_wrong(text: str, message: str) -> None:
    with pytest.raises(LabelError) as raised:
        Label.parse(text, "pkg")
    assert raised.value.format() == message


def test_target_name_problem_says_why_a_name_is_invalid() -> None:
    assert target_name_problem("ok/name.txt") is None
    assert target_name_problem("a:b") == "target name contains the character ':'"
    assert target_name_problem("") == "empty target name"


# -- target patterns -----------------------------------------------------------


# As in Bazel, `:all`, `:all-targets` and `:*` after a package are always its wildcards:
# a target of such a name cannot be named by a single-target pattern.
WILDCARD_NAMES = ("all", "all-targets", "*")


@given(labels.filter(lambda label: label.name not in WILDCARD_NAMES))
def test_a_label_is_a_single_target_pattern(label: Label) -> None:
    pattern = TargetPattern.parse(str(label), "cwd")
    assert (pattern.kind, pattern.label, pattern.negative) == (PatternKind.SINGLE, label, False)
    negative = TargetPattern.parse(f"-{label}")
    assert (negative.kind, negative.label, negative.negative) == (PatternKind.SINGLE, label, True)


@pytest.mark.parametrize(
    ("text", "working", "kind", "package", "name"),
    [
        ("//pkg:name", "", PatternKind.SINGLE, "pkg", "name"),
        ("//pkg", "", PatternKind.SINGLE, "pkg", "pkg"),
        ("//pkg:all", "", PatternKind.PACKAGE_RULES, "pkg", ""),
        ("//pkg:*", "", PatternKind.PACKAGE_TARGETS, "pkg", ""),
        ("//pkg:all-targets", "", PatternKind.PACKAGE_TARGETS, "pkg", ""),
        ("//:all", "", PatternKind.PACKAGE_RULES, "", ""),
        ("//pkg/...", "", PatternKind.RECURSIVE_RULES, "pkg", ""),
        ("//pkg/...:all", "", PatternKind.RECURSIVE_RULES, "pkg", ""),
        ("//pkg/...:*", "", PatternKind.RECURSIVE_TARGETS, "pkg", ""),
        ("//...", "", PatternKind.RECURSIVE_RULES, "", ""),
        ("//...:all-targets", "", PatternKind.RECURSIVE_TARGETS, "", ""),
        # relative to the working directory, as Bazel reads them
        (":name", "a/b", PatternKind.SINGLE, "a/b", "name"),
        (":all", "a/b", PatternKind.PACKAGE_RULES, "a/b", ""),
        (":*", "a", PatternKind.PACKAGE_TARGETS, "a", ""),
        ("...", "a", PatternKind.RECURSIVE_RULES, "a", ""),
        ("sub/...", "a", PatternKind.RECURSIVE_RULES, "a/sub", ""),
        ("sub:name", "a", PatternKind.SINGLE, "a/sub", "name"),
        ("sub/x", "a", PatternKind.RELATIVE_AMBIGUOUS, "a", "sub/x"),
        ("name", "", PatternKind.RELATIVE_AMBIGUOUS, "", "name"),
        ("sub/", "a", PatternKind.RELATIVE_AMBIGUOUS, "a", "sub"),
    ],
)
def test_pattern_forms(text: str, working: str, kind: PatternKind, package: str, name: str) -> None:
    pattern = TargetPattern.parse(text, working)
    assert (pattern.kind, pattern.package, pattern.name) == (kind, package, name)
    assert pattern.text == text


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("-", "invalid target pattern '-': empty pattern"),
        (
            # A flag after `--` (which makes every later word a pattern, as in Bazel)
            "--explain",
            "invalid target pattern '--explain': a pattern starts with one '-' at most (a "
            "subtraction, as in -//pkg:x); every word after '--' is a target pattern: put "
            "flags before '--'",
        ),
        ("/abs", "invalid target pattern '/abs': absolute patterns start with '//'"),
        (
            "//pkg/...:name",
            "invalid target pattern '//pkg/...:name': after '...' only ':all', ':*' or "
            "':all-targets' may follow",
        ),
        (
            "//pkg/.../sub",
            "invalid target pattern '//pkg/.../sub': '...' may only end the package part of a "
            "pattern, as in '//pkg/...'",
        ),
        ("//a//b", "invalid target pattern '//a//b': package name contains '//'"),
        (
            "../up",
            "invalid target pattern '../up': package name may not contain '..' as a path segment",
        ),
        (
            "@r//:x",
            "invalid target pattern '@r//:x': name a package of the repository, as in '@r//name'",
        ),
    ],
)
def test_invalid_pattern_is_one_line_saying_what_is_wrong(text: str, message: str) -> None:
    with pytest.raises(LabelError) as raised:
        TargetPattern.parse(text, "pkg")
    assert raised.value.format() == message
