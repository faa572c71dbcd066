#!/bin/bash
# The seeds' Pynamic study: Python start-up from thousands of shared
# libraries on a (simulated) parallel filesystem, natively versus from one
# berth image file on the same filesystem.
#
#   sudo bench/pynamic.sh [--delays-us "0 200 500 1000"] [--ranks "1 8"] [--smoke]
#
# latencyfs (tools/latencyfs) serves a backing directory with a fixed
# latency per metadata request, optionally one request at a time (a
# saturated metadata server), and counts requests. The backing directory
# holds the Pynamic-like tree (bench/pynamic/generate.py) for the native
# runs and a berth store whose image has the same tree at /opt/pynamic.
# Each configuration starts cold for berth (no keeper, no node-local image
# record), so the mount's requests are counted; ranks start at once, like
# MPI ranks on a node. Results: bench/results/pynamic-TIME.json and a
# markdown table on stdout.
set -Eeuo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
# berth and the helpers run as the unprivileged user: work from /, not
# from the caller's directory (a clone under a 0700 directory, say).
cd /
BENCH_NAME=pynamic.sh
# log, die and the option parsing (this script keeps its own WORK and user)
# shellcheck source=bench/lib/common.sh
source "$HERE/lib/common.sh"
DELAYS="0 200 500 1000"
RANKS="1 8"
MODULES=300 FUNCTIONS=100 UTILS=100
SMOKE=0
usage() { sed -n 2,16p "$HERE/pynamic.sh"; }
bench_options --delays-us=DELAYS --ranks=RANKS --smoke:SMOKE=1 -- "$@"
if ((SMOKE)); then DELAYS="0 500"; RANKS="1 2"; MODULES=20 FUNCTIONS=5 UTILS=5; fi
bench_start "it mounts latencyfs, runs the tests as berthtest"

USER_NAME=${BERTH_BENCH_USER:-berthtest}
id "$USER_NAME" >/dev/null 2>&1 || die "user $USER_NAME missing: run tests/setup/setup.sh or bench/pull.sh first"
WORK=${BERTH_BENCH_DIR:-/var/tmp/berth-bench}/pynamic-$MODULES-$FUNCTIONS-$UTILS
BASE_LAYOUT=${BERTH_BENCH_BASE:-/var/tmp/berth-bench/oci}   # bench/pull.sh's Debian + python3 layout
if [[ ! -e $BASE_LAYOUT/index.json ]]; then
    log "no base image at $BASE_LAYOUT: running bench/pull.sh --smoke --tools berth to build it"
    "$HERE/pull.sh" --smoke --tools berth > /dev/null
fi
[[ -e $BASE_LAYOUT/index.json ]] || die "no base image at $BASE_LAYOUT"
for t in umoci gcc /usr/bin/python3; do command -v "$t" >/dev/null || die "$t missing"; done
BIN_DIR=${BERTH_BENCH_BIN_DIR:-$ROOT/target/release}
[[ -x $BIN_DIR/latencyfs && -x $BIN_DIR/berth ]] \
    || die "no berth and latencyfs in $BIN_DIR: cargo build --release -p berth -p berth-latencyfs"
install -d -m 0755 "$WORK" "$WORK/bin"
install -m 0755 "$BIN_DIR/latencyfs" "$BIN_DIR/berth" "$WORK/bin/"

# 1. The tree and the image.
if [[ ! -e $WORK/tree.done ]]; then
    log "generating $MODULES modules x $FUNCTIONS functions, $UTILS utility libraries"
    rm -rf "$WORK/tree"
    python3 "$HERE/pynamic/generate.py" --modules "$MODULES" --functions "$FUNCTIONS" --utils "$UTILS" --out "$WORK/tree" >&2
    touch "$WORK/tree.done"
fi
BACKING=$WORK/backing
if [[ ! -e $WORK/image.done ]]; then
    log "building the image (Debian + python3 + /opt/pynamic) and the native copy"
    rm -rf "$BACKING" "$WORK/oci"
    install -d -m 0755 "$BACKING" "$BACKING/native"
    cp -a "$WORK/tree" "$BACKING/native/pynamic"
    cp -a "$BASE_LAYOUT" "$WORK/oci"
    tag=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["manifests"][0]["annotations"]["org.opencontainers.image.ref.name"])' "$WORK/oci/index.json")
    (cd "$WORK" && rm -rf layer && mkdir -p layer/opt && cp -a tree layer/opt/pynamic && tar --numeric-owner -C layer -cf layer.tar opt)
    umoci raw add-layer --image "$WORK/oci:$tag" "$WORK/layer.tar"
    rm -rf "$WORK/layer" "$WORK/layer.tar"
    install -d -m 0755 -o "$USER_NAME" -g "$USER_NAME" "$BACKING/store"
    chmod -R a+rX "$WORK/oci" "$BACKING/native"
    setpriv --reuid="$USER_NAME" --regid="$USER_NAME" --init-groups env -i PATH=/usr/bin:/bin HOME="$WORK" \
        "$WORK/bin/berth" --store "$BACKING/store" import -q "oci:$WORK/oci:$tag" pynamic > "$WORK/image.id"
    touch "$WORK/image.done"
fi
IMAGE_ID=$(cat "$WORK/image.id")
FILES=$(find "$WORK/tree" -type f | wc -l)

