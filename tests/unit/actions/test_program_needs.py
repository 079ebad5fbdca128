"""kiln.actions.program_needs: what loading an exported program imports, as the key holds it.

The environment's locked packages and the distributions of modules are stand-ins
(monkeypatched): `teamlib` provides this test module, and requires `dep`; `other`
is locked too but unrelated.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import pytest
import torch
from kiln.actions import program_needs

pytestmark = pytest.mark.torch

LOCKED = {
    "teamlib": "teamlib==1.0 --hash=sha256:aa",
    "dep": "dep==2.0 --hash=sha256:bb",
    "other": "other==3.0 --hash=sha256:cc",
}


@dataclasses.dataclass
class Output:
    """A library's own output type (as transformers' ModelOutput is)."""

    y: torch.Tensor


torch.export.register_dataclass(Output, serialized_type_name=f"{__name__}.Output")


@torch.library.custom_op("kilntest::twice", mutates_args=())
def twice(x: torch.Tensor) -> torch.Tensor:
    return x * 2


@twice.register_fake
def _(x: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(x)


class Plain(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + 1


class Typed(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> Output:
        return Output(y=x + 1)


class CustomOp(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return twice(x)


@pytest.fixture(autouse=True)
def environment(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    top = __name__.partition(".")[0]
    monkeypatch.setattr(program_needs, "_locked_requirements", lambda: dict(LOCKED))
    monkeypatch.setattr(
        program_needs.metadata, "packages_distributions", lambda: {top: ["TeamLib"]}
    )
    requires = {"teamlib": ["Dep>=2", "other; extra == 'all'"], "dep": []}
    monkeypatch.setattr(program_needs.metadata, "requires", requires.get)
    yield


def needs(module: torch.nn.Module) -> program_needs.ProgramNeeds:
    return program_needs.needs_of(torch.export.export(module, (torch.ones(2),)))


def test_a_program_of_tensors_needs_nothing() -> None:
    assert needs(Plain()) == program_needs.ProgramNeeds(modules=(), custom_ops=(), packages=())


def test_an_output_type_needs_its_package_and_what_that_requires_but_nothing_else() -> None:
    found = needs(Typed())
    assert found.modules == (__name__,)
    assert found.packages == (LOCKED["dep"], LOCKED["teamlib"])  # not `other`: an extra's


def test_a_custom_op_needs_every_locked_package() -> None:
    found = needs(CustomOp())
    assert found.custom_ops == ("kilntest",)
    assert found.packages == tuple(LOCKED[name] for name in sorted(LOCKED))
