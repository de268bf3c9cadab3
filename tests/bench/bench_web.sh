#!/bin/sh
# bench_web.sh — shardlab's web server against nginx serving the same page, side by side.
#
# usage: sh tests/bench/bench_web.sh [SECONDS]          (make bench-web [SECS=10])
#
# Starts `shardlab web` on a free port and fetches /lexicon/zero-stage-3 from it once: that
# rendered page is written to a directory that nginx (Debian's nginx-light, started here with
# its own minimal config, on another port) serves as a static file. wrk (Debian's) then asks
# each server for the page, 2 threads and 32 connections for SECONDS seconds, three times in
# turn, so that the machine's noise falls on both alike. Prints requests/s of each run, the
# median of the three, and shardlab's median as a ratio to nginx's. shardlab renders the
# markdown on every request; nginx sends bytes it has: the ratio says what rendering costs.
# Missing nginx or wrk are installed with apt-get (as root, else sudo), or named and skipped.
set -eu
BUILD=${BUILD:-build}
SECS=${1:-10}
tmp=$(mktemp -d)
web=""
ngx=""
cleanup() {
    [ -n "$web" ] && kill "$web" 2>/dev/null || true
    [ -n "$ngx" ] && kill "$ngx" 2>/dev/null || true
    rm -rf "$tmp"
}
trap cleanup EXIT

need=""
command -v wrk >/dev/null 2>&1 || need="$need wrk"
command -v nginx >/dev/null 2>&1 || [ -x /usr/sbin/nginx ] || need="$need nginx-light"
if [ -n "$need" ]; then
    if [ "$(id -u)" = 0 ]; then SUDO=""; elif command -v sudo >/dev/null 2>&1; then SUDO=sudo; else
        echo "bench-web: needs$need (apt-get install -y$need)"; exit 1; fi
    $SUDO apt-get install -y -qq $need >/dev/null 2>&1 || { $SUDO apt-get update -qq && $SUDO apt-get install -y -qq $need; }
fi
NGINX=$(command -v nginx || echo /usr/sbin/nginx)

# shardlab web, and the page it renders.
"$BUILD/shardlab" web --port 0 --runs "$tmp/runs" >"$tmp/web.out" 2>&1 &
web=$!
for _ in $(seq 50); do grep -q "open http" "$tmp/web.out" && break; sleep 0.1; done
wport=$(sed -n 's|.*open http://127.0.0.1:\([0-9]*\)/.*|\1|p' "$tmp/web.out")
[ -n "$wport" ] || { echo "bench-web: shardlab web did not start:"; cat "$tmp/web.out"; exit 1; }
page=/lexicon/zero-stage-3
mkdir -p "$tmp/www/lexicon"
curl -s "http://127.0.0.1:$wport$page" >"$tmp/www/lexicon/zero-stage-3.html"
bytes=$(wc -c <"$tmp/www/lexicon/zero-stage-3.html")

# nginx, its own config: one worker per core, the page as a static file, no logs.
nport=$((wport + 1))
cat >"$tmp/nginx.conf" <<EOF
worker_processes auto;
pid $tmp/nginx.pid;
error_log $tmp/nginx-error.log;
events { worker_connections 1024; }
http {
    access_log off;
    server {
        listen 127.0.0.1:$nport;
        root $tmp/www;
        location / { default_type text/html; try_files \$uri.html =404; }
    }
}
EOF
"$NGINX" -c "$tmp/nginx.conf" -g 'daemon off;' &
ngx=$!
sleep 0.5

rps() { wrk -t2 -c32 -d"${SECS}s" "$1" 2>/dev/null | sed -n 's/^Requests\/sec: *\([0-9.]*\).*/\1/p'; }
median3() { printf '%s\n%s\n%s\n' "$1" "$2" "$3" | sort -n | sed -n 2p; }

echo "bench-web: GET $page ($bytes bytes), wrk 2 threads, 32 connections, ${SECS} s per run, 3 runs each, alternating"
s1=$(rps "http://127.0.0.1:$wport$page"); n1=$(rps "http://127.0.0.1:$nport$page")
s2=$(rps "http://127.0.0.1:$wport$page"); n2=$(rps "http://127.0.0.1:$nport$page")
s3=$(rps "http://127.0.0.1:$wport$page"); n3=$(rps "http://127.0.0.1:$nport$page")
sm=$(median3 "$s1" "$s2" "$s3")
nm=$(median3 "$n1" "$n2" "$n3")
printf '%-28s %10s %10s %10s %10s\n' server "run 1" "run 2" "run 3" median
printf '%-28s %10s %10s %10s %10s\n' "shardlab web (renders)" "$s1" "$s2" "$s3" "$sm"
printf '%-28s %10s %10s %10s %10s\n' "nginx (the rendered file)" "$n1" "$n2" "$n3" "$nm"
awk -v s="$sm" -v n="$nm" 'BEGIN { printf "ratio shardlab / nginx: %.2f\n", s / n }'
