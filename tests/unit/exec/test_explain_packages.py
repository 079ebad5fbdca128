"""--explain on a Python action whose locked packages changed: names each package and
both of its pins, apart from the toolchain's own versions."""

from __future__ import annotations

from pathlib import Path

import pytest
from kiln.action_graph import Action, File
from kiln.exec.action_key import ActionKey
from kiln.exec.explain import ExplainLog

OUT = File("kiln-out/m/w.safetensors")


def action(platform: dict[str, str]) -> Action:
    return Action(
        owner="//m:w",
        mnemonic="ModelWeights",
        argv=("python", "-m", "kiln.actions.weights", "w.json"),
        inputs=(),
        outputs=(OUT,),
        platform=tuple(platform.items()),
    )


def key(platform: dict[str, str], name: str) -> ActionKey:
    # The command digest holds the platform; the invocation digest (the rest) does not.
    return ActionKey(name, f"command {name}", "root", "invocation", {}, platform=_sorted(platform))


def _sorted(platform: dict[str, str]) -> tuple[tuple[str, str], ...]:
    return tuple(sorted(platform.items()))


@pytest.mark.parametrize(
    ("before", "after", "reason"),
    [
        (
            {"pip:timm": "1.0.31 sha256:aa", "torch": "2.13.0"},
            {"pip:timm": "1.0.32 sha256:bb", "torch": "2.13.0"},
            "python package changed: timm 1.0.31 -> 1.0.32",
        ),
        (
            {"pip:timm": "1.0.31 sha256:" + "a" * 64},
            {"pip:timm": "1.0.31 sha256:" + "b" * 64},
            "python package changed: timm 1.0.31 (another wheel: sha256:aaaaaaaaaaaa... -> "
            "sha256:bbbbbbbbbbbb...)",
        ),
        (
            {},
            {"pip:pyyaml": "6.0.4 sha256:cc"},
            "python package changed: pyyaml 6.0.4 added",
        ),
        (
            {"pip:pyyaml": "6.0.4 sha256:cc", "torch": "2.12.0"},
            {"torch": "2.13.0"},
            "toolchain changed: torch 2.12.0 -> 2.13.0; python package changed: pyyaml 6.0.4 "
            "removed",
        ),
    ],
)
def test_a_changed_pin_is_named_with_both_versions(
    tmp_path: Path, before: dict[str, str], after: dict[str, str], reason: str
) -> None:
    log = ExplainLog(tmp_path / "explain.pickle")
    log.record(action(before), key(before, "old"))
    assert log.why(action(after), key(after, "new")) == reason
