#!/usr/bin/env bash
# The Windows cross toolchain for aoti_package(target_platform = "windows_x86_64"):
#
#   tools/windows_toolchain.sh install
#       Debian's MinGW-w64 g++ (posix threads: torch's AOTInductor runtime uses
#       std::mutex, which GCC 12's win32 thread model lacks), its binutils (objdump,
#       dlltool) and wine64, where missing (apt-get, as root). Exits 1 saying why
#       where they cannot be installed.
#
#   tools/windows_toolchain.sh wheel [DIR]
#       PyPI's torch win_amd64 wheel that tools/windows/torch_win_amd64.lock pins
#       (exact version, sha256) into DIR (default .wheelhouse), checked against the
#       hash; nothing is fetched while DIR holds it. Offline builds then take it from
#       there: kiln build ... --pip_find_links=DIR (the flag of the @pip wheelhouse).
#
#   tools/windows_toolchain.sh check
#       Prints what is found; exit 1 if a part is missing.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/debian_packages.sh"

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
lock=$root/tools/windows/torch_win_amd64.lock
python=${KILN_PYTHON:-$root/.venv/bin/python}
packages=(g++-mingw-w64-x86-64-posix binutils-mingw-w64-x86-64 wine64)
# torch calls the unversioned x86_64-w64-mingw32-g++ (an alternative that names the posix
# flavour once only it is installed). Debian's wine64 puts its loader in /usr/lib/wine.
tools=(x86_64-w64-mingw32-g++ x86_64-w64-mingw32-objdump x86_64-w64-mingw32-dlltool wine64)

find_tool() {
    command -v "$1" || { [[ $1 == wine64 && -x /usr/lib/wine/wine64 ]] && echo /usr/lib/wine/wine64; }
}

missing() {
    local t
    for t in "${tools[@]}"; do
        find_tool "$t" >/dev/null || echo "$t"
    done
}

install() {
    if [[ -z $(missing) ]]; then
        return 0
    fi
    debian_install "$(missing | tr '\n' ' ' | sed 's/ $//')" "${packages[@]}" || return 1
    check
}

wheel() {
    local dir=${1:-${KILN_WHEELHOUSE:-$root/.wheelhouse}}
    local spec want name
    spec=$(grep -v '^#' "$lock" | grep -m1 .)
    want=${spec##*sha256:}
    name=torch-$(sed 's/^torch==\([^ ]*\).*/\1/' <<<"$spec")-cp311-cp311-win_amd64.whl
    if [[ -f $dir/$name ]] && [[ $(sha256sum "$dir/$name" | cut -c1-64) == "$want" ]]; then
        echo "$dir/$name"
        return 0
    fi
    mkdir -p "$dir"
    echo "kiln: downloading $name (122 MB) into $dir ..." >&2
    # --platform/--abi select the Windows wheel on this Linux machine; --require-hashes
    # refuses any wheel but the pinned one.
    "$python" -m pip download --quiet --disable-pip-version-check --no-deps \
        --only-binary=:all: --platform win_amd64 --python-version 3.11 \
        --implementation cp --abi cp311 --require-hashes -r "$lock" -d "$dir" \
        2> >(grep -v "^WARNING: Location" >&2)
    echo "$dir/$name"
}

check() {
    local t
    for t in "${tools[@]}"; do
        printf '%-28s %s\n' "$t" "$(find_tool "$t" || echo MISSING)"
    done
    [[ -z $(missing) ]]
}

case ${1:-} in
install) install ;;
wheel) wheel "${2:-}" ;;
check) check ;;
*)
    echo "usage: $0 install | wheel [DIR] | check" >&2
    exit 2
    ;;
esac
