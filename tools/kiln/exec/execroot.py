"""Private execroots: a directory per action holding only its declared inputs.

Source inputs are symlinks to the workspace; generated inputs are hardlinks
of CAS blobs (read-only, so an action cannot corrupt the cache through
them). An action that opens an undeclared workspace file by its relative
path finds nothing. Execroots live in the output base and are removed after
the action; ones left by a killed kiln are swept at the next start.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import shutil
from pathlib import Path

from kiln.cache.cas import ContentStore
from kiln.cache.digest import Digest
from kiln.exec.action import GENERATED_ROOT, Action

_counter = itertools.count()


class Execroots:
    def __init__(self, base: Path, workspace_root: Path, cas: ContentStore):
        self.base = base
        self.workspace_root = workspace_root
        self.cas = cas

    def sweep(self) -> None:
        """Remove execroots a previous, killed kiln left behind."""
        if self.base.exists():
            shutil.rmtree(self.base, ignore_errors=True)

    def create(self, action: Action, key: str, inputs: dict[str, Digest]) -> Path:
        """An execroot holding `inputs` (every concrete input file, by path)."""
        root = self.base / f"{os.getpid()}-{next(_counter)}-{key[:12]}"
        root.mkdir(parents=True)
        (root / ".tmp").mkdir()
        made: set[str] = set()
        for path, digest in inputs.items():
            dest = root / path
            parent = str(dest.parent)
            if parent not in made:
                os.makedirs(parent, exist_ok=True)
                made.add(parent)
            if path.startswith(GENERATED_ROOT + "/"):
                self.cas.materialize(digest, dest)
            else:
                os.symlink(self.workspace_root / path, dest)
        for file in action.outputs:
            # Output directories exist before the action runs, as in Bazel.
            os.makedirs(
                root / (file.path if file.directory else os.path.dirname(file.path)), exist_ok=True
            )
        return root

    @staticmethod
    def remove(root: Path) -> None:
        with contextlib.suppress(FileNotFoundError):
            # Outputs copied to the CAS may be read-only; rmtree copes with files
            # but not with read-only directories an action may have made.
            for dirpath, dirnames, _ in os.walk(root):
                for name in dirnames:
                    with contextlib.suppress(OSError):
                        os.chmod(os.path.join(dirpath, name), 0o755)
            shutil.rmtree(root, ignore_errors=True)
