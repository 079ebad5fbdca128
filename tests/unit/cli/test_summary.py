"""The summary line of `kiln build`, from where each result came from."""

from __future__ import annotations

from kiln.action_graph import Action, File
from kiln.cli.summary import actions_line
from kiln.exec.outcome import ActionOutcome, Failure, Source


def _outcome(
    source: Source | None, *, failed: bool = False, remote_miss: bool = False
) -> ActionOutcome:
    action = Action(
        owner="//t:a",
        mnemonic="Genrule",
        argv=("true",),
        inputs=(),
        outputs=(File("kiln-out/t/a"),),
    )
    failure = Failure("exited with code 1") if failed else None
    return ActionOutcome(action, source, failure, remote_miss=remote_miss)


def test_hits_and_executions_by_source() -> None:
    outcomes = [
        _outcome(Source.UP_TO_DATE),
        _outcome(Source.DISK_CACHE_HIT),
        _outcome(Source.RAN_LOCALLY),
        _outcome(Source.RAN_LOCALLY),
        _outcome(Source.RAN_IN_WORKER),
        _outcome(Source.FILE_WRITE),
    ]
    assert actions_line(outcomes) == (
        "INFO: 6 actions: 2 cache hits, 4 executed (2 local, 1 worker, 1 write)"
    )


def test_remote_hits_split_the_hits_and_count_the_misses() -> None:
    outcomes = [
        _outcome(Source.REMOTE_CACHE_HIT),
        _outcome(Source.REMOTE_CACHE_HIT),
        _outcome(Source.UP_TO_DATE),  # counted with the disk hits, as ever
        _outcome(Source.RAN_LOCALLY, remote_miss=True),
    ]
    assert actions_line(outcomes) == (
        "INFO: 4 actions: 3 cache hits (1 disk, 2 remote), 1 executed (1 local), "
        "1 remote cache misses"
    )


def test_failures_are_counted_apart() -> None:
    outcomes = [_outcome(Source.RAN_LOCALLY, failed=True), _outcome(None, failed=True)]
    assert actions_line(outcomes) == "INFO: 2 actions: 0 cache hits, 0 executed, 2 failed"
