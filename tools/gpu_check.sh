#!/usr/bin/env bash
# The trt_engine checks that need a GPU and Torch-TensorRT, for the GPU machine.
#
#     OUT=/some/dir tools/gpu_check.sh          (from anywhere; OUT defaults to ./gpu-check-out)
#     OUT=/some/dir tools/gpu_check.sh refit    (only the steps named, after env and site)
#
# Expects python3 (or $PYTHON) with a CUDA build of torch and kiln's dependencies, and
# Torch-TensorRT importable: e.g. the TensorRT-RTX bundle (shared/tools/trt-rtx-bundle.sh)
# unpacked into /tmp/site with PYTHONPATH=/tmp/site. No network is needed. Each step logs
# to $OUT/<step>.log; $OUT/summary.txt has one PASS / FAIL / SKIP line per step; the exit
# status is 1 if any step failed.
#
#   env         nvidia-smi, Python, the torch / TensorRT distributions
#   site        kiln runs actions with a fixed environment (no PYTHONPATH), so the entries
#               of PYTHONPATH (and kiln's tools/ if kiln is not installed) go into a .pth
#               file of the interpreter for the run; it is removed at exit
#   toolchains  kiln info toolchains
#   build       kiln build //models:mlp_trt: export, torch_tensorrt.dynamo.compile, the
#               .ep, the raw engine, its manifest and the generated loader
#   engine      the raw engine through the TensorRT Python runtime (the calls the C++
#               class makes) against eager, at the min/opt/max shapes
#   ep          the saved .ep through torch_tensorrt.load against eager
#   example     the generated load_mlp_trt.py
#   cxx         the generated C++ loader and runner, compiled with g++ where TensorRT
#               headers exist (TENSORRT_INCLUDE_DIR, or the usual places; the RTX wheels
#               ship none), run on the engine against eager, and on a batch past the range
#   pytest      tests/unit/trt (its real-header syntax test runs if TENSORRT_INCLUDE_DIR is set)
#   windows     kiln build //models:mlp_win must stop at preflight on TensorRT-RTX, which
#               cannot cross-compile for Windows
#   refit       the refit split (tools/gpu_check_refit.py), in a workspace of its own under
#               $OUT/refit-ws: build //models:mlp_trt (TorchExport, TrtCompile, TrtEngine run),
#               compare its .ep with eager, retrain the mlp (new weights file), build again
#               (TrtCompile must be cached, TrtEngine runs), compare again; refit.json says
#               whether the engines were refit (manifest.weights.refit) or, where this
#               Torch-TensorRT cannot refit, built with the weights, and why; summary.txt
#               gets a line "REFIT USED: ..." or "REFIT NOT AVAILABLE: ..." before the
#               step's verdict. Needs the same as build, plus safetensors
#   assign      GPU assignment (issue 26, tools/gpu_assign_check.py): in a workspace of its
#               own under $OUT/assign-ws, trt_engine, aoti_package(device = "cuda"), a CPU
#               aoti_package and two genrules; each GPU action must get the GPU's UUID
#               (build events, --explain), each CPU action none (CUDA_VISIBLE_DEVICES
#               empty); a rebuild after `kiln clean` with CUDA_VISIBLE_DEVICES=<UUID> set
#               is all hits. Lines of $OUT/assign-summary.txt; `tools/gpu_check.sh assign`
#               runs it alone (with env and site)
#
# Python that loads .pt2 packages segfaults on that image unless the system libstdc++ is
# preloaded (shared/notes/torch-facts.md): LD_PRELOAD is set to it when the file exists
# (KILN_GPU_CHECK_PRELOAD= turns that off).
set -uo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
out=${OUT:-$PWD/gpu-check-out}
mkdir -p "$out"
out=$(cd "$out" && pwd)
# Absolute: the site check runs it under env -i, where PATH would find another python3.
py=$(command -v "${PYTHON:-python3}")
target=//models:mlp_trt
name=mlp_trt
preload=${KILN_GPU_CHECK_PRELOAD-/usr/lib/x86_64-linux-gnu/libstdc++.so.6}
if [ -n "$preload" ] && [ -f "$preload" ]; then
  export LD_PRELOAD=$preload
fi
cd "$repo" || exit 1
: > "$out/summary.txt"
failed=0

# step NAME COMMAND...: run (in this shell: COMMAND may be a function), log, and record
# PASS / FAIL (exit 77 means SKIP). Commands that may hang carry their own `timeout`.
only=" $* "
step() {
  local step_name=$1
  shift
  if [ "$only" != "  " ] && [[ "$only" != *" $step_name "* ]] && [ "$step_name" != env ] \
    && [ "$step_name" != site ]; then
    return 0
  fi
  local start=$SECONDS
  echo "== $step_name: $*" | tee "$out/$step_name.log"
  "$@" >>"$out/$step_name.log" 2>&1
  local rc=$?
  local verdict=PASS
  if [ "$rc" -eq 77 ]; then
    verdict=SKIP
  elif [ "$rc" -ne 0 ]; then
    verdict=FAIL
    failed=1
  fi
  printf '%-5s %-11s exit %3d  %4d s\n' "$verdict" "$step_name" "$rc" $((SECONDS - start)) \
    | tee -a "$out/summary.txt"
  return 0
}

