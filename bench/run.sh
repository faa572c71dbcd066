#!/bin/bash
# Every benchmark of berth against its peers, in one command:
#
#   sudo bench/run.sh [--only pull,start,settings,pynamic,fileaccess,ranks] [--smoke]
#
# Each benchmark installs or finds its peers, builds the images it needs
# (registry on loopback) and writes JSON/CSV to bench/results/ plus a
# markdown table on stdout; this script runs them in turn and collects the
# tables in bench/results/summary-TIME.md. --smoke runs one short round of
# each (what CI can afford). Needs a release build:
#   cargo build --release -p berth -p berth-latencyfs
set -Eeuo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ALL=(pull start settings pynamic fileaccess ranks)
ONLY=("${ALL[@]}")
SMOKE=()
while (($#)); do
    case $1 in
        --only) IFS=, read -r -a ONLY <<< "$2"; shift 2 ;;
        --smoke) SMOKE=(--smoke); shift ;;
        -h|--help) sed -n 2,12p "$0"; exit 0 ;;
        *) echo "run.sh: unknown option $1" >&2; exit 2 ;;
    esac
done
[[ $(id -u) == 0 ]] || { echo "run.sh: run as root (the benchmarks set up users, registries and mounts)" >&2; exit 1; }
script_of() {
    case $1 in
        pull) echo pull.sh ;; start) echo start.sh ;; settings) echo squashfs-settings.sh ;;
        pynamic) echo pynamic.sh ;; fileaccess) echo fileaccess.sh ;; ranks) echo ranks.sh ;;
        *) return 1 ;;
    esac
}
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
    if ! "$HERE/$s" "${SMOKE[@]}" | tee -a "$SUMMARY"; then
        failed+=("$b")
        echo "(failed)" >> "$SUMMARY"
    fi
done
echo "run.sh: summary in $SUMMARY" >&2
((${#failed[@]} == 0)) || { echo "run.sh: failed: ${failed[*]}" >&2; exit 1; }
