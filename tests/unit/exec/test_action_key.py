"""The action key: what may change an action's result is in it, nothing else."""

from __future__ import annotations

from kiln.action_graph import Action, File
from kiln.cache.digest import digest_bytes
from kiln.exec.action_key import compute_key

ACTION = Action(
    "//a:b",
    "Genrule",
    ("/bin/bash", "-c", "./tool.sh > $@"),
    (File("a/tool.sh"),),
    (File("kiln-out/a/o"),),
)
DIGESTS = {"a/tool.sh": digest_bytes(b"#!/bin/sh\necho hi\n")}


def test_the_executable_bit_of_an_input_is_in_the_key() -> None:
    """Issue 11 A4: `chmod +x` of an input was a cache hit, serving a stale output."""
    plain = compute_key(ACTION, DIGESTS, "sha256")
    runnable = compute_key(ACTION, DIGESTS, "sha256", executable={"a/tool.sh"})
    assert plain.key != runnable.key
    assert plain.input_root_digest != runnable.input_root_digest
    assert plain.inputs["a/tool.sh"] != runnable.inputs["a/tool.sh"]  # --explain names it


def test_the_key_is_the_same_for_the_same_inputs() -> None:
    assert compute_key(ACTION, DIGESTS, "sha256", {"a/tool.sh"}) == compute_key(
        ACTION, dict(DIGESTS), "sha256", frozenset({"a/tool.sh"})
    )
