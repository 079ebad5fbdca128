"""Where an AOTInductor package keeps its TorchBind constants, and the rewrite that
replaces them (kiln.actions.tensorrt.package_archive), on archives laid out as torch
2.13's AOTInductor writes them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from kiln.actions.spec import ActionFailure
from kiln.actions.tensorrt import package_archive
from torch.export.pt2_archive import PT2ArchiveReader, PT2ArchiveWriter

pytestmark = pytest.mark.torch

MODEL = "data/aotinductor/model/"


def _archive(path: Path, records: dict[str, bytes]) -> Path:
    with PT2ArchiveWriter(str(path)) as writer:
        for name, data in records.items():
            writer.write_bytes(name, data)
    return path


def _records(path: Path) -> dict[str, bytes]:
    with PT2ArchiveReader(str(path)) as reader:
        names = [n for n in reader.get_file_names() if not n.startswith(".data/")]
        return {n: reader.read_bytes(n) for n in names}


PACKAGE = {
    MODEL + "model.wrapper.so": b"\x7fELF wrapper",
    MODEL + "custom_objs_config.json": json.dumps(
        {"_run_on_acc_0_engine": "custom_obj_0", "_run_on_acc_2_engine": "custom_obj_1"}
    ).encode(),
    MODEL + "model_metadata.json": b'{"AOTI_DEVICE_KEY": "cuda"}',
    "data/constants/custom_obj_0": b"engine 0",
    "data/constants/custom_obj_1": b"engine 2",
}


def test_the_engines_are_found_by_their_constant_names(tmp_path: Path) -> None:
    assert package_archive.engine_records(_archive(tmp_path / "p.pt2", PACKAGE)) == {
        "_run_on_acc_0_engine": "data/constants/custom_obj_0",
        "_run_on_acc_2_engine": "data/constants/custom_obj_1",
    }


def test_a_config_naming_a_missing_record_is_refused(tmp_path: Path) -> None:
    records = {k: v for k, v in PACKAGE.items() if k != "data/constants/custom_obj_1"}
    with pytest.raises(ActionFailure, match="names data/constants/custom_obj_1 for "):
        package_archive.engine_records(_archive(tmp_path / "p.pt2", records))


def test_the_rewrite_replaces_records_and_merges_metadata_and_keeps_the_rest(
    tmp_path: Path,
) -> None:
    source = _archive(tmp_path / "program.pt2", PACKAGE)
    output = tmp_path / "out" / "model.pt2"
    package_archive.rewrite(
        source,
        output,
        replace={"data/constants/custom_obj_1": b"refit engine 2"},
        metadata={"kiln.target": "//models:m"},
    )
    before, after = _records(source), _records(output)
    assert after["data/constants/custom_obj_1"] == b"refit engine 2"
    assert package_archive.read_metadata(output) == {
        "AOTI_DEVICE_KEY": "cuda",
        "kiln.target": "//models:m",
    }
    changed = {n for n in after if after[n] != before[n]}
    assert changed == {"data/constants/custom_obj_1", MODEL + "model_metadata.json"}


def test_a_record_to_replace_that_the_package_lacks_is_refused(tmp_path: Path) -> None:
    source = _archive(tmp_path / "program.pt2", PACKAGE)
    with pytest.raises(
        ActionFailure, match=r"program\.pt2 has no record data/constants/custom_obj_7"
    ):
        package_archive.rewrite(
            source, tmp_path / "m.pt2", replace={"data/constants/custom_obj_7": b""}, metadata={}
        )
