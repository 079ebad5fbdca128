"""Target, FileStamp and Package pickle as constructor calls (__reduce__), for a fast
graph cache: a field added to one of them must be added to its __reduce__ too."""

from __future__ import annotations

import dataclasses
import pickle

import pytest
from kiln.loading.package import FileStamp, Package, Target

TARGET = Target("//a:b", "genrule", {"outs": ["b.txt"]}, ("//a:c",), 3)
STAMP = FileStamp("a/BUILD", 1, 2, 3, 4, 5)
PACKAGE = Package(
    "a",
    "a/BUILD",
    {"b": TARGET},
    ["//visibility:public"],
    (STAMP,),
    ("//a:x",),
    frozenset({"c"}),
    {"x": ("//visibility:public",)},
)


@pytest.mark.parametrize("value", [TARGET, STAMP, PACKAGE], ids=lambda v: type(v).__name__)
def test_reduce_names_every_field(value: Target | FileStamp | Package) -> None:
    cls, args = value.__reduce__()
    assert cls is type(value)
    assert args == tuple(getattr(value, f.name) for f in dataclasses.fields(value))


def test_package_round_trips_through_pickle() -> None:
    assert pickle.loads(pickle.dumps(PACKAGE, pickle.HIGHEST_PROTOCOL)) == PACKAGE
