#!/bin/bash
# Which squashfs compressor and block size should berth write? For the
# Debian bookworm + python3 image (bench/pull.sh builds and pushes it), for
# each setting: pull time, image size, the first `python3 -c pass` after the
# image is mounted (cold FUSE cache: decompression paid), and warm runs.
#
#   sudo bench/squashfs-settings.sh [--runs N]
#
# Runs berth as the unprivileged test user; writes a markdown table to stdout
# and bench/results/squashfs-settings-TIME.csv.
set -Eeuo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# berth and the helpers run as the unprivileged user: work from /, not
# from the caller's directory (a clone under a 0700 directory, say).
cd /
BENCH_NAME=squashfs-settings.sh
# log, die and the option parsing (this script keeps its own WORK and user)
# shellcheck source=bench/lib/common.sh
source "$HERE/lib/common.sh"
RUNS=10
SMOKE=0
usage() { sed -n 2,10p "$HERE/squashfs-settings.sh"; }
bench_options --runs=RUNS --smoke:SMOKE=1 -- "$@"
if ((SMOKE)); then RUNS=2; fi
bench_int --runs "$RUNS"
WORK=${BERTH_BENCH_DIR:-/var/tmp/berth-bench}
REF=${BERTH_BENCH_IMAGE:-127.0.0.1:5000/bench/debian-python:bookworm}
USER_NAME=${BERTH_BENCH_USER:-berthtest}
bench_start "it switches to $USER_NAME"
# The image comes from bench/pull.sh (which builds and pushes it when missing).
if [[ $(curl -s -o /dev/null -w '%{http_code}' "http://${REF%%/*}/v2/${REF#*/}" | head -c3) != 200 ]] \
    && ! curl -sf -o /dev/null -H 'Accept: application/vnd.oci.image.manifest.v1+json' \
        "http://${REF%%/*}/v2/$(echo "${REF#*/}" | sed 's/:/\/manifests\//')"; then
    echo "squashfs-settings.sh: $REF missing: running bench/pull.sh --smoke --tools berth to build and push it" >&2
    "$HERE/pull.sh" --smoke --tools berth > /dev/null
fi
BIN=$WORK/bin/berth-settings
install -d -m 0755 "$WORK/bin" "$HERE/results"
install -m 0755 "${BERTH_BENCH_BIN_DIR:-$HERE/../target/release}/berth" "$BIN"
RUN=$WORK/settings
rm -rf "$RUN"; install -d -m 0755 -o "$USER_NAME" -g "$USER_NAME" "$RUN"

# The unprivileged user, with a clean environment (an argv prefix, so the
# timing helper below can run it).
AS_USER=(setpriv --reuid="$USER_NAME" --regid="$USER_NAME" --init-groups
    env -i HOME="$RUN" PATH=/usr/local/bin:/usr/bin:/bin XDG_RUNTIME_DIR="$RUN/rt"
    BERTH_SYSTEM_CONFIG="$RUN/site.toml" BERTH_STORE="$RUN/store" BERTH_KEEPER_IDLE=1)
as_user() { "${AS_USER[@]}" "$@"; }
ms() { python3 -c 'import sys,time; t=time.perf_counter(); import subprocess; subprocess.run(sys.argv[1:], check=True, stdout=subprocess.DEVNULL); print(f"{(time.perf_counter()-t)*1000:.1f}")' "$@"; }
median() { sort -n | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }

STAMP=$(date -u +%Y%m%dT%H%M%SZ)
CSV=$HERE/results/squashfs-settings-$STAMP.csv
echo "setting,pull_s,size_mb,first_python_ms,warm_python_ms" > "$CSV"
printf '| setting | pull s | size MB | first python3 -c pass ms | warm ms (median of %s) |\n|---|---:|---:|---:|---:|\n' "$RUNS"
for setting in zstd:3:131072 zstd:3:65536 zstd:1:131072 lz4::131072 gzip:6:131072 gzip:6:65536; do
    IFS=: read -r comp level bs <<< "$setting"
    as_user rm -rf "$RUN/store" "$RUN/rt"
    as_user install -d -m 0700 "$RUN/rt"
    { echo "[squashfs]"; echo "compressor = \"$comp\""; echo "block_size = $bs"; [[ -n $level ]] && echo "level = $level"; } > "$RUN/site.toml"
    pull=$(ms "${AS_USER[@]}" "$BIN" pull -q --tls-verify=false "$REF")
    size=$(as_user "$BIN" inspect "$REF" | python3 -c 'import json,sys; print(round(json.load(sys.stdin)["squashfs"]["size"]/1e6,1))')
    # First run: the keeper mounts afresh, FUSE's page cache is empty.
    first=$(ms "${AS_USER[@]}" "$BIN" run "$REF" python3 -c pass)
    warm=$(for _ in $(seq "$RUNS"); do ms "${AS_USER[@]}" "$BIN" run "$REF" python3 -c pass; done | median)
    sleep 2   # let the keeper go (idle 1 s) before the next setting
    echo "$setting,$(awk "BEGIN{print $pull/1000}"),$size,$first,$warm" >> "$CSV"
    printf '| %s | %.2f | %s | %s | %s |\n' "$setting" "$(awk "BEGIN{print $pull/1000}")" "$size" "$first" "$warm"
done
# The same as JSON, with what it was measured on, for the report.
python3 - "$CSV" "${CSV%.csv}.json" <<PY
import csv, json, os, platform, sys
rows = [{"setting": r["setting"], "pull_s": float(r["pull_s"]), "size_mb": float(r["size_mb"]),
         "first_python_ms": float(r["first_python_ms"]), "warm_python_ms": float(r["warm_python_ms"])}
        for r in csv.DictReader(open(sys.argv[1]))]
json.dump({"benchmark": "squashfs-settings", "time_utc": "$STAMP", "smoke": bool($SMOKE),
           "image": "$REF", "warm_runs": $RUNS,
           "host": {"kernel": platform.release(), "cpus": os.cpu_count()},
           "berth": {"version": "$("$BIN" --version 2>/dev/null | head -1)"},
           "rows": rows}, open(sys.argv[2], "w"), indent=1)
PY
echo
echo "CSV: $CSV"
