"""Set up a machine as a kiln worker node: `ray start` with the labels its facts give.

    python -m kiln.remote_exec.ray_start --address=HEAD:6379 [--print] [-- RAY START ARGS]
    python -m kiln.remote_exec.ray_start --head [--print] [-- --port=6379 ...]

Run it on the node, in the environment its actions will run in (kiln[ray] and
the toolchain installed: torch, torch_tensorrt...). It finds what the node
offers (facts.this_node(): the interpreter's facts, the GPUs nvidia-smi lists,
the TensorRT probe) and starts Ray with `--num-gpus` and `--labels` saying
so, so that kiln routes matching actions there (routing.py). `--print` only
prints the command. Any further arguments go to `ray start` unchanged
(`--block`, `--num-cpus=8`, `--node-ip-address=...`). For a GPU node it reads:

    ray start --address=HEAD:6379 --num-gpus=1 --labels=kiln/arch=x86_64,\
kiln/compute_capability=9.0,kiln/gpu_name=NVIDIA_H200,kiln/os=linux,kiln/python=3.12.3,\
kiln/torch=2.13.0 ...
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import sys
from collections.abc import Sequence

from kiln.remote_exec.facts import this_node
from kiln.remote_exec.routing import node_labels


def ray_start_argv(address: str | None, extra: Sequence[str] = ()) -> list[str]:
    """`ray start` for this machine: a worker joining `address`, or a head (None)."""
    offer = this_node()
    labels = ",".join(f"{k}={v}" for k, v in sorted(node_labels(offer).items()))
    ray = shutil.which("ray", path=os.path.dirname(sys.executable)) or "ray"
    where = f"--address={address}" if address else "--head"
    return [ray, "start", where, f"--num-gpus={len(offer.gpus)}", f"--labels={labels}", *extra]


def main(args: Sequence[str] | None = None) -> int:  # noqa: RET503 (execv)
    parser = argparse.ArgumentParser(
        prog="python -m kiln.remote_exec.ray_start",
        description="Start Ray on this machine as a kiln worker node of the cluster at ADDRESS.",
    )
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--address", help="the head's GCS address, HOST:PORT")
    where.add_argument("--head", action="store_true", help="start the head, a worker too")
    parser.add_argument("--print", action="store_true", help="print the command, run nothing")
    parser.add_argument("ray_args", nargs="*", help="more `ray start` arguments (after --)")
    options = parser.parse_args(args)
    argv = ray_start_argv(options.address, options.ray_args)
    print(shlex.join(argv), flush=True)
    if options.print:
        return 0
    os.execv(argv[0], argv)  # never returns


if __name__ == "__main__":
    raise SystemExit(main())
