"""No state crosses actions (issue 20): what one action leaves behind, another never sees.

Each case is a class of leak seen on main: a daemon a genrule starts with `setsid`
(it left the action's process group, outlived the build and rewrote a later
action's output, which was then cached), a model module that patches torch at
import (a persistent worker carried the patch into another target's weights).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from tests.kiln_workspace import Workspace

KILN = [sys.executable, "-m", "kiln"]

# The daemon keeps writing into its execroot, which kiln gives the next action (execroots
# are reused): `later` writes its output, waits, and kiln would collect the daemon's text.
# The genrule ends once the daemon has left its session (before that, killing the
# genrule's process group would kill it too).
DAEMON = """
genrule(
    name = "daemon",
    outs = ["daemon.pid"],
    cmd = "setsid sh -c 'echo $$$$ > \\"$$0/daemon.started\\"; while :; do "
    + "echo tampered > \\"$$0/kiln-out/app/later.out\\" 2>/dev/null; sleep 0.02; done' "
    + "\\"$$PWD\\" </dev/null >/dev/null 2>&1 & "
    + "while [ ! -s daemon.started ]; do sleep 0.01; done; mv daemon.started $@",
)
genrule(
    name = "later",
    srcs = [":daemon"],
    outs = ["later.out"],
    cmd = "echo fine > $@; sleep 1",
)
"""


def running(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


@pytest.mark.parametrize("sandbox", [True, False], ids=["sandbox", "nosandbox"])
def test_a_daemon_a_genrule_starts_is_killed_with_it_and_never_touches_a_later_output(
    ws: Workspace, sandbox: bool
) -> None:
    ws.write("app/BUILD", DAEMON)
    flags = ["--jobs=1", *([] if sandbox else ["--nosandbox"])]
    run = ws.kiln("build", "//app:later", *flags)
    daemon = int(ws.out("app/daemon.pid"))
    try:
        assert run.code == 0, run.err
        assert ws.out("app/later.out") == "fine\n"
        assert not running(daemon), "the genrule's setsid daemon outlived its action"
    finally:
        if running(daemon):
            os.kill(daemon, 9)


PATCHER = """
import torch

# At import, as some model code does: every Linear made after this, in this process, is 7s.
torch.nn.Linear.reset_parameters = lambda self: torch.nn.init.constant_(self.weight, 7.0)


def model() -> torch.nn.Module:
    return torch.nn.Linear(2, 2)
"""
PLAIN = """
import torch


def model() -> torch.nn.Module:
    return torch.nn.Linear(2, 2)
"""
WEIGHTS = """
model_weights(name = "a_patcher", src = "patcher.py", factory = "patcher:model",
              out = "a_patcher.safetensors")
model_weights(name = "b_plain", src = "plain.py", factory = "plain:model",
              out = "b_plain.safetensors")
"""


@pytest.mark.torch
def test_a_module_that_patches_torch_at_import_changes_no_other_target_in_the_worker(
    ws: Workspace, tmp_path: Path
) -> None:
    ws.write("m/BUILD", WEIGHTS)
    ws.write("m/patcher.py", PATCHER)
    ws.write("m/plain.py", PLAIN)
    # One worker runs both, the patcher first (graph order).
    both = ws.kiln("build", "//m:a_patcher", "//m:b_plain", "--jobs=1")
    assert both.code == 0, both.err
    alone = ws.copy("alone")
    run = alone.kiln("build", "//m:b_plain", f"--disk_cache={tmp_path / 'unshared'}")
    assert run.code == 0, run.err
    assert run.hits == 0  # made afresh, in a worker of its own
    plain = (alone.root / "kiln-out/m/b_plain.safetensors").read_bytes()
    assert (ws.root / "kiln-out/m/b_plain.safetensors").read_bytes() == plain


# A library whose model returns its own output type, registered as a pytree node when
# the class is defined, as transformers' ModelOutput subclasses are
# (`serialized_type_name` = module.class): what the compile must register to load the
# exported program, whichever process ran the export.
HFLIKE = """
import dataclasses

import torch
from torch.utils import _pytree


@dataclasses.dataclass
class LMOutput:
    logits: torch.Tensor
    hidden: torch.Tensor


_pytree.register_pytree_node(
    LMOutput,
    lambda o: ([o.logits, o.hidden], None),
    lambda values, _: LMOutput(*values),
    serialized_type_name=f"{LMOutput.__module__}.{LMOutput.__name__}",
    flatten_with_keys_fn=lambda o: (
        [(_pytree.GetAttrKey("logits"), o.logits), (_pytree.GetAttrKey("hidden"), o.hidden)],
        None,
    ),
)


