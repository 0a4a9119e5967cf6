#!/usr/bin/env bash
# The README's run command: builds faultline and diagnoses the shipped sample job logs.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
cargo build --release --locked --quiet
exec target/release/faultline scan --format text examples/ "$@"
