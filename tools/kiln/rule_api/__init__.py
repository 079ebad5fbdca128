"""The rule API: everything a rule in rules/ imports from kiln, in one place.

    from kiln.rule_api import LabelAttr, Rule, RuleAttrs, RuleContext, DefaultInfo, ...

A rule is a module of the catalogue (rules/<folder>/<name>.py) defining an attribute
schema (a RuleAttrs pydantic model) and `impl(ctx: RuleContext) -> providers`,
joined in `RULE = Rule(...)`. Through the context it declares outputs and the
actions that make them; the actions' specs are typed records
(kiln.action_specs, re-exported here) that the `kiln.actions.*` modules read.
Host facts come in as `ctx.host`, toolchains as `ctx.toolchain(T)` for a T
the rule declared. rules/ imports nothing else of kiln: a test holds that
(tests/unit/test_layering.py). docs/writing-a-rule.md walks through one.
"""

from __future__ import annotations

from kiln.action_graph import PYTHON_ACTION_ENV, File, PythonPackage, Resources
from kiln.action_specs import (
    INTEGER_DTYPES,
    Backend,
    BuildGpu,
    CompileSpec,
    CpuTarget,
    Device,
    DType,
    DynamicDim,
    ExportSpec,
    FactoryValue,
    JoinSpec,
    ModelSignature,
    ModelSource,
    ModelSpec,
    PackageSpec,
    Provenance,
    ShapeRange,
    Spec,
    TargetPlatform,
    TensorRTSettings,
    TensorSpec,
    TrtCompileSpec,
    TrtEngineSpec,
    TrtLoaderSpec,
    TrtRefit,
    ValidateSpec,
    WeightsForm,
    WeightsSpec,
)
from kiln.actions.tensorrt.settings import FORCED_OFF as TRT_FORCED_OFF
from kiln.cc_templates import class_name, environment
from kiln.cpu_isa import DEFAULT_TARGET as DEFAULT_CPU_TARGET
from kiln.cpu_isa import Isa
from kiln.cpu_isa import resolve as resolve_cpu_target
from kiln.host_facts import GPUS, Gpu, HostFacts, Toolchain
from kiln.label import Label
from kiln.model_test_specs import (
    ERROR_METRICS,
    LABEL_METRIC_PREFIX,
    ArtifactSpec,
    BenchmarkSpec,
    Bound,
    DatasetFormat,
    DatasetSpec,
    EagerOutputsSpec,
    ModelTestSpec,
)
from kiln.package_specs import ManifestSpec, TrtPackageSpec, TrtRefitSpec
from kiln.rule_api.attrs import LabelAttr, LabelListAttr, OutputAttr, OutputListAttr, RuleAttrs
from kiln.rule_api.context import ActionFactory, AnalysisError, RuleContext
from kiln.rule_api.providers import AnalyzedTarget, DefaultInfo, weights_file_of
from kiln.rule_api.rule import Rule
from kiln.rule_api.testing import TestInfo, TestSize, TestTimeout, declare_test
from kiln.test_results import BASELINE_ENV
from kiln.windows_specs import WindowsCompileSpec, WindowsTorch, WindowsValidateSpec

__all__ = [
    "BASELINE_ENV",
    "DEFAULT_CPU_TARGET",
    "ERROR_METRICS",
    "GPUS",
    "INTEGER_DTYPES",
    "LABEL_METRIC_PREFIX",
    "PYTHON_ACTION_ENV",
    "TRT_FORCED_OFF",
    "ActionFactory",
    "AnalysisError",
    "AnalyzedTarget",
    "ArtifactSpec",
    "Backend",
    "BenchmarkSpec",
    "Bound",
    "BuildGpu",
    "CompileSpec",
    "CpuTarget",
    "DType",
    "DatasetFormat",
    "DatasetSpec",
    "DefaultInfo",
    "Device",
    "DynamicDim",
    "EagerOutputsSpec",
    "ExportSpec",
    "FactoryValue",
    "File",
    "Gpu",
    "HostFacts",
    "Isa",
    "JoinSpec",
    "Label",
    "LabelAttr",
    "LabelListAttr",
    "ManifestSpec",
    "ModelSignature",
    "ModelSource",
    "ModelSpec",
    "ModelTestSpec",
    "OutputAttr",
    "OutputListAttr",
    "PackageSpec",
    "Provenance",
    "PythonPackage",
    "Resources",
    "Rule",
    "RuleAttrs",
    "RuleContext",
    "ShapeRange",
    "Spec",
    "TargetPlatform",
    "TensorRTSettings",
    "TensorSpec",
    "TestInfo",
    "TestSize",
    "TestTimeout",
    "Toolchain",
    "TrtCompileSpec",
    "TrtEngineSpec",
    "TrtLoaderSpec",
    "TrtPackageSpec",
    "TrtRefit",
    "TrtRefitSpec",
    "ValidateSpec",
    "WeightsForm",
    "WeightsSpec",
    "WindowsCompileSpec",
    "WindowsTorch",
    "WindowsValidateSpec",
    "class_name",
    "declare_test",
    "environment",
    "resolve_cpu_target",
    "weights_file_of",
]
