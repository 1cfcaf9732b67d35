#!/usr/bin/env bash
# Runs the timing-sensitive integration tests N times in a row each
# (default 50) while two busy loops (`yes > /dev/null`) load the machine,
# and prints the pass count of each. Exit status 0 only if every run of
# every test passed.
# Usage: scripts/stress-timing.sh [N] [TEST...]
#   TEST is a full test name of the `it` binary (module::function); the
#   default list is the slow-consumer, lame-duck, group-eviction and crash
#   tests. STRESS_LOAD=0 runs without the busy loops; STRESS_BIN=path runs
#   an already built `it` test binary instead of building it.
set -euo pipefail
cd "$(dirname "$0")/.."
n=${1:-50}
shift || true
tests=("$@")
if [ ${#tests[@]} -eq 0 ]; then
  tests=(
    nats_core::nats_slow_consumer_closes_only_that_client
    nats_core::nats_lame_duck_mode
    nats_core::nats_lame_duck_without_clients_stops_at_once
    compat_nats_server::compat_nats_server_symlink_lame_duck_via_signal_flag
    api_lifecycle::api_consumer_groups_join_assign_fence_evict
    cluster_crash::cluster_crash_keeps_acked_commands
    store_crash::store_crash_sync_always_keeps_every_ack
    store_crash::store_crash_sync_interval_keeps_every_ack
    store_crash::store_crash_abort_after_journal_write_replays_always
    store_crash::store_crash_abort_after_journal_write_replays_interval
    store_crash::store_crash_abort_during_background_checkpoint_replays_both_journals
  )
fi

# Build once; run the test binary directly (no cargo between runs).
bin=${STRESS_BIN:-}
if [ -z "$bin" ]; then
  bin=$(cargo test --test it --no-run --message-format=json 2>/dev/null \
    | sed -n 's/.*"executable":"\([^"]*\/it-[^"]*\)".*/\1/p' | tail -n1)
fi
if [ -z "$bin" ] || [ ! -x "$bin" ]; then
  echo "stress-timing: could not build the integration test binary" >&2
  exit 2
fi
for t in "${tests[@]}"; do
  listed=$("$bin" --list --exact "$t" 2>/dev/null || true)
  if ! grep -q ": test$" <<< "$listed"; then
    echo "stress-timing: no test named $t" >&2
    exit 2
  fi
done

load=()
stop() { for p in "${load[@]}"; do kill "$p" 2>/dev/null || true; done; }
trap stop EXIT
if [ "${STRESS_LOAD:-1}" != 0 ]; then
  yes > /dev/null & load+=($!)
  yes > /dev/null & load+=($!)
fi

logs=$(mktemp -d /tmp/liftbridge-stress.XXXXXX)
failed=0
echo "stress-timing: $n runs of each of ${#tests[@]} tests, busy loops: ${#load[@]} (failure logs in $logs)"
for t in "${tests[@]}"; do
  pass=0
  start=$(date +%s)
  for i in $(seq 1 "$n"); do
    if "$bin" --exact "$t" --test-threads 1 > "$logs/run.log" 2>&1; then
      pass=$((pass + 1))
    else
      cp "$logs/run.log" "$logs/${t//::/__}.$i.log"
    fi
  done
  [ "$pass" -eq "$n" ] || failed=1
  printf '%-72s %3d/%d passed (%ds)\n' "$t" "$pass" "$n" "$(( $(date +%s) - start ))"
done
rm -f "$logs/run.log"
rmdir "$logs" 2>/dev/null || true
exit "$failed"
