# Sourced by the scripts that install a Debian package the tests need (bazel.sh,
# nginx_cache.sh, buildgrid.sh, chromium.sh, windows_toolchain.sh, bootstrap.sh).
#
#     debian_install [--no-services] WHAT PACKAGE...
#
# Installs PACKAGE... with apt-get, as root; WHAT names the missing thing in the one-line
# error where it cannot (not root, no apt-get). --no-services: the packages' maintainer
# scripts may not start a service (nginx on port 80, postgresql's cluster on 5432).
#
# Two test suites started at once on a fresh machine install the same packages at once;
# apt-get takes dpkg's lock without waiting, so the second failed ("Could not get lock
# /var/lib/dpkg/lock-frontend") and its suite with it. So kiln's installs queue behind one
# another on a lock of their own (the second then finds the package installed and does
# nothing), and apt-get waits for anyone else's dpkg lock (DPkg::Lock::Timeout). The queue
# also keeps one install's policy-rc.d from being removed under another's.
#
# KILN_APT_GET (a command), KILN_DEBIAN_LOCK and KILN_POLICY_RC_D (files) replace apt-get,
# the lock and /usr/sbin/policy-rc.d in tests.

debian_install() {
    local services=1
    if [[ ${1:-} == --no-services ]]; then
        services=0
        shift
    fi
    local what=$1
    shift
    local apt_get=${KILN_APT_GET:-apt-get}
    if [[ $(id -u) != 0 ]]; then
        echo "$what is missing: run this as root, or: sudo apt-get install $*" >&2
        return 1
    fi
    if ! command -v "$apt_get" >/dev/null; then
        echo "$what is missing, and this is no Debian system (no apt-get): install $*" >&2
        return 1
    fi
    (
        lock=${KILN_DEBIAN_LOCK:-/var/lock/kiln-debian-install.lock}
        exec 9>"$lock"
        if ! flock -w 1800 9; then
            echo "$what: waited 30 min for another kiln install to end (lock $lock)" >&2
            exit 1
        fi
        # invoke-rc.d asks policy-rc.d before it starts a service; 101: "not allowed".
        # One the machine has already is its owner's policy, and stays.
        policy=${KILN_POLICY_RC_D:-/usr/sbin/policy-rc.d}
        if [[ $services == 0 && ! -e $policy ]]; then
            printf '#!/bin/sh\nexit 101\n' >"$policy"
            chmod 755 "$policy"
            trap 'rm -f "$policy"' EXIT
        fi
        export DEBIAN_FRONTEND=noninteractive
        wait_lock=(-o DPkg::Lock::Timeout=900)
        install=("$apt_get" "${wait_lock[@]}" install -y -qq --no-install-recommends "$@")
        if ! "${install[@]}" >/dev/null 2>&1; then
            "$apt_get" "${wait_lock[@]}" update -qq >&2 && "${install[@]}" >/dev/null
        fi
    )
}
