#!/usr/bin/env bash
# Type-checks the cargo-fuzz crate in fuzz/ on the stable toolchain (no
# cargo-fuzz or nightly needed), so that its targets cannot rot unnoticed.
# The targets' bodies live in the main crate (`liftbridge::fuzz`) and are
# run by its tests; this checks the thin wrappers and the crate's manifest.
# Shares the main target directory, so only the wrappers and libfuzzer-sys
# are new work once the main crate has been checked.
# Usage: scripts/check-fuzz.sh
set -euo pipefail
cd "$(dirname "$0")/.."
CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$PWD/target}" \
  cargo check --manifest-path fuzz/Cargo.toml --bins "$@"
