"""What `kiln build` shows while it runs: a live line on a terminal, plain lines otherwise."""

from __future__ import annotations

import io
import time

from kiln.action_graph import Action, File
from kiln.cli.status import StatusPrinter
from kiln.exec.outcome import ActionOutcome, Failure, Source


def _action(name: str) -> Action:
    return Action(
        owner=f"//app:{name}",
        mnemonic="Genrule",
        argv=("true",),
        inputs=(),
        outputs=(File(f"kiln-out/app/{name}"),),
    )


def test_live_line_on_a_terminal_names_running_actions_and_their_time() -> None:
    stream = io.StringIO()
    printer = StatusPrinter(3, lambda label: "app/BUILD:1:1", stream=stream, live=True)
    first, second = _action("a"), _action("b")
    printer.action_started(first, "local-1")
    printer.action_started(second, "local-2")
    printer.action_finished(ActionOutcome(first, Source.RAN_LOCALLY, seconds=0.1))
    line = printer._render()
    printer.close()
    assert line.startswith("[1 / 3] running: Genrule //app:b ")
    assert line.endswith("s")


def test_plain_lines_when_not_a_terminal() -> None:
    stream = io.StringIO()
    printer = StatusPrinter(2, lambda label: "app/BUILD:1:1", stream=stream, live=False)
    action = _action("a")
    printer.action_started(action, "local-1")
    time.sleep(0.01)
    printer.action_finished(ActionOutcome(action, Source.RAN_LOCALLY, seconds=0.25))
    printer.action_finished(
        ActionOutcome(
            _action("b"), Source.RAN_LOCALLY, Failure("exited with code 2", output="boom\n")
        )
    )
    printer.close()
    assert stream.getvalue().splitlines() == [
        "[1 / 2] Genrule //app:a (local, 0.25s)",
        "ERROR: app/BUILD:1:1: Genrule //app:b failed: exited with code 2",
        "boom",
    ]
