"""RuleContext: the narrow handle a rule implementation gets.

A rule sees its own attributes (the validated pydantic model), the providers
of the targets its label attributes name, the facts of the host its actions
run on and the toolchains it declared, and an ActionFactory to declare
outputs and the actions that produce them. It never touches the disk and
never imports torch: it only describes work for the executor.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Generic, TypeVar

from kiln import code_digest
from kiln.action_graph import (
    GENERATED_ROOT,
    PIP_PROPERTY,
    PYTHON_ACTION_ENV,
    PYTHON_ENV_FORMAT,
    PYTHON_INTERPRETER,
    Action,
    File,
    PythonPackage,
    Resources,
)
from kiln.action_specs import Spec
from kiln.errors import KilnError
from kiln.host_facts import HostFacts, Toolchain, ToolchainResolver
from kiln.rule_api.attrs import RuleAttrs
from kiln.rule_api.providers import AnalyzedTarget

if TYPE_CHECKING:
    from kiln.rule_api.rule import Rule
    from kiln.windows_specs import WindowsTorch

A = TypeVar("A", bound=RuleAttrs)
P = TypeVar("P")
T = TypeVar("T")


class AnalysisError(KilnError):
    pass


class ActionFactory:
    def __init__(self, owner: str, host: HostFacts, toolchains: ToolchainResolver | None = None):
        self.owner = owner
        self.host = host
        self._toolchains = toolchains
        self.declared: list[Action] = []

    def python_platform(
        self,
        module: str,
        packages: Sequence[str] = (),
        python_env: Sequence[PythonPackage] = (),
        *,
        gpu: bool = False,
    ) -> dict[str, str]:
        """What a `python -m kiln.actions.<module>` action's result depends on besides its
        inputs: OS, Python, the action's own code (kiln.code_digest), the versions of the
        toolchain's distributions it imports ('-' where absent), and every third-party
        package its environment holds (`pip:<name>`: version and wheel hashes, as locked).
        A `gpu` action's host facts are those of the machine GPU actions run on
        (host_facts.GPU_HOST: maybe a cluster's node)."""
        host = self.gpu_host if gpu else self.host
        props = {
            "os": host.os,
            "arch": host.arch,
            "python": host.python,
            "python_impl": host.python_impl,
            "python_env": PYTHON_ENV_FORMAT,
            "kiln_actions": code_digest.content_digest((f"kiln.actions.{module}",)),
        }
        for name in packages:
            props[name] = host.version(name) or "-"
        for package in python_env:
            props[f"{PIP_PROPERTY}{package.name}"] = f"{package.version} {','.join(package.hashes)}"
        return props

    def run_python(
        self,
        *,
        mnemonic: str,
        module: str,
        spec: File,
        inputs: Sequence[File],
        outputs: Sequence[File],
        packages: Sequence[str] = (),
        python_env: Sequence[PythonPackage] = (),
        needs: File | None = None,
        platform: Mapping[str, str] | None = None,
        resources: Resources,
        supports_workers: bool = True,
        progress_message: str = "",
        windows_torch: WindowsTorch | None = None,
    ) -> Action:
        """`python -m kiln.actions.<module> <spec>`: the form persistent workers run.

        It runs in the environment of the toolchain plus exactly `python_env` (the
        locked closure of the packages the target declares, `@pip//name`); its
        platform is python_platform(module, packages, python_env), plus `platform`.
        argv[0] is PYTHON_INTERPRETER, a name the executor and the spawner resolve (to
        the environment's interpreter, or this build's), never a path: the key is the
        same wherever Python is installed. `windows_torch`: the Windows torch libraries
        the action links or runs with, which kiln unpacks for it (Action.windows_torch).

        `needs`: the action only loads an exported program, and reads of `python_env`
        only what TorchExport's record of the program's needs names
        (kiln.actions.program_needs). That record is an input, and it holds the key's
        packages in place of the environment's `pip:` pins: a library bump that leaves
        the program alone leaves this action's key alone.
        """
        keyed_env = () if needs is not None else python_env
        gpu = resources.gpu > 0
        return self._declare(
            Action(
                owner=self.owner,
                mnemonic=mnemonic,
                argv=(PYTHON_INTERPRETER, "-m", f"kiln.actions.{module}", spec.path),
                inputs=(spec, *inputs, *([needs] if needs is not None else [])),
                outputs=tuple(outputs),
                env=tuple(PYTHON_ACTION_ENV.items()),
                platform=tuple(
                    {
                        **self.python_platform(module, packages, keyed_env, gpu=gpu),
                        **(platform or {}),
                    }.items()
                ),
                resources=resources,
                supports_workers=supports_workers,
                progress_message=progress_message or f"{mnemonic} {self.owner}",
                python_env=tuple(python_env),
                windows_torch=windows_torch,
            )
        )

    def _declare(self, action: Action) -> Action:
        self.declared.append(action)
        return action

    @property
    def gpu_host(self) -> HostFacts:
        """The host facts of the machine GPU actions run on (this one, or a GPU node of
        the remote executor's cluster when this host has no GPU)."""
        return self.host if self._toolchains is None else self._toolchains.gpu_host

    def write_spec(self, output: File, spec: Spec) -> Action:
        """An action's spec record, as canonical JSON: equal specs are equal bytes."""
        return self.write(output, spec.to_json())

    def run(
        self,
        *,
        mnemonic: str,
        argv: Sequence[str],
        inputs: Sequence[File],
        outputs: Sequence[File],
        env: Mapping[str, str] | None = None,
        platform: Mapping[str, str] | None = None,
        resources: Resources | None = None,
        supports_workers: bool = False,
        progress_message: str = "",
    ) -> Action:
        action = Action(
            owner=self.owner,
            mnemonic=mnemonic,
            argv=tuple(argv),
            inputs=tuple(inputs),
            outputs=tuple(outputs),
            env=tuple((env or {}).items()),
            platform=tuple((platform or {}).items()),
            resources=resources or Resources(),
            supports_workers=supports_workers,
            progress_message=progress_message,
        )
        return self._declare(action)

    def run_test(
        self,
        *,
        mnemonic: str,
        argv: Sequence[str],
        inputs: Sequence[File],
        outputs: Sequence[File],
        env: Mapping[str, str],
        platform: Mapping[str, str],
        resources: Resources,
        python_env: Sequence[PythonPackage],
        progress_message: str,
    ) -> Action:
        """A test's action (kiln.rule_api.testing.declare_test): run by the toolchain's Python
        in the environment of `python_env`, never in a persistent worker (a test may crash
        or hang; it is killed alone)."""
        return self._declare(
            Action(
                owner=self.owner,
                mnemonic=mnemonic,
                argv=tuple(argv),
                inputs=tuple(inputs),
                outputs=tuple(outputs),
                env=tuple(env.items()),
                platform=tuple(platform.items()),
                resources=resources,
                progress_message=progress_message,
                python_env=tuple(python_env),
            )
        )

    def write(self, output: File, content: str | bytes, *, is_executable: bool = False) -> Action:
        """A file whose content analysis already knows (specs, generated sources)."""
        data = content.encode() if isinstance(content, str) else content
        action = Action(
            owner=self.owner,
            mnemonic="FileWrite",
            argv=(),
            inputs=(),
            outputs=(output,),
            content=data,
            is_executable=is_executable,
        )
        self.declared.append(action)
        return action


class RuleContext(Generic[A]):
    def __init__(
        self,
        rule: Rule,
        label: str,
        attrs: A,
        deps: Mapping[str, AnalyzedTarget],
        toolchains: ToolchainResolver,
        *,
        output_root: str = GENERATED_ROOT,
    ):
        self.rule = rule
        self.label = label
        self.attrs = attrs
        self.package = label[: label.index(":")].removeprefix("//")
        self.name = label[label.index(":") + 1 :]
        self.host = toolchains.host
        self.actions = ActionFactory(label, toolchains.host, toolchains)
        # Where outputs go, relative to the execroot: kiln-out, or for Bazel's planning
        # action bazel-out/<cfg>/bin (kiln.bazel.paths). Rules only ever see bin_dir.
        self.output_root = output_root
        self._deps = deps
        self._toolchains = toolchains
        self._declared: set[str] = set()

    @property
    def gpu_host(self) -> HostFacts:
        """The facts of the machine this build's GPU actions run on: `host`, unless they
        run on a cluster (--remote_executor without a local GPU), then its GPU node's."""
        return self.actions.gpu_host

    @property
    def bin_dir(self) -> str:
        """Where this package's outputs go: kiln-out/<package> (Bazel's $(RULEDIR))."""
        return f"{self.output_root}/{self.package}" if self.package else self.output_root

    def error(self, message: str, *, hint: str | None = None) -> AnalysisError:
        return AnalysisError(message, label=self.label, hint=hint)

    def toolchain(self, toolchain: Toolchain[T]) -> T:
        """The value of a toolchain this rule declared (resolved once per build)."""
        if toolchain not in self.rule.toolchains:
            raise AssertionError(
                f"rule {self.rule.name} reads toolchain '{toolchain.name}' without declaring "
                "it in Rule(toolchains=...)"
            )
        return self._toolchains.get(toolchain)

    def dep(self, label: str) -> AnalyzedTarget:
        return self._deps[label]

    def provider(self, attr: str, label: str, provider: type[P], what: str) -> P:
        """The `provider` of the target attribute `attr` names; an error naming `what` it
        must be (e.g. "a torch_model target") if that target does not offer one."""
        found: P | None = self._deps[label].get(provider)
        if found is None:
            raise self.error(f"attribute '{attr}' must name {what}, not {label}")
        return found

    def files(self, labels: str | Sequence[str] | None) -> list[File]:
        """The files of the targets named by a label attribute's value, in order."""
        if labels is None:
            return []
        if isinstance(labels, str):
            labels = [labels]
        out: list[File] = []
        for label in labels:
            out.extend(self._deps[label].files)
        return list(dict.fromkeys(out))

    def file(self, attr: str, label: str) -> File:
        """The one file of the target a single-file attribute names."""
        files = self.files(label)
        if len(files) != 1:
            raise self.error(
                f"attribute '{attr}' must name exactly one file; {label} has {len(files)}"
            )
        return files[0]

    def declare_file(self, name: str) -> File:
        """An output of this target: kiln-out/<package>/<name>."""
        if name in self._declared:
            raise self.error(f"output '{name}' declared twice")
        self._declared.add(name)
        return File(f"{self.bin_dir}/{name}", self.label)

    def declare_directory(self, name: str) -> File:
        """An output directory of this target, whose files the action decides."""
        file = self.declare_file(name)
        return File(file.path, self.label, directory=True)
