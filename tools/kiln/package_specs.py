"""The records of a package's manifest and of the TensorRT packaging actions (issue 29).

Apart from kiln.action_specs on purpose: every Python action imports that module, so
its content is in every action's key; records added here change only the keys of the
actions that read them (AotiPackage and AotiRefit of backend "tensorrt", AotiManifest).

    <name>.manifest.json   PackageManifest: how the weights got in, the engines, the
                           TensorRT version and flavour, the GPU, the package's kiln.*
                           metadata. A declared output, so a cache hit shows it too.
"""

from __future__ import annotations

from typing import Literal

from pydantic import JsonValue

from kiln.action_specs import (
    BuildGpu,
    Device,
    ModelSignature,
    Provenance,
    Record,
    Spec,
    TensorRTSettings,
    TrtRefit,
    TrtToolchain,
)

# How a package's weights got in:
#   joined   inductor: the structure compiled once, the weights joined after (AotiJoin)
#   refit    tensorrt: refit into engines built once from the structure; the package's
#            engine objects replaced, its compiled wrapper kept
#   built    tensorrt: engines (or the package around them) built with the weights; the
#            manifest's `detail` says why
WeightsHow = Literal["joined", "refit", "built"]


class PackageWeights(Record):
    how: WeightsHow
    detail: str  # what ran, in words, and why where it is "built"
    sha256: str | None  # of the weights file they came from (None: the model's own)
    form: str  # "packaged" | "separate"


class PackageEngine(Record):
    name: str  # the engine's constant in the program: _run_on_acc_N_engine
    record: str | None  # where the package holds it: data/constants/custom_obj_N
    bytes: int  # of the serialized TensorRT engine
    sha256: str


class PackageManifest(Spec):
    """<name>.manifest.json of an aoti_package, either backend."""

    label: str
    model: str
    package: str  # its file name
    backend: str
    device: Device
    weights: PackageWeights
    engines: tuple[PackageEngine, ...]
    tensorrt: TrtToolchain | None  # backend "tensorrt": what the action found
    # The GPU it was built on: the action's own for tensorrt; for a CUDA inductor
    # package, the GPU its compile was keyed to (the target's platform).
    build_gpu: BuildGpu | None
    metadata: dict[str, str]  # the package's kiln.* metadata, as get_metadata() gives it


class ManifestSpec(Spec):
    """AotiManifest: the manifest of an inductor package, read from its metadata."""

    label: str
    model: str
    package: str
    output: str
    device: Device
    build_gpu: BuildGpu | None


class TrtPackageSpec(Spec):
    """AotiPackage, backend "tensorrt": Torch-TensorRT's AOTInductor packaging.

    compiled: `program` is TrtCompile's refittable program: packaged as it is, once
    per structure (its engines hold no trained weights; AotiRefit replaces them).
    Otherwise `program` is the exported program with its weights: compiled, then
    packaged, with its provenance and `manifest`.
    """

    label: str
    program: str
    compiled: bool
    output: str
    manifest: str | None  # the final package's (not compiled)
    provenance: Provenance
    device: Device
    signature: ModelSignature  # example inputs and dynamic shapes the package is saved with
    inductor_configs: dict[str, JsonValue]
    tensorrt: TensorRTSettings
    torch_executed_ops: tuple[str, ...]  # ops left to PyTorch, around the engines


class TrtRefitSpec(Spec):
    """AotiRefit: the weights refit into TrtCompile's program, and the package of that
    program (AotiPackage's, compiled once per structure) given the refit engines."""

    label: str
    package: str  # AotiPackage's <name>.program.pt2
    refit: TrtRefit
    output: str
    manifest: str
    provenance: Provenance
    device: Device
    signature: ModelSignature
    inductor_configs: dict[str, JsonValue]  # for the fallback that packages again
    tensorrt: TensorRTSettings
    torch_executed_ops: tuple[str, ...]
