#!/usr/bin/env bash
# The README's run command: builds faultline and runs its main job, the Kafka pipeline, on an
# embedded Kafka-protocol broker fed with the sample job logs of examples/: no Kafka needed.
# Extra arguments go to `faultline demo` (for example --follow).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
cargo build --release --locked --quiet
exec target/release/faultline demo "$@"
