"""RuleContext: the narrow handle a rule implementation gets.

A rule sees its own attributes (the validated pydantic model), the providers
of the targets its label attributes name, and an ActionFactory to declare
outputs and the actions that produce them. It never touches the disk and
never imports torch: it only describes work for the executor.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from typing import Any, Generic, TypeVar

from kiln.action_graph import GENERATED_ROOT, Action, File, Resources
from kiln.errors import KilnError
from kiln.rule_api.attrs import RuleAttrs
from kiln.rule_api.providers import AnalyzedTarget, DefaultInfo

A = TypeVar("A", bound=RuleAttrs)


class AnalysisError(KilnError):
    pass


# The whole environment of a Python action: nothing of the user's shell leaks in.
PYTHON_ACTION_ENV = {
    "PATH": "/usr/local/bin:/usr/bin:/bin",
    "PYTHONHASHSEED": "0",
    "PYTHONDONTWRITEBYTECODE": "1",
    "LANG": "C.UTF-8",
}


class ActionFactory:
    def __init__(self, owner: str, python: str = sys.executable):
        self.owner = owner
        self.python = python
        self.declared: list[Action] = []

    def run_python(
        self,
        *,
        mnemonic: str,
        module: str,
        spec: File,
        inputs: Sequence[File],
        outputs: Sequence[File],
        platform: dict[str, str],
        resources: Resources,
        supports_workers: bool = True,
        progress_message: str = "",
    ) -> Action:
        """`python -m kiln.actions.<module> <spec>`: the form persistent workers run."""
        return self.run(
            mnemonic=mnemonic,
            argv=[self.python, "-m", f"kiln.actions.{module}", spec.path],
            inputs=[spec, *inputs],
            outputs=outputs,
            env=PYTHON_ACTION_ENV,
            platform=platform,
            resources=resources,
            supports_workers=supports_workers,
            progress_message=progress_message or f"{mnemonic} {self.owner}",
        )

    def write_json(self, output: File, value: dict[str, Any]) -> Action:
        """An action's spec: canonical JSON, so equal specs are equal bytes."""
        return self.write(output, json.dumps(value, indent=2, sort_keys=True) + "\n")

    def run(
        self,
        *,
        mnemonic: str,
        argv: Sequence[str],
        inputs: Sequence[File],
        outputs: Sequence[File],
        env: dict[str, str] | None = None,
        platform: dict[str, str] | None = None,
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
        self.declared.append(action)
        return action

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
        label: str,
        attrs: A,
        deps: dict[str, AnalyzedTarget],
        *,
        python: str = sys.executable,
    ):
        self.label = label
        self.attrs = attrs
        self.package = label[2 : label.index(":")]
        self.name = label[label.index(":") + 1 :]
        self.actions = ActionFactory(label, python)
        self.python = python  # the interpreter that runs Python actions
        self._deps = deps
        self._declared: set[str] = set()

    def error(self, message: str, *, hint: str | None = None) -> AnalysisError:
        return AnalysisError(message, label=self.label, hint=hint)

    def dep(self, label: str) -> AnalyzedTarget:
        return self._deps[label]

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

    def declare_file(self, name: str) -> File:
        """An output of this target: kiln-out/<package>/<name>."""
        if name in self._declared:
            raise self.error(f"output '{name}' declared twice")
        self._declared.add(name)
        prefix = f"{GENERATED_ROOT}/{self.package}/" if self.package else f"{GENERATED_ROOT}/"
        return File(prefix + name, self.label)

    def declare_directory(self, name: str) -> File:
        """An output directory of this target, whose files the action decides."""
        file = self.declare_file(name)
        return File(file.path, self.label, directory=True)

    def default_info(self, files: Sequence[File], runfiles: Sequence[File] = ()) -> DefaultInfo:
        return DefaultInfo(tuple(files), tuple(runfiles))

    def providers(self, *items: Any) -> dict[type, Any]:
        return {type(item): item for item in items}
