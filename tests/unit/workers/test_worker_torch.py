"""Workers keep torch imported: the reason they exist."""

from __future__ import annotations

import sys
import time

import pytest
from kiln.workers import WorkerPool, WorkResponse
from worker_helpers import MakeExecroot

pytestmark = pytest.mark.torch


@pytest.mark.slow
def test_torch_is_imported_once_and_reused_by_the_next_action(
    make_execroot: MakeExecroot,
) -> None:
    pytest.importorskip("torch")
    root = make_execroot("""
        import os, sys
        preloaded = "torch" in sys.modules
        import torch
        print(os.getppid(), id(sys.modules["torch"]), preloaded, torch.ones(3).sum().item())
    """)
    seconds: list[float] = []
    lines: list[str] = []
    with WorkerPool(sys.executable, max_instances=1, preload=("torch",)) as pool:
        for _ in range(2):
            start = time.monotonic()
            assert pool.run(root.request()) == WorkResponse(0)
            seconds.append(time.monotonic() - start)
            lines.append(root.out())
    first, second = lines
    assert first == second  # same worker, same torch module object
    assert first.split()[2:] == ["True", "3.0"]
    print(
        f"first action {seconds[0]:.3f} s (worker start + torch import), second {seconds[1]:.3f} s"
    )
