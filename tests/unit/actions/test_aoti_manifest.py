"""AotiManifest: an inductor package's manifest, read from its metadata without torch."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import pytest
from kiln.action_specs import BuildGpu
from kiln.actions import aoti_manifest
from kiln.actions.spec import ActionFailure
from kiln.package_specs import ManifestSpec, PackageManifest

METADATA = {
    "AOTI_DEVICE_KEY": "cuda",
    "kiln.target": "//models:mlp_cuda",
    "kiln.weights_form": "separate",
    "kiln.weights_file": "mlp_cuda.weights.safetensors",
    "kiln.weights_sha256": "ab" * 32,
}


def _package(path: Path, metadata: dict[str, str]) -> Path:
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("mlp_cuda/data/aotinductor/model/model.wrapper.so", b"\x7fELF")
        archive.writestr(
            "mlp_cuda/data/aotinductor/model/model_metadata.json", json.dumps(metadata)
        )
    return path


def _spec(tmp_path: Path, package: Path) -> ManifestSpec:
    return ManifestSpec(
        label="//models:mlp_cuda",
        model="//models:mlp",
        package=str(package),
        output=str(tmp_path / "out/mlp_cuda.manifest.json"),
        device="cuda",
        build_gpu=BuildGpu(name="NVIDIA H200", compute_capability="9.0"),
    )


def test_the_manifest_of_an_inductor_package_says_the_weights_were_joined(tmp_path: Path) -> None:
    spec = _spec(tmp_path, _package(tmp_path / "mlp_cuda.pt2", METADATA))
    aoti_manifest.main(spec)
    manifest = PackageManifest.read(spec.output)
    assert manifest.weights.how == "joined"
    assert manifest.weights.form == "separate"
    assert manifest.weights.sha256 == "ab" * 32
    assert "in mlp_cuda.weights.safetensors" in manifest.weights.detail
    assert manifest.metadata == {k: v for k, v in METADATA.items() if k.startswith("kiln.")}
    assert manifest.build_gpu == spec.build_gpu
    assert (manifest.engines, manifest.tensorrt, manifest.package) == ((), None, "mlp_cuda.pt2")


def test_a_package_without_kilns_metadata_fails_in_a_line(tmp_path: Path) -> None:
    spec = _spec(tmp_path, _package(tmp_path / "mlp_cuda.pt2", {"AOTI_DEVICE_KEY": "cuda"}))
    with pytest.raises(ActionFailure, match=r"^mlp_cuda.pt2 has no kiln\.\* metadata"):
        aoti_manifest.main(spec)


def test_a_package_that_is_not_an_archive_fails_in_a_line(tmp_path: Path) -> None:
    package = tmp_path / "mlp_cuda.pt2"
    package.write_bytes(b"not a zip")
    with pytest.raises(ActionFailure, match=r"^cannot read the metadata of mlp_cuda.pt2: "):
        aoti_manifest.main(_spec(tmp_path, package))
