#!/usr/bin/env bash
# Soak test: one release node under steady load for SOAK_SECONDS (default
# 3600), printing its RSS, threads, open fds and error counts every
# SOAK_INTERVAL seconds (default 60), then a verdict:
#   - RSS flat: the mean of the last quarter's samples within
#     SOAK_RSS_TOLERANCE % (default 20) of the second quarter's mean;
#   - no errors: no ERROR line in the node's log, no publisher or
#     subscriber failed or died;
#   - every acknowledged message is readable with its value, unless
#     retention removed it (below the stream's oldest offset) or compaction
#     superseded it (an older record of the same key);
#   - every NATS message published is recorded;
#   - retention and compaction both removed records (runs of 3 min or more).
# Load, all at once:
#   soak-main     gRPC publisher, ack policy all (SOAK_RATE msgs/s, default
#                 200), and a subscriber following it from the earliest offset;
#   soak-ret      gRPC publisher with acks; retention max 2 MB / 2 min;
#   soak-compact  two gRPC publishers with acks, keys k1 and k2; compaction;
#   soak-nats     plain NATS publisher (nats-py) on subject soak.nats
#                 (SOAK_RATE msgs/s), and a subscriber following it.
# The cleaner runs every 10 s so that retention and compaction run often.
# Usage: scripts/soak.sh   (SOAK_SECONDS=600 for a 10-minute run;
#        SOAK_BIN=path to use a built binary instead of building one;
#        SOAK_KEEP=1 keeps the work directory with logs and dumps)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

SOAK_SECONDS=${SOAK_SECONDS:-3600}
SOAK_INTERVAL=${SOAK_INTERVAL:-60}
SOAK_RATE=${SOAK_RATE:-200}
SOAK_RSS_TOLERANCE=${SOAK_RSS_TOLERANCE:-20}
py=${SOAK_PYTHON:-$root/.venv/bin/python}
if [ ! -x "$py" ]; then
  echo "soak: $py not found (scripts/test.sh builds .venv with nats-py)" >&2
  exit 2
fi

if [ -n "${SOAK_BIN:-}" ]; then
  bin=$SOAK_BIN
else
  cargo build --release --bin liftbridge
  bin=$root/target/release/liftbridge
fi

work=$(mktemp -d /tmp/liftbridge-soak.XXXXXX)
pids=()
# Each load pipeline runs in its own session (setsid), so that stopping it
# stops every process of it: kill -- -PGID.
stop_load() {
  for p in "${pids[@]}"; do kill -- "-$p" 2>/dev/null || true; done
  pids=()
}
cleanup() {
  stop_load
  if [ -n "${node:-}" ]; then kill "$node" 2>/dev/null && wait "$node" 2>/dev/null || true; fi
  if [ -z "${SOAK_KEEP:-}" ]; then rm -rf "$work"; else echo "soak: kept $work"; fi
}
trap cleanup EXIT

