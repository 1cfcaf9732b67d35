#!/usr/bin/env bash
# Runs async-nats's own client integration tests (crate source from the
# cargo registry, version below) against the binary under test, launched as
# `nats-server` from PATH through our launcher crate in harness/.
#
#   scripts/compat-async-nats/run.sh                 # against target/debug/liftbridge
#   NATS_SERVER_BIN=/usr/sbin/nats-server scripts/compat-async-nats/run.sh   # reference
#
# Extra arguments go to the test binary (e.g. a test name filter);
# ASYNC_NATS_TESTS overrides the list of suites.
# Known: connect_domain connects to the public demo.nats.io (no server of
# ours is involved): it fails on a machine without internet access.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
version=0.38.0
# The suites that need no extra dev-dependencies.
tests="${ASYNC_NATS_TESTS:-client_tests nkey_tests jwt_tests}"
bin="${NATS_SERVER_BIN:-$root/target/debug/liftbridge}"
[ "${NATS_SERVER_BIN:-}" ] || (cd "$root" && cargo build --bins)

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/tests" "$work/path" "$work/src"
echo "//! Empty: only the copied integration tests are built." > "$work/src/lib.rs"
cp -r "$here/harness" "$work/harness"
cat > "$work/Cargo.toml" <<TOML
[package]
name = "async-nats-compat-run"
version = "0.0.0"
edition = "2021"
publish = false

[dev-dependencies]
async-nats = "=$version"
bytes = "1"
futures = "0.3"
tokio = { version = "1", features = ["full"] }
nkeys = "0.4"
nats-server = { path = "harness" }

[profile.dev.package."*"]
opt-level = 1
TOML
cd "$work"
# Same dependency versions as the project (reuses its compiled artifacts).
cp "$root/Cargo.lock" .
cargo fetch -q
src="$(dirname "$(cargo metadata --format-version 1 -q | python3 -c '
import json, sys
m = json.load(sys.stdin)
print(next(p["manifest_path"] for p in m["packages"] if p["name"] == "async-nats"))')")"
for t in $tests; do cp "$src/tests/$t.rs" tests/; done
cp -r "$src/tests/configs" tests/
ln -s "$bin" path/nats-server
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$root/target/compat-async-nats}"
targets=()
for t in $tests; do targets+=(--test "$t"); done
cargo test --no-run -q "${targets[@]}"
PATH="$work/path:$PATH" cargo test -q --no-fail-fast "${targets[@]}" -- --test-threads=2 "$@"
