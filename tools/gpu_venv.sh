# Sourced by the GPU checks (tools/gpu_trt_package_check.sh, tools/gpu_multi_check.sh):
# the virtualenv they run kiln in on the GPU machine (torch 2.11 for Python 3.12 in the
# image, no network).
#
#   gpu_venv VENV PYTHON WHEELS SITE REPO LOG PTH_NAME
#
# Makes VENV (once: kept while `import kiln, pydantic, starlark` works there) over
# PYTHON's torch, installs WHEELS/*.whl offline without dependencies (kiln's
# dependencies the image lacks), and writes a .pth that puts REPO/tools, SITE (the
# TensorRT-RTX bundle, when unpacked) and the image's own site-packages on its path:
# the image's python3 is itself a venv's, so --system-site-packages reaches only its
# base interpreter's packages. Output goes to LOG; on failure it prints the step that
# failed ("venv" or "install of WHEELS") and returns 1.
gpu_venv() {
  local venv=$1 py=$2 wheels=$3 site=$4 repo=$5 log=$6 pth=$7
  if [ -x "$venv/bin/python" ] && "$venv/bin/python" -c 'import kiln, pydantic, starlark' 2>/dev/null; then
    return 0
  fi
  rm -rf "$venv"
  local image_site purelib
  image_site=$("$py" -c 'import sysconfig; p = sysconfig.get_paths(); print(p["purelib"]); print(p["platlib"])' | sort -u)
  { "$py" -m venv --system-site-packages "$venv" || "$py" -m venv --system-site-packages --without-pip "$venv"; } \
    >>"$log" 2>&1 || { echo "venv"; return 1; }
  local pip=("$venv/bin/python" -m pip)
  "${pip[@]}" --version >>"$log" 2>&1 || pip=("$py" -m pip --python "$venv/bin/python")
  "${pip[@]}" install -q --no-index --no-deps --no-compile --disable-pip-version-check \
    "$wheels"/*.whl >>"$log" 2>&1 || { echo "install of $wheels"; return 1; }
  purelib=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  {
    echo "$repo/tools"
    [ -d "$site" ] && echo "$site"
    echo "$image_site"
  } >"$purelib/$pth"
}
