"""Small wheels made on the spot: a team's own package, for tests that install with pip.

    path, package = make_wheel(wheelhouse, "teamlib", "1.0", {"teamlib/__init__.py": "X = 1"})

A wheel is a zip of the package's files and a .dist-info folder (METADATA,
WHEEL, RECORD); pip installs these like any other, offline from a
`--find-links` folder, and `package` is the PythonPackage a lock would pin.
"""

from __future__ import annotations

import base64
import hashlib
import zipfile
from pathlib import Path

from kiln.action_graph import PythonPackage


def make_wheel(
    folder: Path,
    name: str,
    version: str,
    files: dict[str, str],
    *,
    requires: tuple[str, ...] = (),
) -> tuple[Path, PythonPackage]:
    folder.mkdir(parents=True, exist_ok=True)
    info = f"{name}-{version}.dist-info"
    metadata = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n" + "".join(
        f"Requires-Dist: {r}\n" for r in requires
    )
    contents = {
        **files,
        f"{info}/METADATA": metadata,
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: kiln-tests\nRoot-Is-Purelib: true\n"
        "Tag: py3-none-any\n",
    }
    record = []
    for path, text in contents.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=")
        record.append(f"{path},sha256={digest.decode()},{len(text.encode())}")
    record.append(f"{info}/RECORD,,")
    contents[f"{info}/RECORD"] = "\n".join(record) + "\n"
    wheel = folder / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for path, text in contents.items():
            # A fixed date: the same files make the same wheel, and so the same hash.
            archive.writestr(zipfile.ZipInfo(path, date_time=(2026, 1, 1, 0, 0, 0)), text)
    sha = hashlib.sha256(wheel.read_bytes()).hexdigest()
    return wheel, PythonPackage(name, version, (f"sha256:{sha}",))
