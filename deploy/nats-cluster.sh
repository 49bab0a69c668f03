#!/usr/bin/env bash
# nats-cluster.sh — a real 3-node NATS JetStream cluster on loopback, for tests and benchmarks.
#
#   nats-cluster.sh start   DIR [BASE_PORT]   write configs, start n1..n3, wait for a meta leader
#   nats-cluster.sh stop    DIR               stop every node (TERM, then KILL after 5 s)
#   nats-cluster.sh status  DIR               one line per node, then the meta leader
#   nats-cluster.sh kill    DIR N             kill -9 node N (1..3): a crash, no clean shutdown
#   nats-cluster.sh restart DIR N             (re)start node N and wait until it is healthy
#   nats-cluster.sh urls    DIR               the client URLs, comma separated
#
# Ports, from BASE (default 14222): clients BASE..BASE+2, routes BASE+100.., monitoring
# BASE+200.. (HTTP, /jsz and /healthz). Everything listens on 127.0.0.1 only. DIR holds
# nN.conf, nN.log, nN.pid (written by nats-server itself) and the JetStream stores nN/.
# The base port is remembered in DIR/base_port so the other commands need only DIR.
# Processes are checked by /proc/PID/comm before a signal: a stale pid file never kills a
# stranger. With NATS_CLUSTER_OWNER=PID in start's environment, a watchdog stops the nodes once
# that process is gone, however it ended: a test killed by ctest's timeout (SIGKILL, no exit
# handler runs) leaves no node behind (the nodes are daemons, not its children). Meant to run as root on a fresh CI machine; needs nats-server and python3.
set -euo pipefail
export PATH="$PATH:/usr/sbin:/sbin" # Debian puts nats-server there; a user's PATH lacks it

die() { echo "nats-cluster: $*" >&2; exit 1; }
[ $# -ge 2 ] || die "usage: $0 start|stop|status|kill|restart|urls DIR [BASE_PORT|N]"
cmd=$1
dir=$2

node_pid() {  # prints the pid of node $1 when it is a live nats-server, else nothing
  local f="$dir/n$1.pid" pid
  [ -s "$f" ] || return 0
  pid=$(cat "$f")
  [[ "$pid" =~ ^[0-9]+$ ]] || return 0
  [ "$(cat "/proc/$pid/comm" 2>/dev/null || true)" = "nats-server" ] && echo "$pid"
  return 0
}

base() { cat "$dir/base_port" 2>/dev/null || die "$dir/base_port missing: was the cluster started there?"; }

http_get() {  # http_get PORT PATH: body on stdout, exit 0 only for HTTP 200
  python3 - "$1" "$2" <<'PY'
import sys, urllib.request
try:
    with urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}{sys.argv[2]}", timeout=2) as r:
        sys.stdout.write(r.read().decode()); sys.exit(0 if r.status == 200 else 1)
except Exception:
    sys.exit(1)
PY
}

meta_leader() {  # prints the meta leader seen by node $1's monitoring port, if any
  local body
  body=$(http_get $(( $(base) + 200 + $1 - 1 )) /jsz) || return 0
  python3 -c 'import json,sys; print(json.loads(sys.argv[1]).get("meta_cluster",{}).get("leader",""))' "$body"
}

write_conf() {  # write_conf N
  local n=$1 b i routes=""
  b=$(base)
  for i in 1 2 3; do routes+="    nats-route://127.0.0.1:$((b + 100 + i - 1))\n"; done
  mkdir -p "$dir/n$n"
  printf '%b' "server_name: n$n
listen: 127.0.0.1:$((b + n - 1))
http: 127.0.0.1:$((b + 200 + n - 1))
pid_file: \"$dir/n$n.pid\"
jetstream {
  store_dir: \"$dir/n$n\"
  max_memory_store: 256MB
  max_file_store: 4GB
}
cluster {
  name: tlbus
  listen: 127.0.0.1:$((b + 100 + n - 1))
  routes: [
$routes  ]
}
" > "$dir/n$n.conf"
}

start_node() {  # start_node N: no-op when it already runs
  local n=$1
  [ -n "$(node_pid "$n")" ] && return 0
  rm -f "$dir/n$n.pid"
  nohup nats-server -c "$dir/n$n.conf" </dev/null >>"$dir/n$n.log" 2>&1 &
}

