"""The suite's own set-up: SIGINT as a terminal gives it, however the run was started."""

from __future__ import annotations

import signal

from tests.conftest import sigint_as_a_terminal_gives_it


def test_an_ignored_sigint_is_given_its_default_handler_back() -> None:
    before = signal.getsignal(signal.SIGINT)
    try:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        sigint_as_a_terminal_gives_it()
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    finally:
        signal.signal(signal.SIGINT, before)
