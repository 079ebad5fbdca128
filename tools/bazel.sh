#!/usr/bin/env bash
# Bazel for kiln's tests and benchmarks: Debian's Bazel 4.2.3 (bazel-bootstrap), offline.
#
#   tools/bazel.sh install
#       Install Debian's bazel-bootstrap if `bazel` is missing (apt-get, as root;
#       `apt-get update` first when the package lists are stale). Prints the path of
#       the bazel binary; exits 1, saying why, where it cannot be installed.
#
# Bazel itself then needs no network for kiln's rules: the repository's WORKSPACE
# replaces what Bazel 4.2.3 would fetch (@rules_cc, @rules_java,
# @remote_coverage_tools) with the stubs in bazel/stubs (docs/bazel.md).
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/debian_packages.sh"

find_bazel() {
    command -v bazel || { [[ -x /usr/bin/bazel ]] && echo /usr/bin/bazel; }
}

install() {
    if find_bazel; then
        return 0
    fi
    debian_install bazel bazel-bootstrap || return 1
    find_bazel
}

case ${1:-} in
install) install ;;
*)
    echo "usage: $0 install" >&2
    exit 2
    ;;
esac
