#!/usr/bin/env bash
# The README's test command, and what CI runs (.ci/run): installs what the tests need, then
# formatting, lints and every test.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
echo "== cargo fmt --check"
cargo fmt --all --check
echo "== cargo clippy"
cargo clippy --locked --all-targets --quiet -- -D warnings
echo "== cargo test"
cargo test --locked --all-targets
