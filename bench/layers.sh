#!/bin/bash
# Many-layer pulls: parallel downloads and the layer cache, berth against
# rootless podman.
#
# The image (tests/setup/many_layers.py) has LAYERS layers, all but the first
# MIB MiB of incompressible data, with two tags: v1, and v2 whose last layer
# is new (a new release of an NGC image shares most of its layers with the
# old one). It is served from the loopback registry through the
# bandwidth-limiting proxy (tests/setup/faultproxy.py --fault throttle: each
# response at RATE MiB/s, as a CDN limits each connection), so that
# downloading several layers at once matters as it does from a real
# registry. Cases, each as the unprivileged user:
#
#   cold    v1 into empty storage:
#             berth         berth pull ([network] max_connections = 8, the default)
#             berth-serial  berth pull with max_connections = 1 (one layer
#                           after another, as berth pulled before)
#             podman        podman pull (containers/image: 6 at a time)
#   update  v2 into storage that holds v1 (pulled untimed, from the
#           registry directly): berth (its layer cache) and podman (its
#           layer store) fetch only the new layer
#   big     an image of one big layer (BIG MiB, over a small base) into
#           empty storage: berth fetches it in parts (range requests on
#           its spare connections), serial berth and podman in one piece
#
# Usage (as root):  bench/layers.sh [--runs N] [--smoke] [--layers N]
#                   [--layer-mib M] [--rate-mib R]     see --help
# Results: bench/results/layers-<UTC time>.json, a markdown table on stdout.
set -Eeuo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO_ROOT=$(cd "$HERE/.." && pwd)
cd /
BENCH_NAME=layers.sh
# shellcheck source-path=SCRIPTDIR source=lib/common.sh
. "$HERE/lib/common.sh"

bench_defaults
RUNS=5
SMOKE=0
LAYERS=8
LAYER_MIB=24
BIG_MIB=192
RATE_MIB=25

usage() {
    cat <<EOF
usage: $0 [options]    (run as root)

  --runs N          measured rounds (default $RUNS)
  --smoke           1 round, 3 layers of 4 MiB and one of 72 MiB (for CI)
  --layers N        layers of the image (default $LAYERS)
  --layer-mib M     MiB of each data layer (default $LAYER_MIB)
  --big-mib M       MiB of the one-big-layer image's layer (default $BIG_MIB)
  --rate-mib R      MiB/s of each connection through the proxy (default $RATE_MIB)
  --berth PATH      berth binary (default target/release/berth)
  --registry H:P    loopback registry (default $REGISTRY)
  --user NAME       unprivileged user (default $BENCH_USER)
  --work-dir DIR    cache and scratch space (default $WORK)
  --results DIR     where the JSON goes (default bench/results)
EOF
}

bench_options --runs=RUNS --smoke:SMOKE=1 --layers=LAYERS --layer-mib=LAYER_MIB \
    --big-mib=BIG_MIB --rate-mib=RATE_MIB common -- "$@"
if ((SMOKE)); then RUNS=1; LAYERS=3; LAYER_MIB=4; BIG_MIB=72; fi
bench_int --runs "$RUNS"
bench_int --layers "$LAYERS"
bench_int --layer-mib "$LAYER_MIB"
bench_int --big-mib "$BIG_MIB"
bench_int --rate-mib "$RATE_MIB"
((LAYERS >= 2)) || die "--layers must be at least 2"

bench_start "it installs packages, builds the image once and switches to user $BENCH_USER"
install_packages podman catatonit uidmap fuse-overlayfs skopeo squashfs-tools-ng \
    docker-registry jq curl python3
bench_user_setup
ensure_registry

# The images, once per shape: many layers, and one big layer.
# image LAYERS MIB: writes and pushes bench/layers-LAYERS-MIB:v1 and :v2.
image() {
    local layout=$WORK/layers-image/$1-$2 tag
    if [[ ! -e $layout/index.json ]]; then
        log "writing the $1-layer image ($2 MiB a layer) to $layout"
        rm -rf "$layout"
        python3 "$REPO_ROOT/tests/setup/many_layers.py" "$layout" "$1" "$2"
    fi
    for tag in v1 v2; do
        skopeo copy --quiet --insecure-policy --dest-tls-verify=false \
            "oci:$layout:$tag" "docker://$REGISTRY/bench/layers-$1-$2:$tag"
    done
}
image "$LAYERS" "$LAYER_MIB"
image 2 "$BIG_MIB"
REPO=bench/layers-$LAYERS-$LAYER_MIB
BIG_REPO=bench/layers-2-$BIG_MIB

# The bandwidth-limiting proxy.
PROXY_DIR=$WORK/layers-proxy
rm -rf "$PROXY_DIR"
mkdir -p "$PROXY_DIR"
python3 "$REPO_ROOT/tests/setup/faultproxy.py" --upstream "$REGISTRY" --fault throttle \
    --count 0 --rate $((RATE_MIB << 20)) --port-file "$PROXY_DIR/port" \
    --log "$PROXY_DIR/log" &
PROXY_PID=$!
trap 'kill "$PROXY_PID" 2>/dev/null || true; stop_podman_pause' EXIT
for _ in $(seq 100); do [[ -s $PROXY_DIR/port ]] && break; sleep 0.1; done
[[ -s $PROXY_DIR/port ]] || die "the proxy did not start"
SLOW=127.0.0.1:$(cat "$PROXY_DIR/port")/$REPO
BIG=127.0.0.1:$(cat "$PROXY_DIR/port")/$BIG_REPO
DIRECT=$REGISTRY/$REPO

