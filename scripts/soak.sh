#!/usr/bin/env bash
# A soak under faults: `faultline run` for MINUTES minutes (default 30) with incidents, a webhook
# and Alertmanager, and a report that fails (exit 1) when a check fails.
#
#   scripts/soak.sh 30            # the issue's run: 30 minutes
#   scripts/soak.sh 2             # what CI runs
#   SOAK_RELEASE=1 scripts/soak.sh 10
#
# What runs: librdkafka's mock broker (faultline-mock-broker, its own process), two faultline
# members in one consumer group reading a 64-partition topic, each with [incidents], a [webhook]
# to a slow receiver (every request answered after 0.3 s) and [alertmanager] to a receiver that
# refuses everything (503), so alerts go to the dead-letter topic (alert_undeliverable).
#
# Load: first a calibration: one member alone through a 200,000-record backlog measures the
# maximum (records/s); the soak then produces steadily at half of it (SOAK_LOAD_FRACTION),
# capped so that the mock broker, which keeps 5 MiB per partition, still holds what a member
# may read again from a held commit: the quiet period (10 s), an outage and a recovery (130 s
# at 30 minutes; the report says which limit applied). Records the broker dropped before they
# were read would be lost: faultline logs that at ERROR (faultline_consumer_offset_resets_total)
# and the report's checks fail. Noise lines that match nothing, plus a failing job every 2 s: a CUDA OOM on rank 3
# and a NCCL watchdog timeout on rank 5, one incident each.
#
# Faults, on the issue's 30-minute schedule: a KB change every minute (an entry appears or goes;
# the members reload it), the broker down for 30 s every 5 minutes, member B SIGKILLed and
# restarted every 3 minutes. A shorter run scales the intervals by MINUTES/30 with floors
# (reload >= 10 s, broker >= 40 s, kill >= 30 s; broker down a tenth of its interval, 5 to 30 s),
# so 2 minutes gives reloads every 10 s, the broker down 5 s at 40 s and 80 s, kills at 30, 60
# and 90 s; 10 minutes gives 20 s, 100 s and 60 s.
#
# Checks (the report prints each): every matching line of every failing job has its event on
# the events topic (at least once; duplicates are counted, not failed); one incident per
# failing job (distinct fingerprints and jobs), each resolved, each ticketed at the slow
# receiver when ticketed, each with its alerts dead-lettered; the RSS of the member never killed, sampled
# every second after a warm-up (a third of the run, or the first cycle of every fault and 15 s
# more if longer): max/min <= 1.2 (SOAK_RSS_RATIO) in runs of 10 minutes or more, under 320 MiB
# (SOAK_RSS_MAX_MIB) in shorter ones, which end before the working set is reached; no panic (faultline_panics_total, and stderr); after every fault the lag of
# all partitions back to <= 2 s of load within 90 s (SOAK_RECOVERY_S), and to 0 once the load
# stops; KB reloads without failure; both members stop with exit 0 on SIGTERM.
#
# Needs kcat and python3. Builds the binaries (debug, or release with SOAK_RELEASE=1) unless
# SOAK_NO_BUILD=1. Settings: SOAK_OUT (soak-out/: logs, configs), CARGO_TARGET_DIR (target),
# SOAK_PARTITIONS (64), SOAK_CALIBRATION_RECORDS (200000), SOAK_KB (kb).
set -euo pipefail
cd "$(dirname "$0")/.."
MINUTES=${1:-30}
[[ $MINUTES =~ ^[0-9]+(\.[0-9]+)?$ ]] || { echo "usage: scripts/soak.sh MINUTES" >&2; exit 2; }
TARGET=${CARGO_TARGET_DIR:-target}
PROFILE=debug
FLAGS=()
if [[ ${SOAK_RELEASE:-0} == 1 ]]; then PROFILE=release; FLAGS=(--release); fi
if [[ ${SOAK_NO_BUILD:-0} != 1 ]]; then
    cargo build --locked "${FLAGS[@]}" --bins >&2
fi
for tool in kcat python3; do
    command -v "$tool" >/dev/null || { echo "soak: $tool is required" >&2; exit 2; }
done
export SOAK_BIN=$TARGET/$PROFILE SOAK_MINUTES=$MINUTES SOAK_OUT=${SOAK_OUT:-soak-out}
rm -rf "$SOAK_OUT"
exec python3 scripts/soak.py
