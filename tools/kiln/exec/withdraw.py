"""A target that did not build leaves nothing in kiln-out/ that looks built.

An action's outputs are placed as soon as it succeeds, so when a later action
of the same target fails (validation, say) its earlier outputs are already in
kiln-out/, and outputs of a previous good build are there too, looking up to
date. After the build, every output of a target that had an action fail, not
run (a dependency failed) or refused before running (a GPU it lacks) is
removed. Their blobs stay in the CAS: the next build that succeeds places them
again without running anything.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterable
from pathlib import Path

from kiln.action_graph import Action, ActionGraph


def unbuilt_owners(graph: ActionGraph, failed: Iterable[Action]) -> set[str]:
    """The targets of the failed actions and of every action downstream of them (those
    did not run, or ran on inputs that are not this build's). Actions a stopped build
    merely did not reach are not among them: their last outputs are still theirs."""
    pending = [graph.producer[action.outputs[0].path] for action in failed]
    seen: set[int] = set()
    while pending:
        index = pending.pop()
        if index not in seen:
            seen.add(index)
            pending.extend(graph.dependents[index])
    return {graph.actions[index].owner for index in seen}


def withdraw(actions: Iterable[Action], failed_owners: set[str], workspace_root: Path) -> list[str]:
    """Remove every output of the actions owned by `failed_owners`, and the folders
    that held only those (a C++ loader's `<name>_loader/` would otherwise stay behind,
    empty but looking like a placed output); the owners, sorted."""
    emptied: set[Path] = set()
    for action in actions:
        if action.owner not in failed_owners:
            continue
        for output in action.outputs:
            path = workspace_root / output.path
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path, ignore_errors=True)
            else:
                with contextlib.suppress(FileNotFoundError, IsADirectoryError):
                    os.unlink(path)
            emptied.add(path.parent)
            out_root = workspace_root / Path(output.path).parts[0]  # kiln-out/ itself stays
    if emptied:
        _remove_empty_folders(emptied, stop_at=out_root)
    return sorted(failed_owners)


def _remove_empty_folders(folders: set[Path], stop_at: Path) -> None:
    """Remove each folder and its parents while they are empty, never `stop_at` or above
    it; the deepest first, so a parent is looked at after its children went."""
    for deepest in sorted(folders, key=lambda path: len(path.parts), reverse=True):
        folder = deepest
        while folder != stop_at and stop_at in folder.parents:
            try:
                folder.rmdir()
            except OSError:  # not empty (another target's outputs) or already gone
                break
            folder = folder.parent