kiln() { timeout 540 "$py" -m kiln "$@"; }

env_facts() {
  nvidia-smi || true
  "$py" -VV
  echo "PYTHONPATH=${PYTHONPATH:-} LD_PRELOAD=${LD_PRELOAD:-}"
  "$py" -m pip list 2>/dev/null | grep -iE '^(torch|tensorrt|nvidia|pydantic|starlark|jinja2|numpy)' || true
  g++ --version | head -1 || true
}

# Actions get PATH, LANG and a few PYTHON* settings only: what PYTHONPATH adds must come
# from a .pth file of the interpreter for `python -m kiln.actions...` to see it.
pth=""
make_site() {
  local entries=() parts=() p purelib
  IFS=: read -ra parts <<<"${PYTHONPATH:-}"
  for p in "${parts[@]}"; do
    [ -n "$p" ] && entries+=("$(cd "$p" && pwd)")
  done
  if ! (cd / && env -u PYTHONPATH "$py" -c 'import kiln' 2>/dev/null); then
    entries+=("$repo/tools")
  fi
  if [ ${#entries[@]} -eq 0 ]; then
    echo "nothing to add: PYTHONPATH is empty and the interpreter imports kiln without it"
  else
    purelib=$("$py" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
    if ! [ -w "$purelib" ]; then
      purelib=$("$py" -m site --user-site)
      mkdir -p "$purelib"
    fi
    pth="$purelib/zz-kiln-gpu-check.pth"
    printf '%s\n' "${entries[@]}" >"$pth"
    echo "wrote $pth:"
    cat "$pth"
  fi
  # What an action's interpreter sees:
  (cd / && env -i PATH=/usr/local/bin:/usr/bin:/bin LANG=C.UTF-8 "$py" -c '
import kiln, torch, torch_tensorrt, tensorrt
print("kiln", kiln.__file__)
print("torch", torch.__version__, "cuda", torch.version.cuda, torch.cuda.is_available())
print("torch_tensorrt", torch_tensorrt.__version__, "tensorrt", tensorrt.__version__)
print("features", torch_tensorrt.ENABLED_FEATURES)
')
}
cleanup() { [ -n "$pth" ] && rm -f "$pth"; }
trap cleanup EXIT

build_trt() {
  kiln build --verbose_failures "$target" || return 1
  local folder=kiln-out/models
  mkdir -p "$out/artifacts"
  cp -r "$folder/$name.manifest.json" "$folder/$name.trt.json" "$folder/${name}_loader" \
    "$folder/$name.engines" "$out/artifacts/" 2>/dev/null
  ls -la "$folder/$name.ep" "$folder/$name.engines"
  cat "$folder/$name.manifest.json"
}

find_header_dir() {  # $1: header name; prints the first folder holding it
  local d
  for d in "${TENSORRT_INCLUDE_DIR:-}" /usr/include/x86_64-linux-gnu /usr/include \
    /usr/local/tensorrt/include /usr/local/TensorRT*/include /opt/tensorrt*/include \
    /opt/TensorRT*/include; do
    if [ -n "$d" ] && [ -f "$d/$1" ]; then
      echo "$d"
      return 0
    fi
  done
  return 1
}

cxx() {
  local loader=kiln-out/models/${name}_loader inc cuda_inc trt_lib cudart
  inc=$(find_header_dir NvInferRuntime.h) || {
    echo "SKIP: no TensorRT headers (NvInferRuntime.h): neither the TensorRT nor the" \
      "TensorRT-RTX wheels ship them; set TENSORRT_INCLUDE_DIR to compile the loader here."
    echo "The engine step ran the same runtime calls through the TensorRT Python API."
    return 77
  }
  read -r cuda_inc cudart trt_lib < <("$py" - <<'EOF'
import glob, os, sys
roots = [p for p in sys.path if p and os.path.isdir(p)]
def first(patterns):
    for pattern in patterns:
        found = sorted(glob.glob(pattern))
        if found:
            return found[0]
    return "-"
inc = os.environ.get("CUDA_INCLUDE_DIR", "")
if not (inc and os.path.isfile(os.path.join(inc, "cuda_runtime_api.h"))):
    header = first(["/usr/local/cuda/include/cuda_runtime_api.h"]
                   + [f"{r}/nvidia/*/include/cuda_runtime_api.h" for r in roots])
    inc = os.path.dirname(header) if header != "-" else "-"
cudart = first(["/usr/local/cuda/lib64/libcudart.so"]
               + [f"{r}/nvidia/*/lib/libcudart.so*" for r in roots])
trt = first([f"{r}/tensorrt_rtx_libs/libtensorrt_rtx.so*" for r in roots]
            + [f"{r}/tensorrt_libs/libnvinfer.so*" for r in roots]
            + ["/usr/lib/x86_64-linux-gnu/libnvinfer.so*"])
print(inc, cudart, trt)
EOF
)
  echo "TensorRT headers $inc, library $trt_lib; CUDA headers $cuda_inc, runtime $cudart"
  if [ "$cuda_inc" = - ] || [ "$cudart" = - ] || [ "$trt_lib" = - ]; then
    echo "FAIL: missing CUDA headers, libcudart or the TensorRT library"
    return 1
  fi
  g++ -std=c++17 -O2 -Wall -Wextra -Wno-deprecated-declarations \
    -I"$loader" -isystem "$inc" -isystem "$cuda_inc" \
    "$loader/${name}_trt.cpp" "$loader/${name}_trt_run.cpp" -o "$out/${name}_trt_run" \
    "$trt_lib" "$cudart" \
    -Wl,-rpath,"$(dirname "$trt_lib")" -Wl,-rpath,"$(dirname "$cudart")" || return 1
  local work=$out/cxx which args=() rc engine
  engine=kiln-out/models/$name.engines/$name.engine
  timeout 300 "$py" tools/gpu_check_trt.py inputs "$target" "$work" || return 1
  for which in min opt max; do
    mapfile -t args <"$work/runner_args_$which.txt"
    timeout 120 "$out/${name}_trt_run" "$engine" "$work/${which}_out_" "${args[@]}" || return 1
  done
  timeout 120 "$py" tools/gpu_check_trt.py compare "$target" "$work" || return 1
  mapfile -t args <"$work/runner_args_bad.txt"
  timeout 120 "$out/${name}_trt_run" "$engine" "$work/bad_out_" "${args[@]}"
  rc=$?
  echo "a batch past the range: exit $rc (expected 2, with the message above)"
  [ "$rc" -eq 2 ]
}

run_pytest() {
  if ! "$py" -c 'import pytest' 2>/dev/null; then
    echo "SKIP: pytest is not installed"
    return 77
  fi
  timeout 300 "$py" -m pytest -q -p no:cacheprovider -rs tests/unit/trt
}

windows_preflight() {
  local rc
  kiln build "//models:mlp_win" >"$out/windows.stdout" 2>"$out/windows.stderr"
  rc=$?
  cat "$out/windows.stdout" "$out/windows.stderr"
  echo "exit $rc (expected 1: the TensorRT-RTX flavour cannot cross-compile for Windows)"
  [ "$rc" -eq 1 ] && grep -q "windows_cross_compile is False" "$out/windows.stderr" \
    && ! grep -q Traceback "$out/windows.stderr"
}

refit_split() {
  local ws=$out/refit-ws helper=$repo/tools/gpu_check_refit.py
  rm -rf "$ws" "$ws.cache"
  timeout 60 "$py" "$helper" workspace "$ws" || return 1
  # A disk cache of its own: the build step's entries (same model, same weights, and keys
  # that do not depend on the workspace's path) would otherwise answer the first build.
  (cd "$ws" && kiln build --verbose_failures //models:mlp_trt --disk_cache="$ws.cache" \
    --build_event_json_file="$out/refit-first.events.json") || return 1
  timeout 120 "$py" "$helper" events "$ws" "$out/refit-first.events.json" FIRST || return 1
  timeout 300 "$py" "$helper" check "$ws" "$out/refit-first.json" || return 1
  timeout 120 "$py" "$helper" retrain "$ws" 7 || return 1
  (cd "$ws" && kiln build --verbose_failures --explain //models:mlp_trt --disk_cache="$ws.cache" \
    --build_event_json_file="$out/refit-second.events.json") || return 1
  timeout 120 "$py" "$helper" events "$ws" "$out/refit-second.events.json" SECOND || return 1
  timeout 300 "$py" "$helper" check "$ws" "$out/refit.json" || return 1
  cp "$ws/kiln-out/models/mlp_trt.manifest.json" "$out/refit-manifest.json"
  timeout 120 "$py" "$helper" verdict "$ws" | tee -a "$out/summary.txt"
}

step env env_facts
step site make_site
step toolchains kiln info toolchains
step build build_trt
step engine timeout 300 "$py" tools/gpu_check_trt.py engine "$target" "$out"
step ep timeout 300 "$py" tools/gpu_check_trt.py ep "$target" "$out"
step example timeout 300 "$py" "kiln-out/models/${name}_loader/load_$name.py"
step cxx cxx
step pytest run_pytest
step windows windows_preflight
step refit refit_split
step assign timeout 560 "$py" tools/gpu_assign_check.py "$out"
echo "---"
cat "$out/summary.txt"
exit $failed