class TinyLM(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(4, 3)

    def forward(self, x: torch.Tensor) -> LMOutput:
        hidden = torch.relu(x)
        return LMOutput(self.proj(hidden), hidden)
"""
LM_BUILD = """
torch_model(
    name = "lm",
    src = "lm.py",
    factory = "lm:tiny",
    deps = ["@pip//hflike"],
    inputs = [{"name": "x", "shape": [2, 4], "dtype": "float32"}],
)
aoti_package(name = "lm_pt2", model = ":lm",
             inductor_configs = {"aot_inductor.compile_wrapper_opt_level": "O0"})
"""
LM = """
import torch


def tiny() -> torch.nn.Module:
    from hflike.modeling import TinyLM

    return TinyLM()
"""


@pytest.mark.torch
def test_a_package_compiles_from_an_export_the_cache_holds_whose_outputs_a_library_defines(
    ws: Workspace, tmp_path: Path
) -> None:
    from tests.wheels import make_wheel

    wheelhouse = tmp_path / "wheelhouse"
    _, package = make_wheel(
        wheelhouse, "hflike", "1.0", {"hflike/__init__.py": "", "hflike/modeling.py": HFLIKE}
    )
    ws.write("BUILD", 'python_requirements(name = "pip", lock = "requirements_lock.txt")\n')
    ws.write(
        "requirements_lock.txt",
        f"hflike==1.0 \\\n    --hash={package.hashes[0]}\n    # via -r requirements.in\n",
    )
    ws.write("m/BUILD", LM_BUILD)
    ws.write("m/lm.py", LM)
    links = f"--pip_find_links={wheelhouse}"
    first = ws.kiln("build", "//m:lm_pt2", links)
    assert first.code == 0, first.err
    # Another output base, the same disk cache, another compile setting: the export is a
    # hit, the compile runs, in a process that never imported the library.
    fresh = ws.copy("fresh")
    fresh.write("m/BUILD", LM_BUILD.replace('"O0"', '"O1"'))
    run = fresh.kiln("build", "//m:lm_pt2", links)
    assert run.code == 0, run.err
    assert "TorchExport" not in run.err  # a hit: only what runs is listed
    assert "AotiCompile //m:lm_pt2 (worker" in run.err
    assert (fresh.root / "kiln-out/m/lm_pt2.pt2").exists()


# What a genrule can reach of the toolchain's shared state inside kiln's sandbox: torch's
# precompiled headers and the links naming torch's and Python's folders, at the fixed
# path every action sees. On main it rewrote each header (and removed its compiled form,
# so inductor made it again from the rewritten text): another workspace's next compile,
# under a clean key, then built the genrule's text into its package (here: an #error).
# Now the disk cache's folder is the read-only store (/tmp/kiln-torch-store), and the
# fixed path each action's own. The Windows torch libraries, which a genrule could write
# until kiln unpacked them itself, are read-only too (there and in the store).
POISON = """
genrule(
    name = "poison",
    outs = ["poison.log"],
    cmd = "for h in /tmp/kiln-torch-tmp/precompiled_headers/*.h "
    + "/tmp/kiln-torch-store/published_headers/*.h; do "
    + "(echo '#error poisoned by a genrule' > $$h && rm -f $$h.gch) 2>/dev/null "
    + "&& echo rewrote $$h >> $@; done; "
    + "for l in /tmp/kiln-torch-tmp/toolchain/* /tmp/kiln-torch-store/toolchain/*; do "
    + "ln -sfn /nonexistent $$l 2>/dev/null && echo relinked $$l >> $@; done; "
    + "for d in /tmp/kiln-torch-tmp/windows-torch /tmp/kiln-torch-store/windows-libs; do "
    + "touch $$d/poison 2>/dev/null && echo wrote into $$d >> $@; done; touch $@",
)
"""
TINY = """
torch_model(
    name = "tiny",
    src = "tiny.py",
    factory = "tiny:model",
    inputs = [{"name": "x", "shape": [2, 4], "dtype": "float32"}],
)
aoti_package(name = "tiny_pt2", model = ":tiny",
             inductor_configs = {"aot_inductor.compile_wrapper_opt_level": "O0"})
"""
TINY_MODEL = """
import torch


def model() -> torch.nn.Module:
    return torch.nn.Linear(4, 3)
"""


def _header_state(torch_tmp: Path) -> dict[str, bytes]:
    headers = torch_tmp / "published_headers"
    return {p.name: p.read_bytes() for p in sorted(headers.glob("*.h*")) if p.is_file()}


@pytest.mark.torch
def test_a_genrule_that_writes_into_the_torch_folder_changes_no_later_compile(
    ws: Workspace,
) -> None:
    ws.write("m/BUILD", TINY)
    ws.write("m/tiny.py", TINY_MODEL)
    ws.write("g/BUILD", POISON)
    first = ws.kiln("build", "//m:tiny_pt2")
    assert first.code == 0, first.err
    torch_tmp = ws.disk_cache / "tmp" / "torch"
    headers = _header_state(torch_tmp)
    assert any(name.endswith(".gch") for name in headers), sorted(headers)
    poison = ws.kiln("build", "//g:poison")
    assert poison.code == 0, poison.err
    # Another workspace, the same disk cache, another compile setting: the compile runs
    # and reads the headers the genrule tried to rewrite.
    fresh = ws.copy("fresh")
    fresh.write("m/BUILD", TINY.replace('"O0"', '"O1"'))
    run = fresh.kiln("build", "//m:tiny_pt2")
    assert run.code == 0, run.err
    assert "AotiCompile //m:tiny_pt2" in run.err
    assert ws.out("g/poison.log") == "", ws.out("g/poison.log")
    after = _header_state(torch_tmp)  # the O1 wrapper's header is new: the others as made
    assert {name: after.get(name) for name in headers} == headers
