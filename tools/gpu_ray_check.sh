#!/usr/bin/env bash
# Remote execution on the GPU machine (issue 15, deliverable 8): a Ray head and a GPU
# worker node on 127.0.0.1, a driver with --gpus=0 building //models:mlp_trt and a CUDA
# aoti_package remotely, compared with a local GPU build. tools/gpu_ray_check.py does
# the builds and says what each PASS / FAIL line checks.
#
#     OUT=/some/dir tools/gpu_ray_check.sh        (from anywhere; about 4 to 8 minutes)
#
# The machine has python3 with a CUDA torch, no Ray and no network. What it needs comes
# as wheels (docs/remote-execution.md, "On the GPU machine", has the device calls):
#
#   .whl/*.whl          kiln's dependencies the image lacks (pydantic, pydantic_core,
#                       annotated-types, typing-inspection, starlark-pyo3, blake3,
#                       buildgrid-common, google-re2, protobuf) and Ray's (jsonschema,
#                       jsonschema-specifications, referencing, rpds-py); click, grpcio,
#                       msgpack, pyyaml, requests, filelock, packaging, attrs are the image's
#   Ray's cp312 wheel   79 MB, more than one call carries: in two parts
#                       (.device/ray/ray-2.60.0-*.whl.part-00 and -01, `split -b 40M -d`);
#                       part-00 is copied to $RAY_PARTS (/tmp/kiln-ray-parts) by the call
#                       before, part-01 travels with this one; joined here and checked
#                       against RAY_WHEEL_SHA256
#   Torch-TensorRT      the TensorRT-RTX bundle unpacked into /tmp/site by an earlier call
#                       (shared/tools/trt-rtx-bundle.sh); without it only mlp_cuda can pass
#
# Everything goes into a virtualenv that sees the image's torch (--system-site-packages),
# installed offline with --no-deps (each missing need is one of the wheels above); a .pth
# file of that venv puts kiln's tools/ and /tmp/site on the path, so actions (which run
# with a fixed environment, no PYTHONPATH) and Ray's workers see them too. LD_PRELOAD of
# the system libstdc++ is passed to the actions (--action_env) where that file exists
# (the image needs it to load a .pt2 in Python). The cluster is stopped by PID, never
# with `ray stop`.
set -uo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
out=${OUT:-$PWD/gpu-ray-check-out}
mkdir -p "$out"
out=$(cd "$out" && pwd)
py=$(command -v "${PYTHON:-python3}")
parts=${RAY_PARTS:-/tmp/kiln-ray-parts}
site=${TRT_SITE:-/tmp/site}
venv=${KILN_GPU_RAY_VENV:-/tmp/kiln-gpu-ray-venv}
wheel=${RAY_WHEEL:-ray-2.60.0-cp312-cp312-manylinux2014_x86_64.whl}
wheels=${WHEELS:-.whl}  # the small wheels
want_sha=${RAY_WHEEL_SHA256:-b951b40965947a63615830916be04f26440d234de1e9a29dbf2155d03fa9ad2a}
preload=${KILN_GPU_CHECK_PRELOAD-/usr/lib/x86_64-linux-gnu/libstdc++.so.6}
cd "$repo" || exit 1
: >"$out/summary.txt"

fail() {
  echo "FAIL  $1" | tee -a "$out/summary.txt"
  exit 1
}

{ nvidia-smi || true; "$py" -VV; } >"$out/env.log" 2>&1

# -- Ray's wheel, from its two parts
mkdir -p "$parts"
cp .device/ray/"$wheel".part-* "$parts"/ 2>/dev/null
if ! [ -f "$parts/$wheel.part-00" ] || ! [ -f "$parts/$wheel.part-01" ]; then
  fail "ray wheel: want $parts/$wheel.part-00 (from the call before) and .device/ray/$wheel.part-01; have: $(ls "$parts" .device/ray 2>&1 | tr '\n' ' ')"
fi
cat "$parts/$wheel".part-0[0-9] >"$parts/$wheel"
got_sha=$(sha256sum "$parts/$wheel" | cut -c1-64)
[ "$got_sha" = "$want_sha" ] || fail "ray wheel: sha256 $got_sha, want $want_sha (parts from different downloads?)"
echo "PASS  ray wheel joined ($(du -m "$parts/$wheel" | cut -f1) MB, sha256 ok)" | tee -a "$out/summary.txt"

# -- the venv: the image's torch, the carried wheels
start=$SECONDS
rm -rf "$venv"
# The image's python3 is itself a venv's (/opt/torch/.venv): --system-site-packages
# reaches only its base interpreter's packages, so its own site-packages (torch) go
# into a .pth file too, after ours (the carried wheels win).
image_site=$("$py" -c 'import sysconfig; p = sysconfig.get_paths(); print(p["purelib"]); print(p["platlib"])' | sort -u)
{ "$py" -m venv --system-site-packages "$venv" || "$py" -m venv --system-site-packages --without-pip "$venv"; } \
  >"$out/install.log" 2>&1 || fail "venv: see $out/install.log"
pip=("$venv/bin/python" -m pip)
"${pip[@]}" --version >>"$out/install.log" 2>&1 || pip=("$py" -m pip --python "$venv/bin/python")
"${pip[@]}" install -q --no-index --no-deps --no-compile --disable-pip-version-check \
  "$wheels"/*.whl "$parts/$wheel" >>"$out/install.log" 2>&1 || fail "install: see $out/install.log"
purelib=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
{
  echo "$repo/tools"
  [ -d "$site" ] && echo "$site"
  echo "$image_site"
} >"$purelib/kiln-gpu-ray-check.pth"
"${pip[@]}" check >>"$out/install.log" 2>&1 # informative only: installed with --no-deps
"$venv/bin/python" -c 'import ray, grpc, torch, kiln; print("ray", ray.__version__, "torch", torch.__version__)' \
  >>"$out/env.log" 2>&1 || fail "imports (ray, grpc, torch, kiln): see $out/env.log"
if (cd / && env -i "$venv/bin/python" -c 'import torch_tensorrt' 2>/dev/null); then
  trt="Torch-TensorRT from $site"
else
  trt="no Torch-TensorRT (mlp_trt will fail: unpack the TensorRT-RTX bundle into $site first)"
fi
echo "PASS  venv ($((SECONDS - start)) s; $(tail -1 "$out/env.log"); $trt)" | tee -a "$out/summary.txt"

if [ -n "$preload" ] && [ -f "$preload" ]; then
  export KILN_ACTION_PRELOAD=$preload
fi
# Keep NVLink multicast off in everything started here (the machine's rule).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1
OUT=$out timeout 500 "$venv/bin/python" tools/gpu_ray_check.py
rc=$?
[ "$rc" -eq 124 ] && echo "FAIL  timed out after 500 s (logs in $out)" | tee -a "$out/summary.txt"
exit "$rc"
