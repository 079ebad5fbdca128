"""Every failure inside a model action is one paragraph: where, which target, the hint.

Small models in tests/models/traps.py each fall into one known trap of exporting;
one kiln build (--keep_going) runs them all (export only: they fail before any
packaging). Each test pins its paragraph verbatim: the user's file:line (the
innermost frame of workspace code), the torch_model whose attribute to change
(never the aoti_package), torch's suggested fix kept whole, and the named hint.
No Python traceback, unless asked for with --verbose_failures (which the executor passes
to actions as KILN_VERBOSE_FAILURES=1, outside their keys; see the module's last test).
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.test_aoti_package import REPO, ModelWorkspace, make_workspace
from tests.kiln_workspace import BuildResult

pytestmark = pytest.mark.torch

TRAPS = {
    # name: (factory, inputs, dynamic dims)
    "raises": ("raises", '[{"name": "x", "shape": [2, 4]}]', "[]"),
    "rank": ("conv", '[{"name": "image", "shape": [4, 4]}]', "[]"),
    "dtype": ("tokens", '[{"name": "ids", "shape": [2, 8]}]', "[]"),
    "vocab": (
        "tokens",
        '[{"name": "ids", "shape": [2, 8], "dtype": "int64", "low": 0, "high": 101}]',
        "[]",
    ),
    "positions": (
        "tokens",
        '[{"name": "ids", "shape": [2, 8], "dtype": "int64", "low": 0, "high": 100}]',
        '[{"name": "seq", "min": 2, "max": 40, "axes": {"ids": 1}}]',
    ),
    "narrows": (
        "narrows",
        '[{"name": "x", "shape": [2, 8]}]',
        '[{"name": "seq", "min": 2, "max": 64, "axes": {"x": 1}}]',
    ),
    "fixes": (
        "fixes",
        '[{"name": "x", "shape": [8, 4]}]',
        '[{"name": "batch", "min": 2, "max": 64, "axes": {"x": 0}}]',
    ),
    "caching": ("caching", '[{"name": "x", "shape": [2, 4]}]', "[]"),
}

BUILD = "".join(
    f"""
torch_model(
    name = "{name}",
    src = "traps.py",
    factory = "traps:{factory}",
    inputs = {inputs},
    dynamic_dims = {dims},
)

aoti_package(name = "{name}_pt2", model = ":{name}")
"""
    for name, (factory, inputs, dims) in TRAPS.items()
)


@pytest.fixture(scope="module")
def traps(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ModelWorkspace, BuildResult]]:
    base = tmp_path_factory.mktemp("traps")
    ws = make_workspace(base / "ws", base / "cache", BUILD)
    shutil.copy(REPO / "tests/models/traps.py", ws.root / "models/traps.py")
    yield ws, ws.build("//models/...", "--keep_going")


def paragraph(err: str, target: str, mnemonic: str = "TorchExport") -> str:
    """The kiln-action-error paragraph of `mnemonic` of //models:<target>_pt2."""
    found = re.search(
        rf"ERROR: models/BUILD:\d+:1: {mnemonic} //models:{target}_pt2 failed: exited with "
        r"code 1\nkiln-action-error: (.*?)(?=\nERROR: |\nINFO: |\n\[|\Z)",
        err,
        re.S,
    )
    assert found, f"no {mnemonic} failure of {target} in:\n{err}"
    return found.group(1)


def _line(pattern: str) -> int:
    """The line of tests/models/traps.py that holds `pattern`: the user's frame."""
    lines = (REPO / "tests/models/traps.py").read_text().splitlines()
    return next(i for i, line in enumerate(lines, 1) if pattern in line)


def test_no_trap_prints_a_traceback(traps: tuple[ModelWorkspace, BuildResult]) -> None:
    _, run = traps
    assert run.code == 1
    assert "Traceback" not in run.err
    assert len(re.findall("kiln-action-error: ", run.err)) == len(TRAPS)


def test_a_factory_that_raises_names_its_line(traps: tuple[ModelWorkspace, BuildResult]) -> None:
    line = _line('raise RuntimeError("checkpoint not found")')
    assert paragraph(traps[1].err, "raises") == (
        f"models/traps.py:{line}: //models:raises: the factory traps:raises raised "
        "RuntimeError: checkpoint not found"
    )


def test_wrong_rank_names_the_input_and_its_declared_shape(
    traps: tuple[ModelWorkspace, BuildResult],
) -> None:
    assert paragraph(traps[1].err, "rank") == (
        f"models/traps.py:{_line('return self.conv(image)')}: //models:rank: the model fails "
        "in eager on its example inputs: RuntimeError: Expected 3D (unbatched) or 4D (batched) "
        "input to conv2d, but got input of size: [4, 4]\n"
        "  hint: input 'image' is declared [4, 4] float32 (rank 2) in inputs of //models:rank, "
        "a shape the model does not take here: change its shape (and dynamic_dims)"
    )


