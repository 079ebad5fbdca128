"""Providers: what an analyzed target offers the targets that depend on it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kiln.action_graph import File


@dataclass(frozen=True)
class DefaultInfo:
    """The files a target stands for: what `kiln build` delivers and `srcs` receives."""

    files: tuple[File, ...] = ()
    # Files the target's files need at run time (e.g. a loader library's headers).
    runfiles: tuple[File, ...] = ()


@dataclass(frozen=True)
class AnalyzedTarget:
    """A target after analysis: its providers by type, and the actions it declared."""

    label: str
    providers: dict[type, Any] = field(default_factory=dict)

    def get(self, provider: type[Any]) -> Any:
        return self.providers.get(provider)

    @property
    def files(self) -> tuple[File, ...]:
        info: DefaultInfo | None = self.providers.get(DefaultInfo)
        return info.files if info else ()


def weights_file_of(package: str) -> str:
    """The weights file beside a package: resnet_pt2.pt2 -> resnet_pt2.weights.safetensors.
    Part of aoti_package's contract with the rules that read its outputs (model_test)."""
    return package.removesuffix(".pt2") + ".weights.safetensors"
