#!/usr/bin/env bash
# nginx's WebDAV module as a Bazel HTTP remote cache, for kiln's tests and benchmarks.
#
#   tools/nginx_cache.sh install
#       Install Debian's nginx if it is missing (apt-get, as root; `apt-get update`
#       first when the package lists are stale). Prints the nginx binary's path.
#   tools/nginx_cache.sh serve DIR PORT [TOKEN]
#       Write DIR/nginx.conf and run nginx in the foreground (exec: the caller's
#       child is nginx itself, so killing it stops the server) on 127.0.0.1:PORT,
#       storing what is PUT under DIR/root. With TOKEN, a request without
#       `Authorization: Bearer TOKEN` is answered 401. Logs: DIR/error.log and
#       DIR/access.log, a line per request: `CONNECTION N "METHOD PATH HTTP/1.1" STATUS BYTES`
#       (N: the request's number on its connection, to see connections reused).
#
# The configuration is what Bazel's documentation gives for nginx:
# `dav_methods PUT; create_full_put_path on;`, with no body size limit.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/debian_packages.sh"

find_nginx() {
    command -v nginx || { [[ -x /usr/sbin/nginx ]] && echo /usr/sbin/nginx; }
}

install() {
    if find_nginx; then
        return 0
    fi
    debian_install --no-services nginx nginx || return 1
    find_nginx
}

serve() {
    # KEEPALIVE: seconds an idle client connection is kept (nginx's default is 75).
    local dir=$1 port=$2 token=${3:-} keepalive=${4:-75}
    local nginx
    nginx=$(install)
    mkdir -p "$dir/root" "$dir/tmp"
    dir=$(cd "$dir" && pwd)
    local user="" auth=""
    # As root, workers would run as nobody and could not write DIR: keep them root.
    [[ $(id -u) == 0 ]] && user="user root;"
    [[ -n $token ]] && auth="if (\$http_authorization != \"Bearer $token\") { return 401; }"
    cat >"$dir/nginx.conf" <<EOF
$user
worker_processes 2;
pid $dir/nginx.pid;
error_log $dir/error.log;
events { worker_connections 256; }
http {
    log_format kiln '\$connection \$connection_requests "\$request" \$status \$body_bytes_sent';
    access_log $dir/access.log kiln;
    client_body_temp_path $dir/tmp/body;
    proxy_temp_path $dir/tmp/proxy;
    fastcgi_temp_path $dir/tmp/fastcgi;
    uwsgi_temp_path $dir/tmp/uwsgi;
    scgi_temp_path $dir/tmp/scgi;
    sendfile on;
    tcp_nopush on;
    keepalive_requests 100000;
    keepalive_timeout ${keepalive}s;
    default_type application/octet-stream;
    server {
        listen 127.0.0.1:$port;
        root $dir/root;
        client_max_body_size 0;
        $auth
        location / {
            dav_methods PUT;
            create_full_put_path on;
            dav_access user:rw group:r all:r;
        }
    }
}
EOF
    exec "$nginx" -p "$dir" -c "$dir/nginx.conf" -e "$dir/error.log" -g "daemon off;"
}

case ${1:-} in
install) install ;;
serve) shift && serve "$@" ;;
*)
    echo "usage: $0 install | serve DIR PORT [TOKEN [KEEPALIVE_SECONDS]]" >&2
    exit 2
    ;;
esac
