"""Sample manifests, as the TrtEngine action writes them, for the loader tests."""

from __future__ import annotations

import copy
import json
from typing import Any

from kiln.action_specs import Spec, TrtManifest

_RESNET_WIN: dict[str, Any] = {
    "format": 1,
    "label": "//models:resnet_win",
    "name": "resnet_win",
    "model": "//models:resnet",
    "platform": "windows_x86_64",
    "compile_api": "torch_tensorrt.dynamo.cross_compile_for_windows",
    "program": {
        "file": "resnet_win.ep",
        "saved_with": "torch_tensorrt.dynamo.save_cross_compiled_exported_program",
        "documented_save_error": "RuntimeError: Engine has not been setup yet",
        "load": 'torch_tensorrt.load_cross_compiled_exported_program("resnet_win.ep").module()',
        "load_on": "Windows x86-64",
    },
    "engines": [
        {
            "file": "resnet_win.engines/resnet_win.engine",
            "submodule": "_run_on_acc_0",
            "bytes": 46000000,
            "sha256": "0" * 64,
            "inputs": [
                {
                    "name": "image",
                    "dtype": "float32",
                    "min": [1, 3, 224, 224],
                    "opt": [2, 3, 224, 224],
                    "max": [16, 3, 224, 224],
                }
            ],
            "outputs": [
                {
                    "name": "output0",
                    "dtype": "float32",
                    "min": [1, 1000],
                    "opt": [2, 1000],
                    "max": [16, 1000],
                }
            ],
        }
    ],
    "inputs": [
        {
            "name": "image",
            "dtype": "float32",
            "min": [1, 3, 224, 224],
            "opt": [2, 3, 224, 224],
            "max": [16, 3, 224, 224],
        }
    ],
    "fallback_ops": {},
    "fallback_op_count": 0,
    "raw_engine": {"deployable": True, "problems": []},
    "toolchain": {
        "torch": "2.13.0+cu130",
        "cuda": "13.0",
        "torch_tensorrt": "2.13.0",
        "flavour": "standard",
        "tensorrt": "11.0.0.12",
        "torch_tensorrt_abi": "9",
    },
    "build_gpu": {"name": "NVIDIA H200", "compute_capability": "9.0"},
    "compatibility": {
        "hardware_compatible": True,
        "version_compatible": True,
        "gpus": "compute capability 8.0 (Ampere) and newer",
        "tensorrt": "TensorRT 11.0.0.12 or newer within its major version",
    },
    "settings": {"hardware_compatible": True, "version_compatible": True, "min_block_size": 1},
    "settings_not_accepted": [],
    "forced_off": {
        "use_python_runtime": False,
        "lazy_engine_init": False,
        "cache_built_engines": False,
        "reuse_cached_engines": False,
    },
    "timing_cache": "private to the action (under its TMPDIR)",
    "weights": {
        "refit": False,
        "how": "built with the model's weights: a change of weights rebuilds the engine",
        "weights_sha256": None,
    },
}

_DETECTOR_LINUX_RTX: dict[str, Any] = {
    **copy.deepcopy(_RESNET_WIN),
    "label": "//models:detector_trt",
    "name": "detector_trt",
    "model": "//models:detector",
    "platform": "linux_x86_64",
    "compile_api": "torch_tensorrt.dynamo.compile",
    "program": {
        "file": "detector_trt.ep",
        "saved_with": "torch_tensorrt.save",
        "load": 'torch_tensorrt.load("detector_trt.ep").module()',
        "load_on": "Linux x86-64",
        "documented_save_error": None,
    },
    "engines": [
        {
            "file": "detector_trt.engines/detector_trt.engine",
            "submodule": "_run_on_acc_0",
            "bytes": 1000,
            "sha256": "1" * 64,
            "inputs": [
                {
                    "name": "image",
                    "dtype": "float16",
                    "min": [1, 3, 32, 48],
                    "opt": [4, 3, 64, 48],
                    "max": [8, 3, 512, 48],
                },
                {"name": "class", "dtype": "int64", "min": [1, 7], "opt": [4, 7], "max": [8, 7]},
            ],
            "outputs": [
                {
                    "name": "output0",
                    "dtype": "float16",
                    "min": [1, 5],
                    "opt": [4, 5],
                    "max": [8, 5],
                },
                # A data-dependent output: shape not known ahead.
                {"name": "output1", "dtype": "int64", "min": [None], "opt": [None], "max": [None]},
            ],
        }
    ],
    "toolchain": {
        "torch": "2.11.0+cu130",
        "cuda": "13.0",
        "torch_tensorrt": "2.11.0",
        "flavour": "rtx",
        "tensorrt": "1.4.0.76",
        "torch_tensorrt_abi": "8",
    },
    "compatibility": {
        "hardware_compatible": False,
        "version_compatible": False,
        "gpus": "compute capability 9.0 (the build GPU's; Torch-TensorRT checks it at load)",
        "tensorrt": "TensorRT-RTX 1.4.0.76 exactly",
    },
    "forced_off": {},
}


def resnet_win() -> dict[str, Any]:
    """A Windows engine of a ResNet: one input, dynamic batch 1..16, standard TensorRT."""
    return copy.deepcopy(_RESNET_WIN)


def detector_linux_rtx() -> dict[str, Any]:
    """A Linux engine built with TensorRT-RTX: two inputs (float16, int64), two outputs."""
    return copy.deepcopy(_DETECTOR_LINUX_RTX)


def doubler_linux() -> dict[str, Any]:
    """A Linux engine of one float32 input x [1..64, 10] and one output of the same shape:
    what the stand-in runtime (standin_include/standin_runtime.cpp) computes, 2 * x."""
    manifest = copy.deepcopy(_RESNET_WIN)
    ranges = {"dtype": "float32", "min": [1, 10], "opt": [8, 10], "max": [64, 10]}
    manifest.update(
        {
            "label": "//models:double_trt",
            "name": "double_trt",
            "model": "//models:double",
            "platform": "linux_x86_64",
            "program": {
                "file": "double_trt.ep",
                "saved_with": "torch_tensorrt.save",
                "load": 'torch_tensorrt.load("double_trt.ep").module()',
                "load_on": "Linux x86-64",
                "documented_save_error": None,
            },
            "inputs": [{"name": "x", **ranges}],
            "forced_off": {},
        }
    )
    manifest["engines"][0].update(
        {
            "file": "double_trt.engines/double_trt.engine",
            "inputs": [{"name": "x", **ranges}],
            "outputs": [{"name": "output0", **ranges}],
        }
    )
    return manifest


def record(data: dict[str, Any], kind: type[Spec] = TrtManifest) -> Any:
    """`data` (a manifest or spec as JSON holds it, perhaps edited) read as a `kind` record,
    as the action that reads the file would."""
    return kind.from_json(json.dumps({"kind": kind.kind, "format": 1, **data}))