PFS=$WORK/pfs
RT=$WORK/rt   # the test user's node-local runtime directory (keepers, image records)
install -d -m 0755 "$PFS"
as_user() {
    setpriv --reuid="$USER_NAME" --regid="$USER_NAME" --init-groups env -i PATH=/usr/bin:/bin \
        HOME="$WORK" XDG_RUNTIME_DIR="$RT" BERTH_STORE="$PFS/store" BERTH_KEEPER_IDLE=1 \
        BERTH_SYSTEM_CONFIG=/dev/null "$@"
}
counts() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["metadata_total"])' "$WORK/stats.json"; }
unmount() { umount "$PFS" 2>/dev/null || umount -l "$PFS" 2>/dev/null || true; }
trap 'unmount; [[ -n ${FS_PID:-} ]] && kill "$FS_PID" 2>/dev/null || true' EXIT

# ranks R CMD...: R copies at once; prints wall seconds; fails if one fails.
ranks() {
    local r=$1; shift
    python3 - "$r" "$@" <<'PY'
import subprocess, sys, time
r = int(sys.argv[1]); cmd = sys.argv[2:]
t = time.perf_counter()
ps = [subprocess.Popen(cmd, stdout=subprocess.DEVNULL) for _ in range(r)]
rc = [p.wait() for p in ps]
print(f"{time.perf_counter() - t:.3f}")
sys.exit(1 if any(rc) else 0)
PY
}

STAMP=$(date -u +%Y%m%dT%H%M%SZ)
OUT=$ROOT/bench/results/pynamic-$STAMP.json
ROWS=$WORK/rows.jsonl
LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
install -d "$ROOT/bench/results"
: > "$ROWS"
printf '| delay us | metadata server | ranks | native s | berth image s | native/berth | native requests | berth requests |\n|---:|---|---:|---:|---:|---:|---:|---:|\n'
for delay in $DELAYS; do
    for serial in 0 1; do
        ((delay == 0 && serial == 1)) && continue
        unmount
        "$WORK/bin/latencyfs" "$BACKING" "$PFS" --delay-us "$delay" --max-concurrent "$serial" \
            --threads 16 --stats "$WORK/stats.json" 2>"$WORK/latencyfs.log" &
        FS_PID=$!
        for _ in $(seq 100); do mountpoint -q "$PFS" && [[ -s $WORK/stats.json ]] && break; sleep 0.05; done
        mountpoint -q "$PFS" || die "latencyfs did not mount: $(cat "$WORK/latencyfs.log")"
        mode=$([[ $serial == 1 ]] && echo serialised || echo unlimited)
        for r in $RANKS; do
            # Warm the page cache of both forms once (the study is about
            # metadata, not first reads from disk).
            as_user /usr/bin/python3 "$PFS/native/pynamic/driver.py" >/dev/null
            rm -rf "$RT"; install -d -m 0700 -o "$USER_NAME" -g "$USER_NAME" "$RT"
            as_user "$WORK/bin/berth" run "$IMAGE_ID" python3 /opt/pynamic/driver.py >/dev/null
            sleep 2.5   # the keeper leaves (idle 1 s)
            rm -rf "$RT"; install -d -m 0700 -o "$USER_NAME" -g "$USER_NAME" "$RT"
            sleep 0.3
            c0=$(counts)
            native=$(ranks "$r" setpriv --reuid="$USER_NAME" --regid="$USER_NAME" --init-groups env -i PATH=/usr/bin:/bin /usr/bin/python3 "$PFS/native/pynamic/driver.py")
            sleep 0.3
            c1=$(counts)
            image=$(ranks "$r" setpriv --reuid="$USER_NAME" --regid="$USER_NAME" --init-groups env -i PATH=/usr/bin:/bin \
                HOME="$WORK" XDG_RUNTIME_DIR="$RT" BERTH_STORE="$PFS/store" BERTH_KEEPER_IDLE=1 BERTH_SYSTEM_CONFIG=/dev/null \
                "$WORK/bin/berth" run "$IMAGE_ID" python3 /opt/pynamic/driver.py)
            sleep 0.3
            c2=$(counts)
            sleep 2.5
            nreq=$((c1 - c0)); breq=$((c2 - c1))
            speed=$(awk "BEGIN{printf \"%.2f\", $native/$image}")
            printf '| %s | %s | %s | %s | %s | %s | %s | %s |\n' "$delay" "$mode" "$r" "$native" "$image" "$speed" "$nreq" "$breq"
            printf '{"delay_us":%s,"metadata_server":"%s","ranks":%s,"native_s":%s,"berth_s":%s,"native_requests":%s,"berth_requests":%s}\n' \
                "$delay" "$mode" "$r" "$native" "$image" "$nreq" "$breq" >> "$ROWS"
        done
        unmount
        kill "$FS_PID" 2>/dev/null || true; wait "$FS_PID" 2>/dev/null || true; FS_PID=
    done
done
# The rows with what they were measured on.
python3 - "$ROWS" "$OUT" <<PY
import json, os, platform, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
meta = {
    "benchmark": "pynamic",
    "time_utc": "$STAMP",
    "smoke": bool($SMOKE),
    "tree": {"files": $FILES, "modules": $MODULES, "functions": $FUNCTIONS, "utils": $UTILS},
    "host": {
        "kernel": platform.release(),
        "cpus": os.cpu_count(),
        "loadavg_before": "$LOAD_BEFORE",
        "loadavg_after": " ".join(open("/proc/loadavg").read().split()[:3]),
    },
    "berth": {"version": "$("$WORK/bin/berth" --version 2>/dev/null | head -1)"},
    "versions": {"python3": platform.python_version(), "latencyfs": "tools/latencyfs"},
    "rows": rows,
}
json.dump(meta, open(sys.argv[2], "w"), indent=1)
PY
log "results: $OUT"
