#!/usr/bin/env bash
# Runs every test on a fresh Debian machine of this project's kind.
# Installs what the tests need (Debian packages, a Python venv, the npm
# packages of the browser and WebSocket tests), builds the crate, runs the
# Rust tests, then the Python interop tests, the Node WebSocket test and the
# web UI test in headless Chromium against the built binary.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

apt_pkgs=(nats-server prometheus)
# Headless Chromium for the web UI's browser test (tests/ui).
apt_pkgs+=(chromium)
# The IANA time zones of JWT users' connect windows (tests/it/nats_jwt.rs).
apt_pkgs+=(tzdata)
# jemalloc (the default allocator) is built from source with make and gcc.
apt_pkgs+=(make gcc)
# Node.js and npm run that test; the machine image normally has them.
command -v node >/dev/null 2>&1 || apt_pkgs+=(nodejs npm)
missing=()
for p in "${apt_pkgs[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ]; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
  else
    echo "missing Debian packages: ${missing[*]} (run as root to install)" >&2
    exit 1
  fi
fi

venv="$root/.venv"
if [ ! -x "$venv/bin/pip" ]; then
  python3 -m venv --clear "$venv"
fi
"$venv/bin/pip" install -q -r tests/py/requirements.txt

cargo build --bins
RUST_TEST_THREADS=2 cargo test --lib --bins --tests

export LIFTBRIDGE_BIN="$root/target/debug/liftbridge"
"$venv/bin/python" -m pytest -q tests/py

# NATS over WebSocket with the official nats.ws client, against the built
# binary and Go nats-server 2.15.1 from the venv.
npm ci --prefix tests/ws --no-audit --no-fund --loglevel=error
node --test tests/ws/ws.test.mjs

# The web UI in headless Chromium against the built binary.
npm ci --prefix tests/ui --no-audit --no-fund --loglevel=error
node --test tests/ui/ui.test.mjs
