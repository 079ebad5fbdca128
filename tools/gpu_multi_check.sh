#!/usr/bin/env bash
# GPU assignment on a host of several GPUs (issue 27): builds of GPU targets at --gpus=1
# and --gpus=N, alternating, each from an empty disk cache; which GPU each action held
# (build events, nvidia-smi sampled every 0.2 s), no GPU shared by two running actions,
# every GPU used, the same keys, .pt2 bytes and engine outputs, and the speed-up of the
# GPU part (goal: 0.7 x N). tools/gpu_multi_check.py does the work and says what each
# PASS / FAIL / INFO line checks.
#
#     OUT=/some/dir tools/gpu_multi_check.sh      (again on the same warm machine: it goes on)
#
# The device calls (docs/gpu.md, "Issue 27"; a kind of two GPUs or more: nvidia-h100-x2,
# -x4, -x8 or nvidia-h200-x2, ...), back to back on one warm machine:
#
#   1. kind: "nvidia-h100-x2", carry: [".device/trt"], command:
#        mkdir -p /tmp/site && tar -C /tmp/site -xJf .device/trt/trt-rtx-site.tar.xz && ls /tmp/site | head
#      (the TensorRT-RTX bundle, shared/tools/trt-rtx-bundle.sh .device/trt; as in
#      docs/remote-execution.md, "On the GPU machine")
#   2. kind: "nvidia-h100-x2", carry: [".whl"], timeout_s: 600, command:
#        tools/gpu_multi_check.sh
#      as many times as it takes: each call runs the builds that fit in DEADLINE_S (520 s;
#      a build starts only when 1.15 x the longest so far fits), then reports on every
#      build so far (the engine comparison waits for a call with 150 s left); its last line
#      says "every check passed" or how many failed, and what is still to run, if any.
#      MULTI_SET=mlp (four small mlp targets) gives a quick first pass; ROUNDS=2 fewer builds;
#      MULTI_SET=mlp_cuda (its two CUDA packages) needs no call 1.
#
# The machine has python3 with a CUDA torch (2.11, Python 3.12), no network. What it needs:
#
#   .whl/*.whl   kiln's dependencies the image lacks (docs/remote-execution.md, "On the
#                GPU machine"): installed offline with --no-deps into a venv over the
#                image's torch, once per machine
#   /tmp/site    the TensorRT-RTX bundle, unpacked by call 1; without it the trt_engine
#                targets fail (the aoti_package ones can still pass)
#
# A .pth file of the venv puts kiln's tools/ and /tmp/site on the path, so actions (which
# run with a fixed environment, no PYTHONPATH) see them. LD_PRELOAD of the system libstdc++
# goes to the actions (--action_env) and the engine comparison where that file exists.
# Builds live in $STATE (/tmp/kiln-gpu-multi) between calls; everything the script starts
# (kiln, the nvidia-smi sampler, the engine comparison) is its child, waited for or
# stopped by its PID (kiln stops its own actions and workers).
set -uo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
out=${OUT:-$PWD/gpu-multi-check-out}
mkdir -p "$out"
out=$(cd "$out" && pwd)
py=$(command -v "${PYTHON:-python3}")
site=${TRT_SITE:-/tmp/site}
venv=${KILN_GPU_MULTI_VENV:-/tmp/kiln-gpu-multi-venv}
wheels=${WHEELS:-.whl}
preload=${KILN_GPU_CHECK_PRELOAD-/usr/lib/x86_64-linux-gnu/libstdc++.so.6}
cd "$repo" || exit 1
: >"$out/summary.txt"

fail() {
  echo "FAIL  $1" | tee -a "$out/summary.txt"
  exit 1
}

{ nvidia-smi || true; nvidia-smi -L || true; nvidia-smi topo -m || true; "$py" -VV; nproc; } \
  >"$out/env.log" 2>&1
start=$SECONDS
if [ -n "${KILN_GPU_MULTI_NO_VENV:-}" ]; then
  venv=""  # the tests' smoke run: $py is kiln's own interpreter already
else
  . "$repo/tools/gpu_venv.sh"
  step=$(gpu_venv "$venv" "$py" "$wheels" "$site" "$repo" "$out/env.log" kiln-gpu-multi-check.pth) \
    || fail "$step: see $out/env.log"
fi
python=${venv:+$venv/bin/python}
python=${python:-$py}
if [ -z "${KILN_GPU_MULTI_NO_VENV:-}" ]; then
  "$python" -c 'import torch, kiln; print("torch", torch.__version__, torch.cuda.is_available(), torch.cuda.device_count())' \
    >>"$out/env.log" 2>&1 || fail "imports (torch, kiln): see $out/env.log"
  if (cd / && env -i "$python" -c 'import torch_tensorrt' 2>/dev/null); then
    trt="Torch-TensorRT from $site"
  else
    trt="no Torch-TensorRT (the trt_engine targets will fail: unpack the TensorRT-RTX bundle into $site first)"
  fi
  echo "INFO  venv ($((SECONDS - start)) s; $(tail -1 "$out/env.log"); $trt)" | tee -a "$out/summary.txt"
fi

if [ -n "$preload" ] && [ -f "$preload" ]; then
  export KILN_ACTION_PRELOAD=$preload LD_PRELOAD=$preload
fi
# Keep NVLink multicast off in everything started here (the machine's rule).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1 DEADLINE_S=${DEADLINE_S:-520}
OUT=$out timeout 580 "$python" tools/gpu_multi_check.py &
child=$!
trap 'kill -TERM "$child" 2>/dev/null' INT TERM
wait "$child"
rc=$?
trap - INT TERM
[ "$rc" -eq 124 ] && echo "FAIL  stopped: timed out after 580 s, or a signal (logs in $out; builds in \$STATE)" | tee -a "$out/summary.txt"
exit "$rc"
