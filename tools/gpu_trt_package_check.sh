#!/usr/bin/env bash
# aoti_package on the GPU machine (issue 29): builds, weights-only rebuilds, manifests,
# load times and the C++ loaders of CPU, CUDA and TensorRT packages of the mlp.
# tools/gpu_trt_package_check.py does the work and says what each line checks.
#
#     OUT=/some/dir tools/gpu_trt_package_check.sh [build] [weights] [load] [cxx] [resnet]
#
# No step named: the first four, each skipped when the time left (DEADLINE_S, 480 s of the
# driver's) would not cover it; name the rest in a second call on the same warm machine
# (its workspace, $WS, and venv stay in /tmp). The machine has python3 with a CUDA torch
# (2.11), no network. What it needs:
#
#   .whl/*.whl   kiln's dependencies the image lacks (docs/remote-execution.md, "On the
#                GPU machine"): installed offline with --no-deps into a venv over the
#                image's torch, once per machine
#   /tmp/site    the TensorRT-RTX bundle (shared/tools/trt-rtx-bundle.sh), unpacked by an
#                earlier call; without it only the CPU and CUDA packages can pass
#
# A .pth file of the venv puts kiln's tools/ and /tmp/site on the path, so actions (which
# run with a fixed environment, no PYTHONPATH) see them. LD_PRELOAD of the system
# libstdc++ goes to the actions (--action_env) and the load checks where that file exists.
set -uo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
out=${OUT:-$PWD/gpu-trt-package-out}
mkdir -p "$out"
out=$(cd "$out" && pwd)
py=$(command -v "${PYTHON:-python3}")
site=${TRT_SITE:-/tmp/site}
venv=${KILN_GPU_TRT_VENV:-/tmp/kiln-gpu-trt-venv}
wheels=${WHEELS:-.whl}
preload=${KILN_GPU_CHECK_PRELOAD-/usr/lib/x86_64-linux-gnu/libstdc++.so.6}
cd "$repo" || exit 1

fail() {
  echo "FAIL  $1" | tee -a "$out/summary.txt"
  exit 1
}

{ nvidia-smi || true; "$py" -VV; command -v cmake nvcc g++ || true; } >"$out/env.log" 2>&1
start=$SECONDS
. "$repo/tools/gpu_venv.sh"
step=$(gpu_venv "$venv" "$py" "$wheels" "$site" "$repo" "$out/env.log" kiln-gpu-trt-check.pth) \
  || fail "$step: see $out/env.log"
"$venv/bin/python" -c 'import torch, kiln; print("torch", torch.__version__, torch.cuda.is_available())' \
  >>"$out/env.log" 2>&1 || fail "imports (torch, kiln): see $out/env.log"
if (cd / && env -i "$venv/bin/python" -c 'import torch_tensorrt' 2>/dev/null); then
  trt="Torch-TensorRT from $site"
else
  trt="no Torch-TensorRT (the TensorRT packages will fail: unpack the TensorRT-RTX bundle into $site first)"
fi
echo "INFO  venv ($((SECONDS - start)) s; $(tail -1 "$out/env.log"); $trt)" | tee -a "$out/summary.txt"

if [ -n "$preload" ] && [ -f "$preload" ]; then
  export KILN_ACTION_PRELOAD=$preload LD_PRELOAD=$preload
fi
# Keep NVLink multicast off in everything started here (the machine's rule).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1 DEADLINE_S=${DEADLINE_S:-480}
OUT=$out timeout 520 "$venv/bin/python" tools/gpu_trt_package_check.py "$@"
rc=$?
[ "$rc" -eq 124 ] && echo "FAIL  timed out after 520 s (logs in $out)" | tee -a "$out/summary.txt"
exit "$rc"