install -d -m 0755 "$WORK/bin"
[[ -x $BERTH_BIN ]] || die "no berth binary at $BERTH_BIN (cargo build --release, or --berth PATH)"
install -m 0755 "$BERTH_BIN" "$WORK/bin/berth"
PARALLEL_CONF=$WORK/layers-parallel.toml
SERIAL_CONF=$WORK/layers-serial.toml
printf '# written by bench/layers.sh\n[network]\nmax_connections = 8\n' > "$PARALLEL_CONF"
printf '# written by bench/layers.sh\n[network]\nmax_connections = 1\n' > "$SERIAL_CONF"
BERTH_SITE_CONF=$PARALLEL_CONF   # as_user's default

RUNDIR=$WORK/layers-runs
fresh() {
    rm -rf "${RUNDIR:?}"
    install -d -m 0755 -o "$BUID" -g "$BGID" "$RUNDIR"
    rm -rf "$UDIR/tmp"
    install -d -m 0700 -o "$BUID" -g "$BGID" "$UDIR/tmp"
}
berth_pull() {   # CONF REF
    BERTH_SITE_CONF=$1 as_user "$WORK/bin/berth" --store "$RUNDIR/store" \
        pull --tls-verify=false -q "$2"
}
podman_pull() {  # REF
    as_user podman --root "$RUNDIR/root" --runroot "$RUNDIR/runroot" \
        --storage-driver overlay pull --tls-verify=false -q "$1"
}
# prepare CASE: the untimed part; timed CASE: the timed command.
prepare() {
    fresh
    stop_podman_pause
    case $1 in
        update-berth) berth_pull "$PARALLEL_CONF" "$DIRECT:v1" ;;
        update-podman) podman_pull "$DIRECT:v1" ;;
        *) true ;;
    esac
}
timed() {
    case $1 in
        cold-berth) berth_pull "$PARALLEL_CONF" "$SLOW:v1" ;;
        cold-berth-serial) berth_pull "$SERIAL_CONF" "$SLOW:v1" ;;
        cold-podman) podman_pull "$SLOW:v1" ;;
        update-berth) berth_pull "$PARALLEL_CONF" "$SLOW:v2" ;;
        update-podman) podman_pull "$SLOW:v2" ;;
        big-berth) berth_pull "$PARALLEL_CONF" "$BIG:v1" ;;
        big-berth-serial) berth_pull "$SERIAL_CONF" "$BIG:v1" ;;
        big-podman) podman_pull "$BIG:v1" ;;
    esac
}

CASES=(cold-berth cold-berth-serial cold-podman update-berth update-podman
       big-berth big-berth-serial big-podman)
STAMP=$(date -u +%Y%m%dT%H%M%SZ)
RAW=$WORK/logs/layers-$STAMP.tsv
mkdir -p "$WORK/logs"
: > "$RAW"
FAILED=0
for ((r = 0; r < RUNS; r++)); do
    for ((k = 0; k < ${#CASES[@]}; k++)); do
        c=${CASES[(r + k) % ${#CASES[@]}]}
        logf=$WORK/logs/layers-$STAMP-$r-$c.log
        prepare "$c" > "$logf" 2>&1 || { log "$c: preparing failed"; tail -5 "$logf" >&2; FAILED=1; continue; }
        t0=$EPOCHREALTIME
        if timed "$c" >> "$logf" 2>&1; then status=ok; else status=failed; FAILED=1; fi
        t1=$EPOCHREALTIME
        secs=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f", b - a }')
        log "round $((r + 1)): $c $status ${secs}s"
        [[ $status == ok ]] || tail -5 "$logf" >&2
        printf '%s\t%s\t%s\t%s\n' "$((r + 1))" "$c" "$status" "$secs" >> "$RAW"
    done
done
rm -rf "${RUNDIR:?}"

mkdir -p "$RESULTS"
python3 - "$RAW" "$RESULTS/layers-$STAMP.json" "$LAYERS" "$LAYER_MIB" "$BIG_MIB" "$RATE_MIB" "$RUNS" \
    "$SMOKE" "$(version_of podman --version)" "$(git_describe)" "$(uname -r)" "$(nproc)" <<'EOF'
import json, statistics, sys
raw, out, layers, mib, big, rate, runs, smoke, podman, git, kernel, cpus = sys.argv[1:]
times = {}
for line in open(raw):
    rnd, case, status, secs = line.rstrip("\n").split("\t")
    if status == "ok":
        times.setdefault(case, []).append(float(secs))
summary = {c: {"median": statistics.median(v), "min": min(v), "max": max(v), "samples": v}
           for c, v in times.items()}
result = {"benchmark": "layers", "layers": int(layers), "layer_mib": int(mib), "big_mib": int(big),
          "rate_mib_per_connection": int(rate), "runs": int(runs), "smoke": smoke == "1",
          "versions": {"podman": podman}, "git": git,
          "host": {"kernel": kernel, "cpus": int(cpus)}, "summary": summary}
json.dump(result, open(out, "w"), indent=2)
print(f"| case ({layers} layers, {mib} MiB each but the base, {rate} MiB/s a connection) | median s |")
print("|---|---:|")
for c, s in summary.items():
    print(f"| {c} | {s['median']:.2f} |")
EOF
log "results: $RESULTS/layers-$STAMP.json"
exit "$FAILED"
