"""A target that did not build leaves nothing in kiln-out/ that looks built.

An action's outputs are placed as soon as it succeeds, so when a later action
of the same target fails (validation, say) its earlier outputs are already in
kiln-out/, and outputs of a previous good build are there too, looking up to
date. After the build, every output of a target that had an action fail, not
run (a dependency failed) or refused before running (a GPU it lacks) is
removed. Their blobs stay in the CAS: the next build that succeeds places them
again without running anything.

A target that fails before it has actions (its analysis, or loading past it
with --keep_going) has no outputs this build knows of; `PlacedOutputs` keeps,
per target, what its last good build placed, so those are withdrawn too.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterable
from pathlib import Path

from kiln import state_file
from kiln.action_graph import Action, ActionGraph

FORMAT = 1


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
    """Remove every output of the actions owned by `failed_owners`; the owners, sorted."""
    remove_outputs(
        [o.path for a in actions if a.owner in failed_owners for o in a.outputs], workspace_root
    )
    return sorted(failed_owners)


def remove_outputs(paths: Iterable[str], workspace_root: Path) -> None:
    """Remove the outputs at `paths` (under kiln-out/), and the folders that held only
    those: a C++ loader's `<name>_loader/` would otherwise stay behind, empty but
    looking like a placed output."""
    emptied: set[Path] = set()
    out_root = workspace_root
    for output in paths:
        path = workspace_root / output
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            with contextlib.suppress(FileNotFoundError, IsADirectoryError):
                os.unlink(path)
        emptied.add(path.parent)
        out_root = workspace_root / Path(output).parts[0]  # kiln-out/ itself stays
    _remove_empty_folders(emptied, stop_at=out_root)


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


class PlacedOutputs:
    """Per target, the kiln-out/ paths its last good build placed (a state file in the
    output base; lost, it costs only a withdrawal that does not happen)."""

    def __init__(self, path: Path):
        self.path = path
        data = state_file.read(path, FORMAT, _is_valid, "the record of placed outputs")
        self.by_owner: dict[str, tuple[str, ...]] = {} if data is None else data["by_owner"]

    def record(self, actions: Iterable[Action], unbuilt: set[str]) -> None:
        """The targets built this time hold these outputs now; the unbuilt hold none."""
        built: dict[str, list[str]] = {}
        for action in actions:
            if action.owner not in unbuilt:
                built.setdefault(action.owner, []).extend(o.path for o in action.outputs)
        for owner in unbuilt:
            self.by_owner.pop(owner, None)
        self.by_owner.update((owner, tuple(paths)) for owner, paths in built.items())

    def withdraw(self, owners: Iterable[str], workspace_root: Path) -> list[str]:
        """Remove what `owners` placed before; those that had anything, sorted."""
        had = {owner for owner in owners if self.by_owner.get(owner)}
        for owner in had:
            remove_outputs(self.by_owner.pop(owner), workspace_root)
        return sorted(had)

    def save(self) -> None:
        state_file.write(self.path, FORMAT, by_owner=self.by_owner)


def _is_valid(data: dict[str, object]) -> bool:
    by_owner = data.get("by_owner")
    return isinstance(by_owner, dict) and all(
        isinstance(paths, tuple) and all(isinstance(p, str) for p in paths)
        for paths in by_owner.values()
    )
