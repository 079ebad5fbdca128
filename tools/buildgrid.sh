#!/usr/bin/env bash
# BuildGrid (a Remote Execution API server) and a private PostgreSQL, for kiln's tests
# and benchmarks. Every server runs in the foreground of the process the caller
# started (exec), so the caller stops it by that PID; nothing is left as a daemon.
#
#   tools/buildgrid.sh venv
#       Make (once) a Python 3.13 venv with buildgrid==0.9.1 from the image's pyenv
#       (BuildGrid 0.9 needs Python >= 3.13) and print its folder. Cached under
#       ${KILN_TOOLS_CACHE:-~/.cache/kiln-tools}/buildgrid-0.9.1, beside the other
#       tools' downloads; marked complete only once pip succeeded, so a half-made venv
#       is made again. About 15 s the first time, nothing after.
#   tools/buildgrid.sh postgres-install
#       Install Debian's postgresql if its initdb is missing (apt-get, as root).
#       Prints the folder of initdb and pg_ctl.
#   tools/buildgrid.sh postgres DIR PORT
#       Initialise a cluster in DIR/pgdata (first time) and run the postgres server
#       in the foreground on 127.0.0.1:PORT, its socket beside it (never the system's).
#       As root it runs as the `postgres` user (postgres refuses root) and DIR/pgdata
#       is a link to a folder under /tmp that user can reach: remove it after.
#   tools/buildgrid.sh migrate DIR PORT
#       Create role and database `buildgrid` and apply BuildGrid's schema.
#   tools/buildgrid.sh serve DIR PORT PGPORT [KEEPALIVE_S]
#       Write DIR/buildgrid.yml and run `bgd server start` in the foreground on
#       127.0.0.1:PORT: CAS, ByteStream, action cache, execution and bots of the
#       instance "" (KEEPALIVE_S: bot-session-keepalive-timeout, default 20).
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/debian_packages.sh"

BUILDGRID_VERSION=0.9.1
PYTHON_VERSION=3.13.0
cache=${KILN_TOOLS_CACHE:-$HOME/.cache/kiln-tools}
venv_dir=$cache/buildgrid-$BUILDGRID_VERSION

venv() {
    if [[ -f $venv_dir/.complete ]]; then
        echo "$venv_dir"
        return 0
    fi
    local python
    python=$(pyenv prefix "$PYTHON_VERSION" 2>/dev/null)/bin/python3 || true
    if [[ ! -x $python ]]; then
        python=$(command -v python3.13 || true)
    fi
    if [[ -z $python || ! -x $python ]]; then
        echo "no Python 3.13 (BuildGrid $BUILDGRID_VERSION needs it): pyenv install $PYTHON_VERSION" >&2
        return 1
    fi
    mkdir -p "$cache"
    # One maker at a time; a venv without .complete was left half-made: made again.
    exec 9>"$cache/buildgrid.lock"
    flock 9
    if [[ ! -f $venv_dir/.complete ]]; then
        rm -rf "$venv_dir"
        "$python" -m venv "$venv_dir" >&2
        if ! "$venv_dir/bin/pip" install -q "buildgrid==$BUILDGRID_VERSION" >"$cache/buildgrid-pip.log" 2>&1; then
            grep -v "is ignored" "$cache/buildgrid-pip.log" | tail -20 >&2
            return 1
        fi
        touch "$venv_dir/.complete"
    fi
    exec 9>&-
    echo "$venv_dir"
}

