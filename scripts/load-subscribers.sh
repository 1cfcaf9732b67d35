#!/usr/bin/env bash
# Re-runs the subscriber and connection load cases and prints the node's RSS:
#  1. a node with a ~20 MB stream, 1,000 gRPC Subscribe streams that never
#     read and one normal reader (target: RSS <= 300 MB, the normal reader
#     gets every message), then RSS after the idle streams are cancelled;
#  2. 10,000 NATS connections opened then closed, RSS after, for this node,
#     `liftbridge nats-server`, nats-server 2.15.1 (.venv) and 2.9.10 (Debian);
#  3. optionally (`--bench`) the core NATS benchmark, whose table ends with
#     each server's RSS after the runs.
# Usage: scripts/load-subscribers.sh [--bench | --subscribers]
#   (--subscribers: case 1 only). Env: BIN (binary; default
#   target/release/liftbridge, built when unset).
set -euo pipefail
cd "$(dirname "$0")/.."
ulimit -n "$(ulimit -Hn)"  # 10,000 connections need more than 10,000 descriptors
py=.venv/bin/python
go215=.venv/bin/nats-server
go29=/usr/sbin/nats-server
for f in "$py" "$go215" "$go29"; do
  [ -x "$f" ] || { echo "missing $f (scripts/test.sh builds .venv; apt-get install nats-server)" >&2; exit 1; }
done
if [ -n "${BIN:-}" ]; then
  bin=$(realpath "$BIN")
else
  cargo build --release --bin liftbridge
  bin=$(pwd)/target/release/liftbridge
fi
work=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$work"; }
trap cleanup EXIT
port() { "$py" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_port() { for _ in $(seq 300); do (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0; sleep 0.1; done; echo "port $1 not listening" >&2; exit 1; }
start_node() { # dir -> sets grpc, nats, pid
  grpc=$(port); nats=$(port); http=$(port)
  mkdir -p "$1"
  printf 'listen: 127.0.0.1:%s\ndata.dir: %s/data\nclustering.raft.bootstrap.seed: true\nhttp.listen: 127.0.0.1:%s\nnats:\n  listen: 127.0.0.1:%s\n' \
    "$grpc" "$1" "$http" "$nats" > "$1/liftbridge.yaml"
  "$bin" -c "$1/liftbridge.yaml" > "$1/out.log" 2>&1 &
  pid=$!; pids+=("$pid")
  wait_port "$grpc"; wait_port "$nats"
}

echo "== 1,000 idle gRPC subscribers on a ~20 MB stream"
start_node "$work/subs"
"$py" scripts/load_subscribers.py subscribers --pid "$pid" --grpc "127.0.0.1:$grpc" --nats "127.0.0.1:$nats" --idle 1000
kill "$pid"; wait "$pid" 2>/dev/null || true
[ "${1:-}" != "--subscribers" ] || exit 0

echo "== 10,000 NATS connections, then closed"
start_node "$work/conns"
"$py" scripts/load_subscribers.py connections --pid "$pid" --nats "127.0.0.1:$nats" --label "liftbridge node"
kill "$pid"; wait "$pid" 2>/dev/null || true
for srv in "liftbridge nats-server=$bin nats-server" "nats-server 2.15.1=$go215" "nats-server 2.9.10=$go29"; do
  label=${srv%%=*}; cmd=${srv#*=}
  p=$(port)
  $cmd -a 127.0.0.1 -p "$p" > "$work/$p.log" 2>&1 &
  pid=$!; pids+=("$pid")
  wait_port "$p"
  "$py" scripts/load_subscribers.py connections --pid "$pid" --nats "127.0.0.1:$p" --label "$label"
  kill "$pid"; wait "$pid" 2>/dev/null || true
done

if [ "${1:-}" = "--bench" ]; then
  echo "== core NATS benchmark (RSS after the runs in the last rows)"
  "$bin" bench nats --no-path-peer --peer "nats-server-2.15.1=$(pwd)/$go215" --peer "nats-server-2.9.10=$go29"
fi
