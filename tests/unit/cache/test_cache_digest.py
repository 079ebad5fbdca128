"""kiln.cache.digest: digest values, text form, streaming file hashing."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest
from kiln.cache import digest as digest_module
from kiln.cache.digest import DIGEST_FUNCTIONS, Digest, digest_bytes, digest_file, new_hasher
from kiln.errors import KilnError

BUFFER = digest_module._BUFFER_SIZE

KNOWN = [
    ("sha256", b"", "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"),
    ("sha256", b"abc", "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"),
    ("blake3", b"", "af1349b9f5f9a1a6a0404dea36dcc9499bcb25c9adc112b7cc9a93cae41f3262"),
    ("blake3", b"abc", "6437b3ac38465133ffb63b75273a8db548c558465d79db03fd359c6cd5bd9d85"),
]


@pytest.mark.parametrize(("function", "data", "expected"), KNOWN)
def test_known_vectors(function: str, data: bytes, expected: str) -> None:
    assert digest_bytes(data, function) == Digest(expected, len(data))


@pytest.mark.parametrize(("function", "data", "expected"), KNOWN)
def test_known_vectors_from_a_file(
    tmp_path: Path, function: str, data: bytes, expected: str
) -> None:
    path = tmp_path / "f"
    path.write_bytes(data)
    assert digest_file(path, function) == Digest(expected, len(data))


def test_default_function_is_sha256() -> None:
    assert digest_bytes(b"x") == digest_bytes(b"x", "sha256")
    assert DIGEST_FUNCTIONS == ("sha256", "blake3")


def test_text_form_round_trips() -> None:
    d = digest_bytes(b"hello")
    assert str(d) == f"{hashlib.sha256(b'hello').hexdigest()}/5"
    assert Digest.parse(str(d)) == d


@pytest.mark.parametrize(
    "text",
    [
        "",
        "abc",
        "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
        "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855/",
        "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855/-1",
        "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855/ 1",
        "E3B0C44298FC1C149AFBF4C8996FB92427AE41E4649B934CA495991B7852B855/0",
        "../../etc/passwd/0",
    ],
)
def test_parse_rejects_malformed_text(text: str) -> None:
    with pytest.raises(ValueError):
        Digest.parse(text)


def test_hash_that_could_name_another_file_is_refused() -> None:
    with pytest.raises(ValueError, match="64 lowercase hex digits"):
        Digest("../" + "0" * 61, 1)


def test_digests_order_and_hash() -> None:
    a, b = Digest("0" * 64, 5), Digest("1" * 64, 1)
    assert sorted([b, a]) == [a, b]
    assert len({a, Digest("0" * 64, 5)}) == 1


def test_unknown_digest_function_is_a_kiln_error() -> None:
    with pytest.raises(KilnError, match="unknown digest function 'md5'") as info:
        new_hasher("md5")
    assert info.value.hint == "use one of: sha256, blake3"


@pytest.mark.parametrize("function", DIGEST_FUNCTIONS)
@pytest.mark.parametrize("size", [0, 1, BUFFER - 1, BUFFER, BUFFER + 1, 2 * BUFFER, 3 * BUFFER + 7])
def test_file_digest_equals_bytes_digest_around_buffer_boundaries(
    tmp_path: Path, function: str, size: int
) -> None:
    data = os.urandom(size)
    path = tmp_path / "f"
    path.write_bytes(data)
    assert digest_file(path, function) == digest_bytes(data, function)
    assert digest_file(str(path), function) == digest_bytes(data, function)


def test_file_changed_while_hashing_is_an_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"before")
    stream = digest_module._stream

    def stream_then_append(f: object, hasher: digest_module.Hasher) -> int:
        size = stream(f, hasher)  # type: ignore[arg-type]
        with path.open("ab") as out:
            out.write(b" and after")
        return size

    monkeypatch.setattr(digest_module, "_stream", stream_then_append)
    with pytest.raises(KilnError, match="file changed while it was being hashed"):
        digest_file(path)


def test_missing_file_raises_file_not_found(tmp_path: Path) -> None:
    for function in DIGEST_FUNCTIONS:
        with pytest.raises(FileNotFoundError):
            digest_file(tmp_path / "absent", function)