free_port() { "$py" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
grpc=$(free_port); nats=$(free_port); http=$(free_port)
cat > "$work/liftbridge.yaml" <<EOF
listen: 127.0.0.1:$grpc
data.dir: $work/data
nats.listen: 127.0.0.1:$nats
http.listen: 127.0.0.1:$http
streams.cleaner.interval: 10s
logging.level: info
EOF
"$bin" --config "$work/liftbridge.yaml" > "$work/node.log" 2>&1 &
node=$!
for _ in $(seq 1 200); do
  curl -fs "http://127.0.0.1:$http/healthz" >/dev/null 2>&1 && break
  sleep 0.1
done
curl -fs "http://127.0.0.1:$http/healthz" >/dev/null || { echo "soak: node did not start"; cat "$work/node.log"; exit 2; }
addr=127.0.0.1:$grpc

"$bin" stream create soak-main --addr "$addr" >/dev/null
"$bin" stream create soak-ret --addr "$addr" --retention-max-bytes 2000000 --retention-max-age 2m >/dev/null
"$bin" stream create soak-compact --addr "$addr" --compact >/dev/null
"$bin" stream create soak-nats --subject soak.nats --addr "$addr" >/dev/null

# A line generator: "<prefix>-<n>" at <rate> lines/s, forever.
cat > "$work/gen.py" <<'PY'
import sys, time
prefix, rate = sys.argv[1], float(sys.argv[2])
i, start = 0, time.monotonic()
while True:
    print(f"{prefix}-{i}", flush=True)
    i += 1
    ahead = start + i / rate - time.monotonic()
    if ahead > 0:
        time.sleep(ahead)
PY
# A plain NATS publisher; prints how many it sent every 100.
cat > "$work/nats_pub.py" <<'PY'
import asyncio, sys, time
import nats
async def main():
    nc = await nats.connect(f"nats://127.0.0.1:{sys.argv[1]}")
    rate = float(sys.argv[2]); i = 0; start = time.monotonic()
    while True:
        await nc.publish("soak.nats", f"nats-{i}".encode())
        i += 1
        if i % 100 == 0:
            await nc.flush()
            print(i, flush=True)
        ahead = start + i / rate - time.monotonic()
        if ahead > 0:
            await asyncio.sleep(ahead)
asyncio.run(main())
PY
export py bin addr work
bg() { setsid bash -c "$1" & pids+=($!); }

# gRPC publishers with acks: value i on stdin, "offset N" as line i of stdout.
publish() { # stream rate prefix [key]
  local keyarg=""
  if [ -n "${4:-}" ]; then keyarg="--key $4"; fi
  bg "\"\$py\" -u \"\$work/gen.py\" $3 $2 2>/dev/null | \"\$bin\" pub $1 --addr \"\$addr\" --ack-policy all $keyarg > \"\$work/acks-$3.log\" 2> \"\$work/err-pub-$3.log\""
}
publish soak-main "$SOAK_RATE" main
publish soak-ret "$SOAK_RATE" ret
publish soak-compact $((SOAK_RATE / 4)) c1 k1
publish soak-compact $((SOAK_RATE / 4)) c2 k2
bg "\"\$py\" -u \"\$work/nats_pub.py\" $nats $SOAK_RATE > \"\$work/nats-pub.log\" 2> \"\$work/err-nats-pub.log\""

# Subscribers following two streams; they note the last offset seen.
follow() { # stream
  bg "\"\$bin\" sub $1 --addr \"\$addr\" --earliest 2> \"\$work/err-sub-$1.log\" | awk -v f=\"\$work/seen-$1\" 'NR % 500 == 0 { print \$1 > f; close(f) }'"
}
follow soak-main
follow soak-nats

client_errors() { cat "$work"/err-pub-*.log "$work"/err-sub-*.log "$work"/err-nats-pub.log | wc -l; }
rss_samples=()
sample() {
  local st rss thr fds errs warns
  st=/proc/$node/status
  rss=$(awk '/^VmRSS/ {print $2}' "$st")
  thr=$(awk '/^Threads/ {print $2}' "$st")
  fds=$(ls "/proc/$node/fd" | wc -l)
  errs=$(grep -c ' ERROR ' "$work/node.log" || true)
  warns=$(grep -c ' WARN ' "$work/node.log" || true)
  rss_samples+=("$rss")
  printf '%6ds  rss %7d KiB  threads %3d  fds %4d  log errors %d warnings %d  client errors %d  acked main %d ret %d compact %d  nats sent %s  subscribers at main %s nats %s\n' \
    "$(( $(date +%s) - t0 ))" "$rss" "$thr" "$fds" "$errs" "$warns" "$(client_errors)" \
    "$(wc -l < "$work/acks-main.log")" "$(wc -l < "$work/acks-ret.log")" \
    "$(( $(wc -l < "$work/acks-c1.log") + $(wc -l < "$work/acks-c2.log") ))" \
    "$(tail -n1 "$work/nats-pub.log" 2>/dev/null || echo 0)" \
    "$(cat "$work/seen-soak-main" 2>/dev/null || echo -)" "$(cat "$work/seen-soak-nats" 2>/dev/null || echo -)"
}

t0=$(date +%s)
echo "soak: node pid $node, gRPC $addr, NATS 127.0.0.1:$nats, HTTP 127.0.0.1:$http, $SOAK_SECONDS s, $SOAK_RATE msgs/s per publisher"
while [ $(( $(date +%s) - t0 )) -lt "$SOAK_SECONDS" ]; do
  sleep "$SOAK_INTERVAL"
  kill -0 "$node" 2>/dev/null || { echo "soak: the node died"; tail -20 "$work/node.log"; exit 1; }
  sample
done

# Stop the load (client errors are counted first: stopping the pipelines
# makes them fail on purpose), then read every stream back.
dead=0
for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null || dead=$((dead + 1)); done
errors_at_end=$(client_errors)
stop_load
sleep 1
dump() { "$bin" sub "$1" --addr "$addr" --earliest --stop-latest > "$work/dump-$1.tsv" 2>> "$work/dump.log" || true; }
for s in soak-main soak-ret soak-compact soak-nats; do dump "$s"; done

"$py" - "$work" "$SOAK_RSS_TOLERANCE" "$dead" "$errors_at_end" "${rss_samples[@]}" <<'PY'
import sys, os
work, tol, dead, client = sys.argv[1], float(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
rss = [int(x) for x in sys.argv[5:]]
ok = True
def load(stream):
    got = {}
    for line in open(os.path.join(work, f"dump-{stream}.tsv")):
        parts = line.rstrip("\n").split("\t")
        if len(parts) >= 4:
            got[int(parts[0])] = parts[3]
    return got
def acks(prefix):
    out = []
    for i, line in enumerate(open(os.path.join(work, f"acks-{prefix}.log"))):
        if line.startswith("offset "):
            out.append((int(line.split()[1]), f"{prefix}-{i}"))
    return out
def verify(stream, prefixes, keyed=False):
    global ok
    got = load(stream)
    oldest = min(got) if got else None
    acked = [(off, val, p) for p in prefixes for off, val in acks(p)]
    latest = {}
    for off, _, p in acked:
        latest[p] = max(latest.get(p, -1), off)
    missing = wrong = removed = superseded = 0
    for off, val, p in acked:
        if off in got:
            if got[off] != val:
                wrong += 1
        elif keyed and off < latest[p]:
            superseded += 1
        elif oldest is None or off < oldest:
            removed += 1
        else:
            missing += 1
    ok = ok and missing + wrong == 0 and len(acked) > 0
    print(f"  {stream}: {len(acked)} acked, {len(got)} readable, {removed} removed by retention, "
          f"{superseded} superseded by compaction, {missing} missing, {wrong} with another value")
    return removed, superseded
print("verdict:")
verify("soak-main", ["main"])
# The cleaner must have done its work: retention removed the start of
# soak-ret (past 2 MB or 2 min, so runs of 3 minutes or more), compaction
# removed superseded records of soak-compact.
removed, _ = verify("soak-ret", ["ret"])
if removed == 0:
    print("  retention removed nothing from soak-ret")
    ok = False
_, superseded = verify("soak-compact", ["c1", "c2"], keyed=True)
if superseded == 0:
    print("  compaction removed nothing from soak-compact")
    ok = False
nats_got = load("soak-nats")
try:
    sent = int(open(os.path.join(work, "nats-pub.log")).read().split()[-1])
except (IndexError, ValueError):
    sent = 0
print(f"  soak-nats: at least {sent} published, {len(nats_got)} recorded")
ok = ok and sent > 0 and len(nats_got) >= sent
errors = sum(1 for l in open(os.path.join(work, "node.log")) if " ERROR " in l)
print(f"  node log errors: {errors}; client errors: {client}; load processes that died: {dead}")
ok = ok and errors == 0 and client == 0 and dead == 0
if len(rss) >= 4:
    q = len(rss) // 4
    second, last = rss[q:2 * q], rss[-q:]
    m2, m4 = sum(second) / len(second), sum(last) / len(last)
    change = (m4 - m2) / m2 * 100
    flat = abs(change) <= tol
    print(f"  RSS: min {min(rss) / 1024:.1f} MiB, max {max(rss) / 1024:.1f} MiB; second quarter mean "
          f"{m2 / 1024:.1f} MiB, last quarter mean {m4 / 1024:.1f} MiB ({change:+.1f} %, "
          f"tolerance {tol:.0f} %): {'flat' if flat else 'NOT FLAT'}")
    ok = ok and flat
else:
    print("  RSS: too few samples for a trend (run at least 4 intervals)")
    ok = False
print("SOAK PASS" if ok else "SOAK FAIL")
sys.exit(0 if ok else 1)
PY