pg_bindir() {
    local d
    for d in /usr/lib/postgresql/*/bin; do
        [[ -x $d/initdb && -x $d/pg_ctl ]] && { echo "$d"; return 0; }
    done
    return 1
}

postgres_install() {
    if pg_bindir; then
        return 0
    fi
    debian_install --no-services postgresql postgresql || return 1
    pg_bindir
}

as_pg() {
    if [[ $(id -u) == 0 ]]; then
        runuser -u postgres -- "$@"
    else
        "$@"
    fi
}

postgres() {
    local dir=$1 port=$2 bindir
    bindir=$(postgres_install)
    mkdir -p "$dir"
    dir=$(cd "$dir" && pwd)
    local user=() data=$dir/pgdata
    if [[ $(id -u) == 0 ]]; then
        # postgres refuses to run as root, and the user postgres may not reach DIR (a
        # test's temp folder is private): as root the cluster lives in a folder of its own
        # under /tmp, DIR/pgdata a link to it. setpriv execs (no child): our PID is the server's.
        user=(setpriv --reuid=postgres --regid=postgres --init-groups)
        if [[ ! -L $data ]]; then
            local own
            own=$(mktemp -d /tmp/kiln-pgdata.XXXXXX)
            chown postgres "$own"
            ln -s "$own" "$data"
        fi
        data=$(readlink "$data")
    fi
    if [[ ! -f $data/db/PG_VERSION ]]; then
        "${user[@]}" "$bindir/initdb" -D "$data/db" -U postgres --auth=trust >"$dir/initdb.log" 2>&1 ||
            { cat "$dir/initdb.log" >&2; return 1; }
    fi
    # fsync off: a test database that a crash may lose; it makes BuildGrid's writes cheap.
    exec "${user[@]}" "$bindir/postgres" -D "$data/db" -p "$port" -k "$data" \
        -c listen_addresses=127.0.0.1 -c fsync=off -c synchronous_commit=off \
        -c full_page_writes=off
}

migrate() {
    local dir=$1 port=$2 v
    v=$(venv)
    local psql=(psql -h 127.0.0.1 -p "$port" -U postgres -v ON_ERROR_STOP=1 -q)
    "${psql[@]}" -c "CREATE ROLE buildgrid LOGIN PASSWORD 'buildgrid'" >/dev/null
    "${psql[@]}" -c "CREATE DATABASE buildgrid OWNER buildgrid" >/dev/null
    "$v/bin/bgd" migrate apply "postgresql://buildgrid:buildgrid@127.0.0.1:$port/buildgrid" \
        >"$dir/migrate.log" 2>&1 || { cat "$dir/migrate.log" >&2; return 1; }
}

serve() {
    local dir=$1 port=$2 pgport=$3 keepalive=${4:-20} v
    v=$(venv)
    mkdir -p "$dir/cas"
    dir=$(cd "$dir" && pwd)
    cat >"$dir/buildgrid.yml" <<EOF
server:
  - !channel { address: "127.0.0.1:$port", insecure-mode: true }
# Every bot's long poll and every Execute stream holds a server thread for its whole
# length; with BuildGrid's default pool (5 per core: 10 here) it refused Execute with
# RESOURCE_EXHAUSTED ("Concurrent RPC limit exceeded!") once 4 workers and a build shared it.
thread-pool-size: 128
authorization: { method: none }
connections:
  - !sql-connection &sql { connection-string: "postgresql://buildgrid:buildgrid@127.0.0.1:$pgport/buildgrid" }
storages:
  - !disk-storage &main-storage { path: $dir/cas }
caches:
  - !lru-action-cache &main-action { storage: *main-storage, max-cached-refs: 100000, allow-updates: true }
schedulers:
  - !sql-scheduler &sched
    sql: *sql
    storage: *main-storage
    action-cache: *main-action
    property-set: !dynamic-property-set { match-property-keys: [device, gpu, compute-capability, cuda, tensorrt, tensorrt-flavour, cpu-isa, kiln-pool] }
    bot-session-keepalive-timeout: $keepalive
instances:
  - name: ""
    services:
      - !action-cache { cache: *main-action }
      - !cas { storage: *main-storage }
      - !bytestream { storage: *main-storage }
      - !execution { scheduler: *sched }
      - !bots { scheduler: *sched }
EOF
    exec "$v/bin/bgd" server start "$dir/buildgrid.yml"
}

case ${1:-} in
venv) venv ;;
postgres-install) postgres_install ;;
postgres) shift && postgres "$@" ;;
migrate) shift && migrate "$@" ;;
serve) shift && serve "$@" ;;
*)
    echo "usage: $0 venv | postgres-install | postgres DIR PORT | migrate DIR PORT | serve DIR PORT PGPORT [KEEPALIVE_S]" >&2
    exit 2
    ;;
esac
