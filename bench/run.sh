#!/bin/bash
# Every benchmark of berth against its peers, in one command:
#
#   sudo bench/run.sh [--only pull,start,settings,pynamic,fileaccess,ranks,inject,mpi,slurm,build,save,layers]
#                     [--smoke] [--bin-dir DIR] [--no-report]
#
# Builds berth, latencyfs and bench-report (cargo build --release) unless
# --bin-dir names a directory that has them. Each benchmark installs or
# finds its peers, builds the images it needs (registry on loopback) and
# writes JSON/CSV to bench/results/ plus a markdown table on stdout; this
# script runs them in turn, collects the tables in
# bench/results/summary-TIME.md, and then generates docs/benchmarks.md and
# docs/charts/*.svg from the newest full results (bench-report). --smoke
# runs one short round of each (what CI can afford) and writes its report
# to bench/results/smoke-report/ instead of docs/.
set -Eeuo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ALL=(pull start settings pynamic fileaccess ranks inject mpi slurm build save layers)
ONLY=("${ALL[@]}")
SMOKE=()
BIN_DIR=
REPORT=1
while (($#)); do
    case $1 in
        --only) IFS=, read -r -a ONLY <<< "$2"; shift 2 ;;
        --smoke) SMOKE=(--smoke); shift ;;
        --bin-dir) BIN_DIR=$(cd "$2" && pwd); shift 2 ;;
        --no-report) REPORT=0; shift ;;
        -h|--help) sed -n 2,15p "$0"; exit 0 ;;
        *) echo "run.sh: unknown option $1" >&2; exit 2 ;;
    esac
done
[[ $(id -u) == 0 ]] || { echo "run.sh: run as root (the benchmarks set up users, registries and mounts)" >&2; exit 1; }
script_of() {
    case $1 in
        pull) echo pull.sh ;; start) echo start.sh ;; settings) echo squashfs-settings.sh ;;
        pynamic) echo pynamic.sh ;; fileaccess) echo fileaccess.sh ;; ranks) echo ranks.sh ;;
        inject) echo inject.sh ;; mpi) echo mpi.sh ;; slurm) echo slurm.sh ;; build) echo build.sh ;;
        save) echo save.sh ;;
        layers) echo layers.sh ;;
        *) return 1 ;;
    esac
}
ROOT=$(cd "$HERE/.." && pwd)
if [[ -z $BIN_DIR ]]; then
    echo "run.sh: cargo build --release (berth, its SPANK plugin, latencyfs, bench-report)" >&2
    (cd "$ROOT" && cargo build --release --locked -q -p berth -p berth-slurm -p berth-latencyfs -p berth-bench-report) \
        || { echo "run.sh: the release build failed" >&2; exit 1; }
    BIN_DIR=$ROOT/target/release
fi
for b in berth latencyfs bench-report; do
    [[ -x $BIN_DIR/$b ]] || { echo "run.sh: no $b in $BIN_DIR (cargo build -p berth -p berth-latencyfs -p berth-bench-report)" >&2; exit 1; }
done
export BERTH_BENCH_BIN_DIR=$BIN_DIR
mkdir -p "$HERE/results"
SUMMARY=$HERE/results/summary-$(date -u +%Y%m%dT%H%M%SZ).md
{
    echo "# berth benchmarks, $(date -u +%Y-%m-%d)"
    echo
    echo "Machine: $(nproc) CPUs, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo), $(. /etc/os-release; echo "$PRETTY_NAME"), kernel $(uname -r)."
    echo "Command: \`sudo bench/run.sh${SMOKE:+ --smoke} --only $(IFS=,; echo "${ONLY[*]}")\`"
} > "$SUMMARY"
failed=()
for b in "${ONLY[@]}"; do
    s=$(script_of "$b") || { echo "run.sh: unknown benchmark $b (one of: ${ALL[*]})" >&2; exit 2; }
    if [[ ! -x $HERE/$s ]]; then
        echo "run.sh: $s is missing; skipped" >&2
        continue
    fi
    echo "== $b ($s ${SMOKE[*]})" >&2
    { echo; echo "## $b"; echo; } >> "$SUMMARY"
    t0=$SECONDS
    if ! "$HERE/$s" "${SMOKE[@]}" | tee -a "$SUMMARY"; then
        failed+=("$b")
        echo "(failed)" >> "$SUMMARY"
    fi
    echo "run.sh: $b took $((SECONDS - t0)) s" >&2
done
echo "run.sh: summary in $SUMMARY" >&2
if ((REPORT)); then
    # The report takes the newest full result of every benchmark, so a
    # partial run (--only) refreshes its sections and keeps the others.
    if ((${#SMOKE[@]})); then
        report=(--allow-smoke --doc "$HERE/results/smoke-report/benchmarks.md" --charts "$HERE/results/smoke-report/charts")
    else
        report=(--doc "$ROOT/docs/benchmarks.md" --charts "$ROOT/docs/charts")
    fi
    "$BIN_DIR/bench-report" --results "$HERE/results" --template "$HERE/report.md.in" \
        "${report[@]}" >&2 || failed+=(report)
fi
((${#failed[@]} == 0)) || { echo "run.sh: failed: ${failed[*]}" >&2; exit 1; }
