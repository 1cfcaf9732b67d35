#!/usr/bin/env bash
# Backpressure load case: PUBLISHERS raw-socket NATS publishers send flat out
# on a subject a stream records, for SECONDS seconds, against one node of the
# release build. Prints the node's RSS every 5 s during the load and for 30 s
# after it, the recorder backlog (bytes queued, most ever queued, stall time
# from /varz), and messages recorded per second.
#
# Usage: scripts/load-publishers.sh [SECONDS] [PUBLISHERS]
# Env: LIMIT (nats.recorder.max.pending; unset: the node's default), AFTER (seconds
# watched after the load, 30), BIN (binary; default target/release/liftbridge,
# built when missing), CONFIG (more liftbridge.yaml lines, e.g.
# CONFIG='store.cache.size: 64MB').
# After the load each line also shows the heap as the allocator sees it
# (liftbridge_allocator_*: in use; free = held beyond that — glibc: free in
# its arenas, jemalloc: resident but not in use; mapped — glibc: blocks
# mapped on their own, jemalloc: active extents). A large "free" long after
# the load is memory the allocator kept; "in use" is live data.
# Targets: RSS <= 256 MB throughout, <= 2x idle RSS 30 s after the load.
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-60}
pubs=${2:-3}
after=${AFTER:-30}
limit=${LIMIT:-}
bin=${BIN:-target/release/liftbridge}
[ -x "$bin" ] || cargo build --release --bin liftbridge

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
grpc=$(free_port); nats=$(free_port); http=$(free_port)
dir=$(mktemp -d)
cat > "$dir/liftbridge.yaml" <<EOF
host: 127.0.0.1
port: $grpc
data.dir: $dir/data
logging.level: warn
nats.listen: 127.0.0.1:$nats
http.listen: 127.0.0.1:$http
EOF
[ -z "$limit" ] || echo "nats.recorder.max.pending: $limit" >>"$dir/liftbridge.yaml"
[ -z "${CONFIG:-}" ] || printf '%s\n' "$CONFIG" >>"$dir/liftbridge.yaml"
limit=${limit:-default}
"$bin" --config "$dir/liftbridge.yaml" >"$dir/node.log" 2>&1 &
node=$!
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  kill "$node" 2>/dev/null || true
  wait 2>/dev/null || true
  rm -rf "$dir"
}
trap cleanup EXIT

for _ in $(seq 100); do
  curl -sf "http://127.0.0.1:$http/healthz" >/dev/null 2>&1 && break
  sleep 0.1
done
"$bin" stream create load --subject load.foo --addr "127.0.0.1:$grpc" >/dev/null
sleep 1

rss_mb() { awk '/VmRSS/ {printf "%.1f", $2/1024}' "/proc/$node/status"; }
recorded() {
  curl -s "http://127.0.0.1:$http/metrics" |
    awk '/^liftbridge_partition_messages_appended_total\{.*stream="load"/ {print $2}' | head -1
}
heap() {
  curl -s "http://127.0.0.1:$http/metrics" | awk '
    /^liftbridge_allocator_in_use_bytes / {u = $2}
    /^liftbridge_allocator_free_bytes / {f = $2}
    /^liftbridge_allocator_mapped_bytes / {m = $2}
    END {printf "heap in use %.1f MB, free %.1f MB, mapped %.1f MB", u / 1e6, f / 1e6, m / 1e6}'
}
backlog() {
  curl -s "http://127.0.0.1:$http/varz" | python3 -c '
import json, sys
v = json.load(sys.stdin)["liftbridge"]
r = [x for x in v["recorders"] if x["subject"] == "load.foo"]
r = r[0] if r else {}
print("backlog %.1f MB (max %.1f MB)  stalled %.1f s" % (
    r.get("pending_bytes", 0) / 1e6, r.get("pending_bytes_max", 0) / 1e6, r.get("stall_seconds", 0)))'
}

idle=$(rss_mb)
echo "idle RSS: $idle MB (recorder queue limit $limit, $pubs publishers, ${secs}s; $(heap))"
[ -z "${CONFIG:-}" ] || echo "config: $CONFIG"

for i in $(seq "$pubs"); do
  python3 - "$nats" "$i" <<'EOF' &
import socket, sys
port, pid = int(sys.argv[1]), sys.argv[2]
s = socket.create_connection(("127.0.0.1", port))
s.recv(4096)
s.sendall(b'CONNECT {"verbose":false,"pedantic":false}\r\n')
body = (pid * 100).encode()[:100]
frame = b"PUB load.foo %d\r\n%s\r\n" % (len(body), body)
chunk = frame * (256 * 1024 // len(frame))
while True:
    s.sendall(chunk)
EOF
  pids+=($!)
done

start=$(date +%s)
prev=$(recorded); prev=${prev:-0}; peak=$idle
first=$prev
t=0
while [ "$t" -lt "$secs" ]; do
  sleep 5; t=$(( $(date +%s) - start ))
  now=$(recorded); now=${now:-0}
  r=$(rss_mb); peak=$(awk -v a="$peak" -v b="$r" 'BEGIN{print (b>a)?b:a}')
  echo "t=${t}s  RSS $r MB  recorded $(( (${now%.*} - ${prev%.*}) / 5 )) msgs/s  $(backlog)"
  prev=$now
done
for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
pids=()
rate=$(( (${prev%.*} - ${first%.*}) / ($(date +%s) - start) ))
echo "publishers stopped"
t=0
while [ "$t" -lt "$after" ]; do
  sleep 5; t=$((t + 5))
  now=$(recorded); now=${now:-0}
  r=$(rss_mb); peak=$(awk -v a="$peak" -v b="$r" 'BEGIN{print (b>a)?b:a}')
  echo "after +${t}s  RSS $r MB  recorded $(( (${now%.*} - ${prev%.*}) / 5 )) msgs/s  $(backlog)  $(heap)"
  prev=$now
done
final=$(rss_mb)
echo "summary: idle $idle MB, peak $peak MB (target <= 256), ${after}s after $final MB (target <= 2x idle = $(awk -v a="$idle" 'BEGIN{print 2*a}') MB), $rate msgs/s recorded on average during the load"
if grep -qi "panic\|error" "$dir/node.log"; then
  echo "node log:"; cat "$dir/node.log"
fi