wait_healthy() {  # wait_healthy N: its /healthz says ok (JetStream current), 60 s at most
  local n=$1 t
  for t in $(seq 1 300); do
    [ -n "$(node_pid "$n")" ] && http_get $(( $(base) + 200 + n - 1 )) /healthz >/dev/null && return 0
    sleep 0.2
  done
  die "node n$n not healthy after 60 s; see $dir/n$n.log"
}

wait_leader() {
  local t n l
  for t in $(seq 1 300); do
    for n in 1 2 3; do
      l=$(meta_leader "$n")
      [ -n "$l" ] && { echo "nats-cluster: meta leader $l"; return 0; }
    done
    sleep 0.2
  done
  die "no JetStream meta leader after 60 s; see $dir/n*.log"
}

stop_node() {  # stop_node N SIGNAL: signal, then wait (KILL after 5 s)
  local n=$1 sig=$2 pid t
  pid=$(node_pid "$n")
  [ -n "$pid" ] || return 0
  kill "-$sig" "$pid" 2>/dev/null || true
  for t in $(seq 1 50); do
    [ -d "/proc/$pid" ] && [ "$(cat "/proc/$pid/comm" 2>/dev/null || true)" = "nats-server" ] || { rm -f "$dir/n$n.pid"; return 0; }
    sleep 0.1
  done
  kill -KILL "$pid" 2>/dev/null || true
  while [ -d "/proc/$pid" ] && [ "$(cat "/proc/$pid/comm" 2>/dev/null || true)" = "nats-server" ]; do sleep 0.05; done
  rm -f "$dir/n$n.pid"
}

check_n() { [[ "${1:-}" =~ ^[123]$ ]] || die "node must be 1, 2 or 3, not '${1:-}'"; }

case "$cmd" in
  start)
    command -v nats-server >/dev/null || die "nats-server not installed (deploy/install-deps.sh)"
    bp=${3:-14222}
    [[ "$bp" =~ ^[0-9]+$ ]] && [ "$bp" -ge 1024 ] && [ "$bp" -le 65000 ] || die "bad base port '$bp'"
    mkdir -p "$dir"
    dir=$(cd "$dir" && pwd)
    echo "$bp" > "$dir/base_port"
    for n in 1 2 3; do write_conf "$n"; done
    for n in 1 2 3; do start_node "$n"; done
    # a node that failed to bind dies at once: say so rather than wait for a leader
    sleep 0.3
    for n in 1 2 3; do
      [ -n "$(node_pid "$n")" ] || { sleep 1; [ -n "$(node_pid "$n")" ] || { "$0" stop "$dir"; die "node n$n did not start; see $dir/n$n.log"; }; }
    done
    wait_leader
    for n in 1 2 3; do wait_healthy "$n"; done
    owner=${NATS_CLUSTER_OWNER:-}
    if [ -n "$owner" ]; then
      [[ "$owner" =~ ^[0-9]+$ ]] || { "$0" stop "$dir"; die "NATS_CLUSTER_OWNER must be a pid, not '$owner'"; }
      # detached, every descriptor closed: a caller reading this script's output sees its end
      nohup setsid bash -c 'while kill -0 "$1" 2>/dev/null && [ -d "$2" ]; do sleep 1; done
                            exec bash "$0" stop "$2"' "$0" "$owner" "$dir" </dev/null >/dev/null 2>&1 &
    fi
    ;;
  stop)
    [ -d "$dir" ] || exit 0
    for n in 1 2 3; do stop_node "$n" TERM; done
    ;;
  status)
    for n in 1 2 3; do
      pid=$(node_pid "$n")
      if [ -n "$pid" ]; then st="up pid $pid"; else st="down"; fi
      echo "n$n $st client 127.0.0.1:$(( $(base) + n - 1 ))"
    done
    for n in 1 2 3; do l=$(meta_leader "$n"); [ -n "$l" ] && { echo "meta leader $l"; exit 0; }; done
    echo "meta leader none"; exit 1
    ;;
  kill)
    check_n "${3:-}"
    stop_node "$3" KILL
    ;;
  restart)
    check_n "${3:-}"
    dir=$(cd "$dir" && pwd)
    stop_node "$3" TERM
    start_node "$3"
    wait_healthy "$3"
    ;;
  urls)
    b=$(base); echo "nats://127.0.0.1:$b,nats://127.0.0.1:$((b + 1)),nats://127.0.0.1:$((b + 2))"
    ;;
  *) die "unknown command '$cmd'" ;;
esac
