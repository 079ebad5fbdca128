"""Installing locked wheels with pip: never resolving, never building, never touching torch.

    pip install --target SITE --no-deps --require-hashes --only-binary=:all:
                -r <the closure's pins> [--no-index --find-links WHEELHOUSE]

`--no-deps`: the closure is already resolved (the lock), so pip cannot reach
for another torch (timm's metadata asks for one: resolved freely, a multi-GB
CUDA build). `--target` into a fresh folder: pip sees nothing installed, so it
can uninstall nothing either, least of all the toolchain's torch, which the
environment only links to afterwards. `--require-hashes`: a wheel whose digest
differs from the lock's is refused. `--only-binary`: nothing is built.

`download()` fetches the same wheels with the same options into a folder
(`pip download`): what a remote node installs from (kiln.pyenv.wheels), since
`install --target` keeps no wheel.
"""

from __future__ import annotations

import os
import re
import subprocess
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path

from kiln.action_graph import PythonPackage
from kiln.errors import KilnError

_PINS_FILE = re.compile(r" \(from -r \S*kiln-pip-[^/\s]+/requirements\.txt \(line \d+\)\)")
_STEP = re.compile(r"^(?:Collecting|Processing|Obtaining)\s+(?P<what>\S+)")


class PipError(KilnError):
    pass


def install(
    python: str,
    packages: Sequence[PythonPackage],
    target: Path,
    *,
    find_links: Sequence[str] = (),
    offline: bool = False,
    progress: Callable[[str], None] = lambda line: None,
    compile_bytecode: bool = True,
) -> None:
    """Install exactly `packages` into `target`; a PipError naming the package otherwise.
    Without `compile_bytecode`, no .pyc files (a Bazel repository's files stay sources).
    `offline`: from `find_links` only, never an index, even where it is empty."""
    options = ["install", "--target", str(target)]
    if not compile_bytecode:
        options.append("--no-compile")
    _run(python, options, packages, find_links, offline, progress, "install")


def download(
    python: str,
    packages: Sequence[PythonPackage],
    dest: Path,
    *,
    find_links: Sequence[str] = (),
    progress: Callable[[str], None] = lambda line: None,
) -> None:
    """The wheel of each of `packages` into `dest`, as install() would take it (the same
    index or wheelhouses, the lock's hashes checked); a PipError naming the package."""
    options = ["download", "--dest", str(dest)]
    _run(python, options, packages, find_links, False, progress, "download")


def _run(
    python: str,
    options: Sequence[str],
    packages: Sequence[PythonPackage],
    find_links: Sequence[str],
    offline: bool,
    progress: Callable[[str], None],
    verb: str,
) -> None:
    with tempfile.TemporaryDirectory(prefix="kiln-pip-") as tmp:
        pins = Path(tmp) / "requirements.txt"
        pins.write_text("".join(f"{p.requirement}\n" for p in packages), encoding="utf-8")
        argv = [
            python,
            "-m",
            "pip",
            *options,
            "--no-deps",
            "--require-hashes",
            "--only-binary=:all:",
            "--no-input",
            "--disable-pip-version-check",
            "--progress-bar",
            "off",
            "-r",
            str(pins),
        ]
        if find_links or offline:
            argv.append("--no-index")
        for folder in find_links:
            argv += ["--find-links", folder]
        env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
        env["PIP_NO_INPUT"] = "1"
        with tempfile.TemporaryFile() as errors:
            process = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=errors,
                env=env,
                text=True,
            )
            assert process.stdout is not None
            done = 0
            lines: list[str] = []
            for line in process.stdout:
                lines.append(line)
                step = _STEP.match(line.strip())
                if step is not None:
                    done += 1
                    progress(f"[{done}/{len(packages)}] {_short(step.group('what'))}")
            code = process.wait()
            errors.seek(0)
            stderr = errors.read().decode(errors="replace")
    if code != 0:
        raise failure(packages, "".join(lines), stderr, find_links, verb)


def failure(
    packages: Sequence[PythonPackage],
    stdout: str,
    stderr: str,
    find_links: Sequence[str],
    verb: str = "install",
) -> PipError:
    """pip's own message, with the package it failed on named first."""
    said = [line.rstrip() for line in stderr.splitlines() if line.strip()]
    said = [line for line in said if not line.startswith("WARNING:")] or said
    text = "\n".join(said or stdout.strip().splitlines()[-3:])
    # pip names the line of kiln's temporary pins file: no place the user can look at,
    # and it differs from one build (and tool) to the next.
    text = _PINS_FILE.sub("", text)
    culprit = _culprit(packages, text) or _last_step(packages, stdout)
    what = f"{culprit.name}=={culprit.version}" if culprit else "the environment"
    where = f"the wheelhouse {', '.join(find_links)}" if find_links else "pip's index"
    hint = (
        f"is {what}'s wheel for this platform in {where}, with the lock's hash? "
        "(`pip download --no-deps --only-binary=:all: --require-hashes -r LOCK -d DIR` "
        "fills a wheelhouse)"
        if culprit
        else None
    )
    indented = "\n".join(f"    {line}" for line in text.splitlines())
    return PipError(f"pip could not {verb} {what}:\n{indented}", hint=hint)


def _culprit(packages: Sequence[PythonPackage], text: str) -> PythonPackage | None:
    spelled = re.sub(r"[-_.]+", "_", text.lower())
    for package in packages:
        if re.search(rf"(?<![a-z0-9_]){re.escape(package.name)}(?![a-z0-9])", spelled):
            return package
    return None


def _last_step(packages: Sequence[PythonPackage], stdout: str) -> PythonPackage | None:
    steps = [m.group("what") for m in map(_STEP.match, stdout.splitlines()) if m]
    return _culprit(packages, steps[-1]) if steps else None


def _short(what: str) -> str:
    """`/wheels/timm-1.0.31-py3-none-any.whl` -> `timm-1.0.31`; `timm==1.0.31` as it is."""
    name = what.rsplit("/", 1)[-1]
    if name.endswith(".whl"):
        return "-".join(name[: -len(".whl")].split("-")[:2])
    return name
