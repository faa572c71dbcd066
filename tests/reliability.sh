#!/bin/bash
# The longer reliability run (docs/reliability.md): the reliability tests
# at full size, one at a time, with their figures:
#
#   sudo bash tests/reliability.sh [--kills N] [--runs N] [--seed S]
#
# (defaults 100 kills, 1,000 sequential runs; CI runs the same tests at
# 20 and 200). It sets up like tests/run.sh, builds, runs
#   reliability_faults   pulls through the fault-injecting proxy
#   reliability_crash    SIGKILL of pulls and imports at random moments
#   reliability_load     64 runs at once, N in a row, leak checks
#   runtime_shared       64 tasks joining one shared container
# then every fuzz target for FUZZ_SECONDS (default 300) each, and prints
# the figures (timings, seeds, kills that landed mid-way, executions per
# fuzz target); the log is kept in target/reliability-<UTC>.log.
set -Eeuo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
KILLS=100
RUNS=1000
SEED=
while (($#)); do
    case $1 in
        --kills) KILLS=$2; shift 2 ;;
        --runs) RUNS=$2; shift 2 ;;
        --seed) SEED=$2; shift 2 ;;
        -h|--help) sed -n 2,14p "$0"; exit 0 ;;
        *) echo "reliability.sh: unknown option $1" >&2; exit 2 ;;
    esac
done
[[ $(id -u) == 0 ]] || { echo "reliability.sh: run as root (the set-up needs it; berth runs unprivileged)" >&2; exit 1; }
bash tests/setup/setup.sh > /dev/null
trap 'bash tests/setup/teardown.sh >/dev/null 2>&1 || true' EXIT
cargo build --workspace --locked -q
LOG=target/reliability-$(date -u +%Y%m%dT%H%M%SZ).log
t0=$SECONDS
BERTH_IT_REQUIRED=1 BERTH_RELIABILITY_KILLS=$KILLS BERTH_RELIABILITY_RUNS=$RUNS \
    ${SEED:+BERTH_RELIABILITY_SEED=$SEED} \
    cargo test -p berth --test it --locked -- --test-threads=1 --nocapture \
    reliability_ runtime_shared 2>&1 | tee "$LOG" | grep -E '^(test |crash loop|undisturbed|[0-9]+ (of|runs)|64 runs|status|reset|truncate|stall|auth401)' || true
status=${PIPESTATUS[0]}
echo "reliability.sh: $((SECONDS - t0)) s; log in $LOG"
echo "== fuzz targets, ${FUZZ_SECONDS:-300} s each (tests/fuzz.sh)"
bash tests/fuzz.sh --seconds "${FUZZ_SECONDS:-300}" | tee -a "$LOG" || status=1
grep -q '^test result: ok' "$LOG" && ! grep -q 'FAILED' "$LOG" || status=1
exit "$status"
