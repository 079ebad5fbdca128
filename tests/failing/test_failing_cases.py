"""Every bad input gets one case here, pinning kiln's error text verbatim.

Each `*.txtar` file beside this one is a small workspace in txtar form (as Go
writes test data): a comment that says what the case breaks and, on a line
`$ kiln ...`, the command to run; then `-- path --` sections with the
workspace's files; and a `-- stderr --` section with the exact error kiln
must print. Keeping the BUILD files inside txtar files means the kiln
repository's own `kiln query //...` never trips over them.

Every case must exit 1, print `ERROR: <file>:<line>:<col>: ...` and never a
Python traceback.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from kiln.cli import main

HERE = Path(__file__).parent
_SECTION = re.compile(r"^-- (?P<name>.+) --$")
_LOCATED_ERROR = re.compile(r"^ERROR: (?P<file>[^:\s]+):(?P<line>\d+):(?P<col>\d+): ")


@dataclass(frozen=True)
class Case:
    name: str
    args: list[str]
    files: dict[str, str]
    stderr: str

    @staticmethod
    def read(path: Path) -> Case:
        comment: list[str] = []
        sections: dict[str, list[str]] = {}
        current = comment
        for line in path.read_text().splitlines():
            header = _SECTION.match(line)
            if header:
                current = sections.setdefault(header.group("name"), [])
            else:
                current.append(line)
        commands = [line[len("$ kiln ") :] for line in comment if line.startswith("$ kiln ")]
        assert len(commands) == 1, f"{path.name}: needs exactly one '$ kiln ...' line"
        expected = sections.pop("stderr", None)
        assert expected is not None, f"{path.name}: needs a '-- stderr --' section"
        files = {name: "".join(f"{line}\n" for line in lines) for name, lines in sections.items()}
        return Case(path.stem, shlex.split(commands[0]), files, "\n".join(expected).strip("\n"))

    def create(self, root: Path) -> None:
        root.mkdir()
        for name, text in {"WORKSPACE": "", **self.files}.items():
            target = root / name
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text)


CASES = sorted(HERE.glob("*.txtar"))


@pytest.mark.parametrize("path", CASES, ids=[path.stem for path in CASES])
def test_bad_input_fails_with_pinned_error(
    path: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    case = Case.read(path)
    case.create(tmp_path / "ws")
    monkeypatch.chdir(tmp_path / "ws")

    code = main(case.args)

    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert code == 1
    assert _LOCATED_ERROR.match(err), f"no file:line:col in {err!r}"
    assert err.rstrip("\n") == case.stderr


def test_every_case_names_a_file_of_the_workspace() -> None:
    for path in CASES:
        case = Case.read(path)
        stderr = _LOCATED_ERROR.match(case.stderr)
        assert stderr, f"{path.name}: the pinned error has no file:line:col"
        assert stderr.group("file") in case.files, f"{path.name}: points outside the case"


@pytest.mark.parametrize("name", ["syntax_error", "macro_dependency_cycle"])
def test_bad_input_fails_the_same_in_a_real_process(name: str, tmp_path: Path) -> None:
    case = Case.read(HERE / f"{name}.txtar")
    case.create(tmp_path / "ws")
    env = dict(os.environ, HOME=str(tmp_path), XDG_CACHE_HOME=str(tmp_path / "cache"))

    run = subprocess.run(
        [sys.executable, "-m", "kiln", *case.args],
        cwd=tmp_path / "ws",
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )

    assert run.returncode == 1
    assert "Traceback" not in run.stderr
    assert run.stderr.rstrip("\n") == case.stderr
