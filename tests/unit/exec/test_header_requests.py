"""kiln answers a running action's requests for precompiled headers: each complete request
line is made, then answered by a file named for its header; nothing the action does to
its folder makes kiln read or write outside it (exec/header_requests.py)."""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

from kiln.exec.header_requests import HeaderRequests

NAME = "cu2fmcqytzpell3emwbbwcwlrznrg5xxoqcnkt3swj5pznegja2l.h"


def _line(name: str = NAME) -> str:
    return json.dumps({"header": "torch/csrc/inductor/cpp_prefix.h", "name": name})


def _wait_for(path: Path) -> bool:
    deadline = time.monotonic() + 30
    while not os.path.lexists(path):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def test_each_request_is_made_then_answered(tmp_path: Path) -> None:
    requests, replies = tmp_path / ".tmp" / "requests.jsonl", tmp_path / ".tmp" / "replies"
    made: list[str] = []
    with HeaderRequests(requests, replies, made.append, poll=0.01):
        with open(requests, "a") as file:
            file.write(_line() + "\n")
        assert _wait_for(replies / NAME)
    assert made == [_line()]


def test_a_partial_line_waits_and_a_line_naming_no_header_is_not_made(tmp_path: Path) -> None:
    requests, replies = tmp_path / "requests.jsonl", tmp_path / "replies"
    made: list[str] = []
    with HeaderRequests(requests, replies, made.append, poll=0.01):
        with open(requests, "a") as file:
            file.write('{"name": "../../etc/passwd"}\nnot json\n' + _line()[:20])
            file.flush()
            time.sleep(0.2)
            assert made == []  # the request is not complete yet
            file.write(_line()[20:] + "\n")
        assert _wait_for(replies / NAME)
    assert made == [_line()]
    assert sorted(os.listdir(replies)) == [NAME]


def test_the_answer_is_given_even_where_the_maker_failed(tmp_path: Path) -> None:
    requests, replies = tmp_path / "requests.jsonl", tmp_path / "replies"

    def fail(line: str) -> None:
        raise RuntimeError("the sandbox closed")

    with HeaderRequests(requests, replies, fail, poll=0.01):
        requests.write_text(_line() + "\n")
        assert _wait_for(replies / NAME)


def test_a_replies_folder_the_action_swapped_for_a_link_is_not_written_through(
    tmp_path: Path,
) -> None:
    requests, replies, elsewhere = (
        tmp_path / "requests.jsonl",
        tmp_path / "replies",
        tmp_path / "elsewhere",
    )
    elsewhere.mkdir()
    answered = threading.Event()
    with HeaderRequests(requests, replies, lambda line: answered.set(), poll=0.01):
        moved = tmp_path / "moved"
        replies.rename(moved)
        replies.symlink_to(elsewhere)
        requests.write_text(_line() + "\n")
        assert _wait_for(moved / NAME)  # the folder kiln opened, wherever it is now
    assert answered.is_set()
    assert list(elsewhere.iterdir()) == []
