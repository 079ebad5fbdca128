"""The on-disk layout: one place names every file of the output base and the disk cache."""

from __future__ import annotations

from pathlib import Path

import pytest
from kiln.errors import KilnError
from kiln.layout import DiskCache, OutputBase, cache_home, output_root


def test_output_base_names_every_state_file(tmp_path: Path) -> None:
    base = OutputBase(tmp_path)
    assert [p.name for p in (base.lock, base.graph_cache, base.analysis_cache)] == [
        "lock",
        "graph-cache.pickle",
        "analysis-cache.pickle",
    ]
    assert [p.name for p in (base.action_state, base.explain_log, base.execroot)] == [
        "action-state.pickle",
        "explain.pickle",
        "execroot",
    ]
    assert base.digest_log("blake3") == tmp_path / "digests-blake3.log"
    assert base.blob_log("sha256") == tmp_path / "blobs-sha256.log"
    # kiln clean removes the record of kiln-out/, never the caches describing sources.
    assert base.build_state() == (
        base.explain_log,
        base.action_state,
        base.placed_outputs,
        base.execroot,
    )


def test_default_output_base_is_per_workspace_under_the_cache_home(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_home() == tmp_path / "xdg" / "kiln"
    one = OutputBase.for_workspace(Path("/src/one"))
    assert one.root.parent == tmp_path / "xdg" / "kiln" / "workspaces"
    assert one == OutputBase.for_workspace(Path("/src/one"))
    assert one != OutputBase.for_workspace(Path("/src/two"))
    assert output_root(Path("/src/one")) == Path("/src/one/kiln-out")


def test_disk_cache_keeps_another_digest_function_apart(tmp_path: Path) -> None:
    sha = DiskCache.at(tmp_path)
    blake = DiskCache.at(tmp_path, "blake3")
    assert (sha.cas, sha.ac, sha.gc_lock) == (
        tmp_path / "cas",
        tmp_path / "ac",
        tmp_path / "gc.lock",
    )
    assert blake.cas == tmp_path / "blake3" / "cas"
    assert sha.expunged(["sha256", "blake3"]) == (
        tmp_path / "cas",
        tmp_path / "ac",
        tmp_path / "gc.lock",
        tmp_path / "tmp",
        tmp_path / "python-envs",
        tmp_path / "blake3",
    )
    assert sha.torch_tmp == tmp_path / "tmp" / "torch"


def test_a_file_in_the_way_of_the_output_base_is_a_user_error(tmp_path: Path) -> None:
    (tmp_path / "base").write_text("")
    with pytest.raises(KilnError) as raised:
        OutputBase(tmp_path / "base" / "inner").create()
    assert raised.value.format() == (
        f"the output base {tmp_path}/base/inner cannot be created: "
        f"{tmp_path}/base is a file, not a directory\n"
        f"  hint: remove {tmp_path}/base, or choose another directory with --output_base=DIR"
    )
