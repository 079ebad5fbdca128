"""Packaging's temp state lives under kiln's cache, per user (issue 11 A6), at a path the
package may embed: the same on every machine when sandboxed."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

import pytest
from kiln.actions import temp_state
from kiln.actions.errors import ActionError
from kiln.exec import sandboxing


def test_the_executor_and_the_actions_name_the_same_variable() -> None:
    assert temp_state.TORCH_TMP_ENV == sandboxing.TORCH_TMP_ENV


def test_in_a_sandbox_the_paths_are_the_fixed_ones_inside_its_private_tmp(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(temp_state.TORCH_TMP_ENV, sandboxing.SANDBOXED_TORCH_TMP)
    assert temp_state.shared_dir() == Path("/tmp/kiln-torch-tmp")
    assert temp_state.private_cache_dir("0123") == Path("/tmp/kiln-inductor-0123")


def test_the_sandbox_and_the_actions_name_the_same_fixed_path() -> None:
    assert temp_state.FIXED_TORCH_TMP == sandboxing.SANDBOXED_TORCH_TMP


def test_without_kiln_it_is_the_sandbox_s_fixed_path_so_bazel_s_packages_match(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(temp_state.TORCH_TMP_ENV, raising=False)
    assert temp_state.shared_dir() == Path("/tmp/kiln-torch-tmp")
    assert temp_state.private_cache_dir("ab") == Path("/tmp/kiln-inductor-ab")


def test_a_predictable_path_someone_else_made_is_refused_not_used(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Issue 11 A6: another user could create or symlink the fixed /tmp paths first."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "tmp").mkdir()
    (tmp_path / "tmp/torch").symlink_to(elsewhere)
    monkeypatch.setenv(temp_state.TORCH_TMP_ENV, str(tmp_path / "tmp/torch"))
    with pytest.raises(ActionError, match="is a symlink"):
        temp_state.pin_temp_dirs()
    (tmp_path / "tmp/kiln-inductor-ab.lock").symlink_to(elsewhere / "lock")
    with pytest.raises(OSError), temp_state.private_cache("ab"):
        pass
    assert list(elsewhere.iterdir()) == []


def test_a_private_cache_is_empty_locked_while_used_and_gone_after(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv(temp_state.TORCH_TMP_ENV, str(tmp_path / "tmp/torch"))
    left = tmp_path / "tmp/kiln-inductor-ab"
    left.mkdir(parents=True)
    (left / "stale").write_text("a killed packaging's")
    with temp_state.private_cache("ab") as cache:
        assert cache == left and list(cache.iterdir()) == []
        assert (os.stat(cache).st_mode & 0o777) == 0o700
        fd = os.open(f"{cache}.lock", os.O_RDONLY)
        with pytest.raises(BlockingIOError):
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.close(fd)
    assert not left.exists()
