"""TorchExport's split of an exported program into its structure and its weights.

The structure is what AotiCompile is keyed on: its bytes must be those of the
architecture alone. Real torch.export, no compile (a few seconds).
"""

from __future__ import annotations

import io
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from kiln.actions import weights_split  # noqa: E402
from kiln.actions.spec import ActionFailure  # noqa: E402

pytestmark = pytest.mark.torch


class Tied(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Linear(4, 4, bias=False)
        self.head = torch.nn.Linear(4, 4, bias=True)
        self.head.weight = self.embed.weight  # tied: one tensor, two names
        self.norm = torch.nn.LayerNorm(4)
        self.register_buffer("shift", torch.rand(4), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(self.head(self.embed(x))) + self.shift


def _program(seed: int) -> torch.export.ExportedProgram:
    torch.manual_seed(seed)
    model = Tied().eval()
    # The same example whatever the weights (the archive holds it), as kiln's are.
    return torch.export.export(model, (torch.arange(8.0).reshape(2, 4),))


def _saved(program: torch.export.ExportedProgram, path: Path, ties: dict[str, str]) -> bytes:
    weights_split.save_structure(program, path, ties)
    return path.read_bytes()


def test_two_weight_sets_give_one_small_structure(tmp_path: Path) -> None:
    first, second = _program(0), _program(1)
    whole = io.BytesIO()
    torch.export.save(first, whole)
    weights, ties = weights_split.split(first)
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()  # one file name: the archive's top folder is its stem
    saved = _saved(first, tmp_path / "a/s.pt2", ties)
    assert saved == _saved(second, tmp_path / "b/s.pt2", weights_split.split(second)[1])
    assert ties == {"head.weight": "embed.weight"}
    assert len(saved) < len(whole.getvalue())  # meta tensors: no weight bytes at all
    # What the split took out: every parameter and buffer, the non-persistent one too.
    assert sorted(weights) == [
        "embed.weight",
        "head.bias",
        "head.weight",
        "norm.bias",
        "norm.weight",
        "shift",
    ]


def test_placeholders_keep_dtype_shape_strides_and_ties_but_no_value(tmp_path: Path) -> None:
    program = _program(0)
    weights, ties = weights_split.split(program)
    weights_split.save_structure(program, tmp_path / "s.pt2", ties)
    loaded = weights_split.load_structure(tmp_path / "s.pt2", "cpu")
    state = weights_split.weights_of(loaded)
    again = weights_split.weights_of(weights_split.load_structure(tmp_path / "s.pt2", "cpu"))
    for name, value in weights.items():
        placeholder = state[name]
        assert (placeholder.dtype, placeholder.shape) == (value.dtype, value.shape)
        assert placeholder.stride() == value.stride()
        assert not torch.equal(placeholder, value)
        assert torch.equal(placeholder, again[name])  # deterministic
        # Never uniform (what a compiler might fold): LayerNorm's init is ones and zeros.
        assert placeholder.unique().numel() == placeholder.numel()
    assert isinstance(state["norm.weight"], torch.nn.Parameter)
    tied = state["embed.weight"].untyped_storage(), state["head.weight"].untyped_storage()
    assert tied[0].data_ptr() == tied[1].data_ptr()


def test_channels_last_weights_keep_their_strides(tmp_path: Path) -> None:
    conv = torch.nn.Conv2d(3, 8, 3).to(memory_format=torch.channels_last)
    program = torch.export.export(conv.eval(), (torch.randn(1, 3, 8, 8),))
    weights_split.save_structure(program, tmp_path / "s.pt2", weights_split.split(program)[1])
    loaded = weights_split.load_structure(tmp_path / "s.pt2", "cpu")
    assert weights_split.weights_of(loaded)["weight"].stride() == conv.weight.stride()


def test_restore_puts_the_weights_back(tmp_path: Path) -> None:
    program = _program(0)
    weights, ties = weights_split.split(program)
    weights_split.save_structure(program, tmp_path / "s.pt2", ties)
    loaded = weights_split.load_structure(tmp_path / "s.pt2", "cpu")
    weights_split.restore(loaded, weights)
    x = torch.arange(8.0).reshape(2, 4)
    assert torch.equal(loaded.module()(x), _program(0).module()(x))


def test_a_weight_that_is_a_view_is_refused() -> None:
    class View(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.register_buffer("head4", torch.arange(8.0)[:4])

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x + self.head4

    program = torch.export.export(View(), (torch.randn(4),))
    with pytest.raises(ActionFailure) as error:
        weights_split.split(program)
    assert str(error.value).startswith(
        "weight 'head4' (shape [4], strides [1], storage offset 0) is a view into a larger tensor"
    )