def test_wrong_dtype_names_the_input(traps: tuple[ModelWorkspace, BuildResult]) -> None:
    assert paragraph(traps[1].err, "dtype") == (
        f"models/traps.py:{_line('self.tokens(ids) + self.positions')}: //models:dtype: the "
        "model fails in eager on its example inputs: RuntimeError: Expected tensor for "
        "argument #1 'indices' to have one of the following scalar types: Long, Int; but got "
        "torch.FloatTensor instead (while checking arguments for embedding)\n"
        "  hint: input 'ids' is declared [2, 8] float32 in inputs of //models:dtype, a dtype "
        "the model does not take here: change it"
    )


def test_token_ids_past_the_vocabulary(traps: tuple[ModelWorkspace, BuildResult]) -> None:
    """high = 101 for an embedding of 100 rows: the sampled ids include 100, eager fails."""
    where = f"models/traps.py:{_line('self.tokens(ids) + self.positions')}"
    assert paragraph(traps[1].err, "vocab") == (
        f"{where}: //models:vocab: the model fails in eager on its example inputs: "
        "IndexError: index out of range in self\n"
        f"  hint: input 'ids' is declared to take ids in [0, 101), but the embedding at {where} "
        "has 100 rows: set high = 100 (or less) for 'ids' in inputs of //models:vocab"
    )


def test_a_sequence_past_the_positions(traps: tuple[ModelWorkspace, BuildResult]) -> None:
    """GPT-2's trap: a dynamic seq max beyond the positions fails at the max shape point,
    in the export action, before anything is packaged."""
    where = f"models/traps.py:{_line('self.tokens(ids) + self.positions')}"
    assert paragraph(traps[1].err, "positions") == (
        f"{where}: //models:positions: the model fails in eager at the max shapes "
        "(ids: [2, 40]): IndexError: index out of range in self\n"
        f"  hint: the dynamic dim 'seq' reaches 40, but the embedding at {where} has 16 rows "
        "(its positions): set max = 16 (or less) for 'seq' in dynamic_dims of //models:positions"
    )


def test_torchs_suggested_fix_is_kept_whole(traps: tuple[ModelWorkspace, BuildResult]) -> None:
    assert paragraph(traps[1].err, "narrows") == (
        "//models:narrows: torch.export cannot keep the dynamic dims as declared: the model "
        "takes 'seq' only in [4, 64], not the declared [2, 64] (torch suggests: "
        "seq = Dim('seq', min=4, max=64))\n"
        "  hint: set min = 4, max = 64 for 'seq' in dynamic_dims of //models:narrows"
    )


def test_a_dim_the_model_fixes(traps: tuple[ModelWorkspace, BuildResult]) -> None:
    assert paragraph(traps[1].err, "fixes") == (
        "//models:fixes: torch.export cannot keep the dynamic dims as declared: the model "
        "fixes 'batch' to 8 (torch suggests: batch = 8)\n"
        "  hint: make the model take other sizes of 'batch' (no hard-coded sizes in "
        "view/reshape), or drop 'batch' from dynamic_dims of //models:fixes"
    )


def test_use_cache_is_named(traps: tuple[ModelWorkspace, BuildResult]) -> None:
    """A model that returns its key/value cache object, as a Hugging Face model left with
    use_cache=True does: torch's pytree message, then what to set."""
    assert paragraph(traps[1].err, "caching") == (
        "//models:caching: torch.export failed: the model returns a type it cannot flatten "
        "(RuntimeError: Found <class 'traps.Cache'> in output, which is not a known type.)\n"
        "  hint: the model's config has use_cache = True, so it returns its key/value cache "
        "(past_key_values): build it with use_cache=False (set model.config.use_cache = False "
        "in the factory, or pass use_cache = False in factory_kwargs of //models:caching)"
    )


def test_verbose_failures_add_the_traceback(traps: tuple[ModelWorkspace, BuildResult]) -> None:
    ws, _ = traps
    run = ws.build("//models:raises_pt2", "--verbose_failures")
    text = paragraph(run.err, "raises")
    assert text.startswith("models/traps.py:")
    assert "\nTraceback (most recent call last):\n" in text
    assert 'raise RuntimeError("checkpoint not found")' in text


HF_GPT2 = """
from transformers import GPT2Config, GPT2LMHeadModel


def build(use_cache: bool = True):
    config = GPT2Config(
        vocab_size=100, n_positions=32, n_embd=16, n_layer=1, n_head=2, use_cache=use_cache
    )
    return GPT2LMHeadModel(config)
"""


def test_hugging_face_use_cache(tmp_path: Path) -> None:
    """The real trap, where transformers is installed (issue 13 locks it for the project)."""
    pytest.importorskip("transformers")
    build = """
torch_model(
    name = "gpt2",
    src = "gpt2.py",
    factory = "gpt2:build",
    inputs = [{"name": "ids", "shape": [2, 8], "dtype": "int64", "low": 0, "high": 100}],
)

aoti_package(name = "gpt2_pt2", model = ":gpt2")
"""
    ws = make_workspace(tmp_path / "ws", tmp_path / "cache", build)
    (ws.root / "models/gpt2.py").write_text(HF_GPT2)
    run = ws.build("//models:gpt2_pt2")
    if run.code == 0:
        pytest.skip("this transformers' cache flattens under torch.export: no trap to name")
    text = paragraph(run.err, "gpt2")
    assert "Traceback" not in run.err
    assert "use_cache" in text and "//models:gpt2" in text
