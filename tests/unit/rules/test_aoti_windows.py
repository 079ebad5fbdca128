"""The Windows torch pin: the rule's and the install script's are one wheel."""

from __future__ import annotations

from pathlib import Path

from kiln.rules.aoti.aoti_windows import WINDOWS_TORCH

LOCK = Path(__file__).resolve().parents[3] / "tools" / "windows" / "torch_win_amd64.lock"


def test_the_rule_pins_the_wheel_the_install_script_fetches() -> None:
    lines = [ln for ln in LOCK.read_text().splitlines() if ln and not ln.startswith("#")]
    assert lines == [WINDOWS_TORCH.requirement().strip()]
    assert WINDOWS_TORCH.wheel == f"torch-{WINDOWS_TORCH.version}-cp311-cp311-win_amd64.whl"
