"""trt_windows_engine: trt_engine with platform fixed to windows_x86_64.

    trt_windows_engine(name = "resnet_win", model = ":resnet", hardware_compatible = True)

The "Cross-Compiling for Windows" workflow of Torch-TensorRT as a rule: on a
Linux x86-64 host with a CUDA GPU, torch.export.export the model, then
torch_tensorrt.dynamo.cross_compile_for_windows, then save the program for
loading on Windows x86-64. It takes every attribute of trt_engine except
`platform`; see rules/tensorrt/trt_engine.py for the outputs and the preflight.
"""

from __future__ import annotations

from kiln.rule_api import Rule
from kiln.rules.tensorrt.trt_engine import TrtEngineBaseAttrs, implementation
from kiln.rules.tensorrt.trt_toolchain import TENSORRT


class TrtWindowsEngineAttrs(TrtEngineBaseAttrs):
    """trt_engine's attributes without `platform`: the target is always windows_x86_64."""


RULE = Rule(
    name="trt_windows_engine",
    attrs=TrtWindowsEngineAttrs,
    doc=(
        "A TensorRT engine of `model` cross-compiled on Linux for Windows x86-64 "
        "(torch_tensorrt.dynamo.cross_compile_for_windows): the .ep to load on Windows, the "
        "raw engines with a manifest, and a C++ loader (CMake, MSVC). Needs a Linux x86-64 "
        "host with a CUDA GPU and a TensorRT with the Windows builder resource."
    ),
    impl=implementation,
    toolchains=(TENSORRT,),
)
