"""What `kiln build` prints while it runs: one object prints.

On a terminal, a live status line (rich) in Bazel's shape:

    [12 / 40] running: AotiPackage //models:resnet_pt2 12s, Genrule //data:prep 1s

When output is not a terminal (CI logs), one plain line per executed action
instead. Failures print the action's output, whatever the mode.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, TextIO

from kiln.action_graph import Action
from kiln.exec.outcome import ActionOutcome
from kiln.exec.scheduler import Reporter

if TYPE_CHECKING:
    from rich.live import Live


class StatusPrinter(Reporter):
    def __init__(
        self,
        total: int,
        locate: Callable[[str], str],
        *,
        stream: TextIO | None = None,
        live: bool | None = None,
        explain: bool = False,
        quiet_failures: Callable[[Action], bool] = lambda action: False,
    ):
        self.total = total
        self.locate = locate
        self.stream = stream or sys.stderr
        self.explain = explain
        self.quiet_failures = quiet_failures
        self.done = 0
        self.running: dict[str, tuple[Action, float]] = {}  # by first output
        self._lock = threading.Lock()
        self._live: Live | None = None
        if live is None:
            live = self.stream.isatty()
        if live:
            from rich.console import Console
            from rich.live import Live

            # The caller decided it is a terminal (e.g. --color / tests): rich must agree.
            console = Console(file=self.stream, force_terminal=True)
            self._live = Live(
                self._render(),
                console=console,
                refresh_per_second=4,
                transient=True,
                get_renderable=self._render,
            )
            self._live.start()

    def _render(self) -> str:
        now = time.monotonic()
        with self._lock:
            items = sorted(self.running.values(), key=lambda item: item[1])
            shown = ", ".join(f"{a.mnemonic} {a.owner} {now - t:.0f}s" for a, t in items[:3])
            more = f" and {len(items) - 3} more" if len(items) > 3 else ""
            return f"[{self.done} / {self.total}] running: {shown or '-'}{more}"

    def print(self, text: str) -> None:
        if self._live is not None:
            self._live.console.print(text, markup=False, highlight=False)
        else:
            self.stream.write(text + "\n")
            self.stream.flush()

    def action_started(self, action: Action, lane: str) -> None:
        with self._lock:
            self.running[action.outputs[0].path] = (action, time.monotonic())

    def action_finished(self, outcome: ActionOutcome) -> None:
        action = outcome.action
        with self._lock:
            self.running.pop(action.outputs[0].path, None)
            self.done += 1
            done = self.done
        failure = outcome.failure
        if failure is not None and self.quiet_failures(action):
            return  # the command reports it itself (kiln test: FAIL lines, test.log)
        if failure is not None:
            where = self.locate(action.owner)
            self.print(
                f"ERROR: {where}: {action.describe()} failed: {failure.message}"
                + (f"\n{failure.output.rstrip()}" if failure.output.strip() else "")
            )
            return
        if self.explain and outcome.status == "executed" and outcome.explanation:
            on = f"; ran on GPU {','.join(outcome.gpus)}" if outcome.gpus else ""
            self.print(f"EXPLAIN: {action.mnemonic} {action.owner}: {outcome.explanation}{on}")
        if self.explain and outcome.remote == "hit":
            self.print(f"EXPLAIN: {action.mnemonic} {action.owner}: remote cache hit")
        if outcome.status == "executed" and self._live is None:
            self.print(
                f"[{done} / {self.total}] {action.mnemonic} {action.owner} "
                f"({outcome.source_name}, {outcome.seconds:.2f}s)"
            )
        if outcome.status == "executed" and outcome.printed.strip():
            # Like Bazel, what an action printed (AotiValidate: the largest error).
            self.print(f"INFO: From {action.describe()}:\n{outcome.printed.rstrip()}")

    def close(self) -> None:
        if self._live is not None:
            self._live.stop()
            self._live = None
