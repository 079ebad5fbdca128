#!/usr/bin/env bash
# Creates or refreshes the project's virtualenv (.venv) so that `./kiln` and
# `tools/test` work on a fresh machine with nothing but python3 and pip.
# The venv is rebuilt only when pyproject.toml changes (a stamp file holds its
# digest), so the check costs a few milliseconds on every call.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
venv="$root/.venv"
stamp="$venv/.kiln-bootstrap"
want=$(sha256sum "$root/pyproject.toml" "$root/tools/bootstrap.sh" | sha256sum | cut -c1-64)

# binutils' objdump: AotiCompile disassembles a CPU package's code to check it keeps
# to its cpu_target (kiln.actions.isa_compile). Debian's binutils, installed as root.
if ! command -v objdump >/dev/null; then
    . "$root/tools/debian_packages.sh"
    debian_install "kiln: objdump" binutils || true # the check then says so where it runs
fi

if [[ -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
    exit 0
fi

python=${KILN_PYTHON:-python3}
echo "kiln: setting up $venv (first use; torch makes this take a minute) ..." >&2
if [[ ! -x "$venv/bin/python" ]]; then
    "$python" -m venv "$venv"
fi
pip=("$venv/bin/python" -m pip --quiet --disable-pip-version-check)
# torch==2.13.0 first and on its own: on this workplace's machines pip takes
# its CPU build from local disk; resolved together with other packages it can
# be tempted towards a multi-GB CUDA download. The ray extra is what
# --remote_executor and its tests need (about 10 s, 240 MB).
"${pip[@]}" install "torch==2.13.0" 2> >(grep -v "^WARNING: Location" >&2)
"${pip[@]}" install -e "$root[torch,dev,ray]" 2> >(grep -v "^WARNING: Location" >&2)
echo "$want" > "$stamp"
echo "kiln: environment ready" >&2
