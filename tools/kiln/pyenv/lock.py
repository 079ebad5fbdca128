"""`python -m kiln.pyenv.lock requirements.in`: a lock for kiln's toolchain, hashed and annotated.

    .venv/bin/python -m kiln.pyenv.lock requirements.in -o requirements_lock.txt \\
        [--find-links WHEELHOUSE]

pip resolves `requirements.in` inside an environment of the toolchain alone
(what every action's environment holds), with the toolchain's distributions
constrained to their installed versions: torch is never re-resolved (a free
resolution of timm or torchvision reaches for a multi-GB CUDA build), and what
the toolchain already provides is left out of the lock. `pip install --dry-run
--report` says what would be installed: each becomes a pin with its wheel's
hash, annotated `# via` the packages that require it, which is how kiln knows
every package's closure. The lock is for this platform (Python version, OS,
architecture), as pip-compile's are. pip-compile and `uv pip compile
--generate-hashes` locks work as well, as long as torch is left out or pinned
at the toolchain's version.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from kiln.errors import KilnError
from kiln.pip_lock import LockedPackage, format_lock, normalized
from kiln.pyenv import toolchain
from kiln.pyenv.environment import EnvironmentStore


def resolve(requirements: Path, find_links: list[str]) -> list[LockedPackage]:
    """The pins pip would install beside the toolchain to satisfy `requirements`."""
    with tempfile.TemporaryDirectory(prefix="kiln-lock-") as tmp:
        python = EnvironmentStore(Path(tmp) / "envs", sys.executable).python_for(())
        constraints = Path(tmp) / "toolchain.txt"
        constraints.write_text(
            "".join(f"{d.name}=={d.version}\n" for d in toolchain.distributions())
        )
        report = Path(tmp) / "report.json"
        argv = [
            sys.executable,
            "-m",
            "pip",
            "--python",
            python,
            "install",
            "--dry-run",
            "--quiet",
            "--disable-pip-version-check",
            "--only-binary=:all:",
            "--report",
            str(report),
            "-r",
            str(requirements.resolve()),
            "-c",
            str(constraints),
        ]
        for folder in find_links:
            argv += ["--no-index", "--find-links", folder]
        env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
        done = subprocess.run(argv, capture_output=True, text=True, env=env, check=False)
        if done.returncode != 0:
            said = [line for line in done.stderr.splitlines() if not line.startswith("WARNING:")]
            raise KilnError(
                f"pip could not resolve {requirements} beside the toolchain:\n"
                + "\n".join(f"    {line}" for line in said if line.strip()),
                hint="the toolchain's distributions (torch first) are pinned at their installed "
                "versions: choose versions of the packages that accept them",
            )
        return pins(json.loads(report.read_text()))


def pins(report: dict[str, Any]) -> list[LockedPackage]:
    """LockedPackages of a `pip install --report`, each annotated with who requires it."""
    from packaging.requirements import Requirement

    items = report.get("install", [])
    names = {normalized(item["metadata"]["name"]) for item in items}
    required_by: dict[str, list[str]] = {name: [] for name in names}
    marker_env = {**report.get("environment", {}), "extra": ""}
    for item in items:
        parent = normalized(item["metadata"]["name"])
        for text in item["metadata"].get("requires_dist", []):
            requirement = Requirement(text)
            if requirement.marker is not None and not requirement.marker.evaluate(marker_env):
                continue
            child = normalized(requirement.name)
            if child in required_by and parent not in required_by[child]:
                required_by[child].append(parent)
    out = []
    for item in items:
        meta = item["metadata"]
        name = normalized(meta["name"])
        out.append(
            LockedPackage(
                name=name,
                version=meta["version"],
                hashes=(_hash(item),),
                line=0,
                display_name=meta["name"],
                required_by=tuple(sorted(required_by[name])),
            )
        )
    return out


def _hash(item: dict[str, Any]) -> str:
    info = item.get("download_info", {})
    archive = info.get("archive_info", {})
    digest = archive.get("hashes", {}).get("sha256")
    if digest is None and archive.get("hash", "").startswith("sha256="):
        digest = archive["hash"].split("=", 1)[1]
    if digest is None:
        raise KilnError(
            f"pip gave no sha256 for {item['metadata']['name']} ({info.get('url', '?')})",
            hint="lock from an index or a wheelhouse of wheel files",
        )
    return f"sha256:{digest}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kiln.pyenv.lock", description=__doc__)
    parser.add_argument("requirements", type=Path, help="requirements.in: what targets import")
    parser.add_argument("-o", "--output", type=Path, help="the lock (default: stdout)")
    parser.add_argument(
        "--find-links", action="append", default=[], help="resolve offline from this wheelhouse"
    )
    args = parser.parse_args(argv)
    try:
        packages = pins_for(args.requirements, args.find_links)
    except KilnError as error:
        print(f"ERROR: {error.format()}", file=sys.stderr)
        return 1
    have = toolchain.by_name()
    header = (
        f"Made by `python -m kiln.pyenv.lock {args.requirements.name}` for Python "
        f"{platform.python_version()} on {platform.system().lower()} {platform.machine()}.\n"
        f"Not locked, kiln's toolchain provides them: "
        + ", ".join(f"{d.name} {d.version}" for d in have.values() if d.name == "torch")
        + " and what it needs.\n"
        "Update: edit the .in file, run the same command again."
    )
    text = format_lock(packages, header, requested=args.requirements.name)
    if args.output is None:
        sys.stdout.write(text)
    else:
        args.output.write_text(text)
        print(f"{args.output}: {len(packages)} packages locked", file=sys.stderr)
    return 0


def pins_for(requirements: Path, find_links: list[str]) -> list[LockedPackage]:
    if not requirements.is_file():
        raise KilnError(f"no such file: {requirements}")
    return resolve(requirements, find_links)


if __name__ == "__main__":
    raise SystemExit(main())
