#!/usr/bin/env bash
# Thousands of partitions on one node: creates N empty partitions (default
# 10,000, in STREAMS streams) on a release-built node, then prints its RSS and
# thread count, the disk space per empty partition, the graceful stop time
# (SIGTERM to exit), the start-up time after a restart (process start until
# every partition is started) and the RSS and threads after the restart.
#
#   cargo build --release --bin liftbridge
#   scripts/load-partitions.sh            # N=10000 STREAMS=10
#   N=2000 STREAMS=4 scripts/load-partitions.sh
#
# Targets (issue 14): ≤ 1 GB RSS, ≤ 64 threads, start-up ≤ 5 s, stop ≤ 5 s,
# an empty partition ≤ 256 KiB on disk.
set -euo pipefail

N=${N:-10000}
STREAMS=${STREAMS:-10}
BIN=${BIN:-target/release/liftbridge}
[ -x "$BIN" ] || { echo "no $BIN: cargo build --release --bin liftbridge" >&2; exit 1; }
PER=$(( (N + STREAMS - 1) / STREAMS ))
TOTAL=$(( PER * STREAMS ))

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
GRPC=$(free_port); HTTP=$(free_port); NATS=$(free_port); CLUSTER=$(free_port)
WORK=$(mktemp -d)
trap 'kill -9 "${PID:-0}" 2>/dev/null || true; rm -rf "$WORK"' EXIT
cat > "$WORK/liftbridge.yaml" <<YAML
listen: 127.0.0.1:$GRPC
data.dir: $WORK/data
http.listen: 127.0.0.1:$HTTP
clustering:
  server.id: load
  namespace: load
  raft.bootstrap.peers: [load]
nats:
  listen: 127.0.0.1:$NATS
  cluster:
    name: load
    listen: 127.0.0.1:$CLUSTER
YAML

now() { date +%s.%N; }
started_count() { grep -c 'partition started' "$WORK/log" 2>/dev/null || true; }
status() { awk -v k="$1" '$1 == k":" {print $2}' "/proc/$PID/status"; }

start_node() {
  : > "$WORK/log"
  T0=$(now)
  "$BIN" -c "$WORK/liftbridge.yaml" >>"$WORK/log" 2>&1 &
  PID=$!
  until (exec 3<>"/dev/tcp/127.0.0.1/$GRPC") 2>/dev/null; do
    kill -0 "$PID" 2>/dev/null || { cat "$WORK/log"; exit 1; }
    sleep 0.05
  done
}

wait_started() {
  local deadline=$(( $(date +%s) + 900 ))
  until [ "$(started_count)" -ge "$TOTAL" ]; do
    [ "$(date +%s)" -lt "$deadline" ] || { echo "only $(started_count) of $TOTAL partitions started" >&2; exit 1; }
    sleep 0.05
  done
}

stop_node() {
  local t0; t0=$(now)
  kill -TERM "$PID"
  while kill -0 "$PID" 2>/dev/null; do sleep 0.02; done
  wait "$PID" 2>/dev/null || true
  STOP_S=$(echo "$(now) - $t0" | bc)
}

start_node
for s in $(seq 1 "$STREAMS"); do
  until "$BIN" stream --addr "127.0.0.1:$GRPC" create "load$s" --partitions "$PER" >/dev/null 2>&1; do
    kill -0 "$PID" 2>/dev/null || { cat "$WORK/log"; exit 1; }
    sleep 0.2
  done
done
wait_started
CREATE_S=$(echo "$(now) - $T0" | bc)
sleep 2
RSS1=$(status VmRSS); THREADS1=$(status Threads)
DISK_KB=$(du -sk "$WORK/data/streams" | cut -f1)
stop_node; STOP1=$STOP_S

start_node
wait_started
START_S=$(echo "$(now) - $T0" | bc)
sleep 2
RSS2=$(status VmRSS); THREADS2=$(status Threads)
stop_node; STOP2=$STOP_S

printf 'partitions:                 %d (%d streams)\n' "$TOTAL" "$STREAMS"
printf 'created and started in:     %.2f s\n' "$CREATE_S"
printf 'RSS after creation:         %d MiB\n' $(( RSS1 / 1024 ))
printf 'threads after creation:     %d\n' "$THREADS1"
printf 'disk per empty partition:   %d KiB (du of streams/: %d KiB)\n' $(( DISK_KB / TOTAL )) "$DISK_KB"
printf 'graceful stop:              %.2f s\n' "$STOP1"
printf 'start-up after restart:     %.2f s\n' "$START_S"
printf 'RSS after restart:          %d MiB\n' $(( RSS2 / 1024 ))
printf 'threads after restart:      %d\n' "$THREADS2"
printf 'graceful stop (2nd):        %.2f s\n' "$STOP2"
