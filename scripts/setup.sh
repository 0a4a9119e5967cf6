#!/usr/bin/env bash
# Installs what faultline builds and tests against, when it is missing: the Hyperscan library
# (Debian's libhyperscan-dev; libvectorscan-dev on arm64) and the tools the tests start for real
# (Prometheus and promtool, Alertmanager, headless Chromium for the pages, kcat, OpenSSL).
# With CI set (CI=true, as .ci/run runs), also the cargo tools that scripts/test.sh and .ci/run
# use where present (cargo-deny, cargo-fuzz), so a fresh CI machine checks what a developer's
# does; a developer installs them once with the same `cargo install --locked` line.
# Idempotent and quiet when everything is present. Needs root (or sudo) only to install.
set -euo pipefail

need=()
have_pkg() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }

case "$(uname -m)" in
  x86_64|amd64) hs=libhyperscan-dev ;;
  *) hs=libvectorscan-dev ;;
esac
for pkg in "$hs" pkg-config gcc g++ make ripgrep prometheus prometheus-alertmanager chromium libssl-dev libzstd-dev zlib1g-dev kcat openssl python3; do
  have_pkg "$pkg" || need+=("$pkg")
done
for pkg in ${FAULTLINE_EXTRA_PACKAGES:-}; do
  have_pkg "$pkg" || need+=("$pkg")
done

if ((${#need[@]})); then
  echo "setup: installing ${need[*]}" >&2
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

if ! command -v cargo >/dev/null 2>&1; then
  echo "setup: cargo is missing; install a Rust toolchain >= 1.88 (https://rustup.rs) and rerun" >&2
  exit 1
fi

# The cargo tools, from crates.io with their own lock files (--locked): about 8 minutes for
# both on 2 cores, once per machine (docs/development.md).
if [ -n "${CI:-}" ] && [ "${CI}" != "false" ] && [ "${CI}" != "0" ]; then
  for tool in deny fuzz; do
    if ! cargo "$tool" --version >/dev/null 2>&1; then
      echo "setup: installing cargo-$tool (cargo install --locked)" >&2
      cargo install --locked --quiet "cargo-$tool"
    fi
  done
fi
