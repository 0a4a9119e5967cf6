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
if cargo deny --version >/dev/null 2>&1; then
  echo "== cargo deny (licenses, bans, sources)"
  cargo deny --locked check licenses bans sources
else
  echo "== cargo deny: not installed, skipped (cargo install cargo-deny --locked)"
fi
echo "== cargo test"
cargo test --locked --all-targets
# The KB's generated blocks are current with their tables (tools/enumerations/README.md), and
# every DCGM failure reason the table maps is recognised by its entry (the binary cargo test built).
echo "== KB enumeration tables"
python3 tools/enumerations/gen_wrappers.py --check
python3 tools/enumerations/gen_signals.py --check
python3 tools/enumerations/gen_errno.py --check
python3 tools/enumerations/gen_object_store.py --check
python3 tools/enumerations/gen_k8s_reasons.py --check
python3 tools/enumerations/gen_wc_status.py --check
python3 tools/enumerations/gen_commands.py --check
python3 tools/enumerations/gen_optix.py --check
python3 tools/enumerations/dcgm_failure_reasons.py --check --faultline target/debug/faultline
