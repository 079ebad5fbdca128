#!/usr/bin/env bash
# Fills a wheelhouse with the wheels a lock pins, checked against its hashes, once:
#
#     tools/wheelhouse.sh [LOCK] [DIR]     (default: examples/libraries/requirements_lock.txt, .wheelhouse)
#
# then builds can make their Python environments offline:
#
#     kiln build //models/... --pip_find_links=DIR
#
# A stamp in DIR holds the lock's digest: while the lock is unchanged this costs a
# sha256sum. The wheels come from pip's index (as configured for this machine).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
lock=${1:-$root/examples/libraries/requirements_lock.txt}
dir=${2:-${KILN_WHEELHOUSE:-$root/.wheelhouse}}
python=${KILN_PYTHON:-$root/.venv/bin/python}
stamp="$dir/.lock-sha256"
want=$(sha256sum "$lock" | cut -c1-64)

if [[ -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
    exit 0
fi
mkdir -p "$dir"
echo "kiln: downloading the wheels of $lock into $dir ..." >&2
# --no-deps: the lock is the whole closure (torch comes from kiln's toolchain, never
# from here); --require-hashes: a wheel that is not the one the lock pins is refused.
"$python" -m pip download --quiet --disable-pip-version-check --no-deps \
    --only-binary=:all: --require-hashes -r "$lock" -d "$dir" \
    2> >(grep -v "^WARNING: Location" >&2)
echo "$want" > "$stamp"
