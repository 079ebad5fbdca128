"""canonical() is Label.parse's fast path: it must agree with it on every input."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kiln.errors import LabelError
from kiln.label import Label, canonical

# Characters that matter to label syntax, plus ordinary and unusual ones.
_ALPHABET = st.sampled_from(list('ab1_-.:/@+=,~#% \\"\t\x00é'))


def _expected(text: str, package: str) -> str | LabelError:
    try:
        return str(Label.parse(text, package))
    except LabelError as error:
        return error


@given(text=st.text(_ALPHABET, max_size=12), package=st.sampled_from(["", "pkg", "a/b"]))
def test_canonical_agrees_with_label_parse(text: str, package: str) -> None:
    expected = _expected(text, package)
    if isinstance(expected, LabelError):
        with pytest.raises(LabelError) as raised:
            canonical(text, package)
        assert raised.value.message == expected.message
    else:
        assert canonical(text, package) == expected


@pytest.mark.parametrize(
    ("text", "package", "label"),
    [
        ("//pkg0001:concat", "x", "//pkg0001:concat"),
        (":srcs", "pkg", "//pkg:srcs"),
        ("src/data/a.txt", "pkg", "//pkg:src/data/a.txt"),
        ("//:root", "pkg", "//:root"),
        ("//a/b", "pkg", "//a/b:b"),
        ("@//a:b", "pkg", "//a:b"),
        (".hidden", "pkg", "//pkg:.hidden"),
    ],
)
def test_canonical_forms(text: str, package: str, label: str) -> None:
    assert canonical(text, package) == label


@pytest.mark.parametrize("text", ["//a/..:b", "//a:", ":a:b", "//.../x:y", "//a//b:c", "/a:b"])
def test_canonical_rejects_what_label_parse_rejects(text: str) -> None:
    with pytest.raises(LabelError):
        canonical(text, "pkg")
