#!/usr/bin/env bash
# Runs the replication fault scenarios (tests/it/cluster_replication.rs)
# many rounds at both store.sync policies and prints a summary table:
# scenario, policy, rounds, passed, acknowledged messages checked, failover
# (kill → first ack of a message sent after it) median and max.
#
#   ROUNDS     rounds per scenario and policy (default 20)
#   POLICIES   store.sync policies (default "always interval")
#   SCENARIOS  test-name filter inside cluster_replication:: (default: all)
#   OUT        directory for the raw logs (default target/fault-rounds)
#
# Exits non-zero when any round failed; failed rounds keep their nodes'
# logs under target/tmp/fault-logs/.
set -uo pipefail
cd "$(dirname "$0")/.."

rounds=${ROUNDS:-20}
policies=${POLICIES:-always interval}
filter="cluster_replication::${SCENARIOS:-}"
out=${OUT:-target/fault-rounds}
mkdir -p "$out"

cargo build --tests --bins --lib >/dev/null || exit 1
status=0
lines="$out/rounds.txt"
: >"$lines"
for p in $policies; do
  log="$out/$p.log"
  echo "== store.sync=$p, $rounds round(s) per scenario; log: $log" >&2
  LB_FAULT_ROUNDS=$rounds LB_FAULT_SYNC=$p \
    cargo test --test it "$filter" -- --nocapture --test-threads=1 >"$log" 2>&1 || status=1
  grep '^FAULT-ROUND ' "$log" >>"$lines"
  grep -E '^test .* (ok|FAILED)$' "$log" >&2
done

python3 - "$lines" <<'PY'
import sys, statistics
rows = {}
for line in open(sys.argv[1]):
    kv = dict(f.split("=", 1) for f in line.split()[1:] if "=" in f)
    r = rows.setdefault((kv["scenario"], kv["sync"]), {"rounds": 0, "passed": 0, "acked": 0, "failover": []})
    r["rounds"] += 1
    if kv["result"] == "pass":
        r["passed"] += 1
        r["acked"] += int(kv["acked"])
        if kv.get("failover_ms", "-") != "-":
            r["failover"].append(int(kv["failover_ms"]))
head = f"{'scenario':<18} {'policy':<9} {'rounds':>6} {'passed':>6} {'acked checked':>13} {'failover median':>15} {'failover max':>12}"
print(head)
print("-" * len(head))
for (s, p), r in sorted(rows.items()):
    f = r["failover"]
    med = f"{statistics.median(f):.0f} ms" if f else "-"
    mx = f"{max(f)} ms" if f else "-"
    print(f"{s:<18} {p:<9} {r['rounds']:>6} {r['passed']:>6} {r['acked']:>13} {med:>15} {mx:>12}")
if not rows:
    print("no rounds ran (see the logs)")
PY
exit $status
