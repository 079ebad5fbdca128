"""kiln.file_io: the user's text files are regular files, read whole, never waited on."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from kiln import file_io
from kiln.file_io import NotARegularFile, read_text


def test_a_regular_file_is_read_as_utf8(tmp_path: Path) -> None:
    (tmp_path / "BUILD").write_text("filegroup(name = 'ä')\n", encoding="utf-8")
    assert read_text(tmp_path / "BUILD") == "filegroup(name = 'ä')\n"


@pytest.mark.timeout(30)
def test_a_fifo_is_refused_without_waiting_for_a_writer(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "lock")
    with pytest.raises(NotARegularFile) as raised:
        read_text(tmp_path / "lock")
    assert raised.value.strerror == "it is a FIFO, not a regular file (replace it with one)"
    assert raised.value.filename == str(tmp_path / "lock")


def test_a_device_is_refused_before_a_byte_is_read(tmp_path: Path) -> None:
    os.symlink("/dev/zero", tmp_path / "lock")
    with pytest.raises(NotARegularFile, match="a character device"):
        read_text(tmp_path / "lock")


def test_a_directory_is_an_is_a_directory_error(tmp_path: Path) -> None:
    with pytest.raises(IsADirectoryError):
        read_text(tmp_path)


def test_a_missing_file_is_a_file_not_found_error(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        read_text(tmp_path / "gone")


def test_a_file_past_the_bound_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(file_io, "MAX_TEXT_BYTES", 4)
    (tmp_path / "BUILD").write_text("12345")
    with pytest.raises(NotARegularFile, match="5 bytes, more than a text file kiln reads"):
        read_text(tmp_path / "BUILD")


def test_invalid_utf8_is_a_unicode_decode_error(tmp_path: Path) -> None:
    (tmp_path / "BUILD").write_bytes(b"\xff\n")
    with pytest.raises(UnicodeDecodeError):
        read_text(tmp_path / "BUILD")
