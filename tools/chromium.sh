#!/usr/bin/env bash
# Headless Chromium for tests/e2e/test_build_report.py (the --report HTML opened in a
# real browser):
#
#   tools/chromium.sh install
#       Debian's chromium where missing (apt-get, as root); prints the binary's path.
#       Exits 1 saying why where it cannot be installed.
#
#   tools/chromium.sh check
#       Prints the binary's path; exit 1 if there is none.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/debian_packages.sh"

package=chromium

find_chromium() {
    local name
    for name in chromium chromium-browser; do
        command -v "$name" && return 0
    done
    [[ -x /usr/lib/chromium/chromium ]] && echo /usr/lib/chromium/chromium && return 0
    return 1
}

install() {
    if find_chromium; then
        return 0
    fi
    debian_install chromium "$package" || return 1
    check
}

check() {
    find_chromium || {
        echo "chromium: MISSING" >&2
        return 1
    }
}

case ${1:-} in
install) install ;;
check) check ;;
*)
    echo "usage: $0 install | check" >&2
    exit 2
    ;;
esac
