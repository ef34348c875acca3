#!/usr/bin/env bash
# Sets up what is missing and runs every test (as root: the emulator mounts FUSE and tests
# ptrace), then format and lint checks.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh

cargo build --quiet --workspace --all-targets
cargo test --workspace -- --test-threads="${KFDQ_TEST_THREADS:-4}"
cargo fmt --all -- --check
cargo clippy --quiet --workspace --all-targets -- -D warnings
echo "test: ok"
