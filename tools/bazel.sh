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

find_bazel() {
    command -v bazel || { [[ -x /usr/bin/bazel ]] && echo /usr/bin/bazel; }
}

install() {
    if find_bazel; then
        return 0
    fi
    if [[ $(id -u) != 0 ]]; then
        echo "bazel is not installed; run this as root, or: sudo apt-get install bazel-bootstrap" >&2
        return 1
    fi
    if ! command -v apt-get >/dev/null; then
        echo "bazel is not installed and this is no Debian system (no apt-get)" >&2
        return 1
    fi
    export DEBIAN_FRONTEND=noninteractive
    local apt=(apt-get install -y -qq --no-install-recommends bazel-bootstrap)
    if ! "${apt[@]}" >/dev/null 2>&1; then
        apt-get update -qq
        "${apt[@]}" >/dev/null
    fi
    find_bazel
}

case ${1:-} in
install) install ;;
*)
    echo "usage: $0 install" >&2
    exit 2
    ;;
esac
