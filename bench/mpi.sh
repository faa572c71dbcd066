#!/bin/bash
# MPI ping-pong (OSU-style, tests/setup/mpi/pingpong.c): the one-way latency
# of 8-byte messages and the bandwidth of 1 MiB messages between two ranks
# on this node, launched by mpiexec.hydra
#
#   native   the program on the host, the host's MPICH
#   image    in berth containers, the image's own MPICH (hybrid model)
#   host     in berth containers with --mpi: the host's MPICH injected
#
# interleaved round by round. Target: the containers within 2% of native.
# The image is tests/setup/mpi_images.sh's "mpich" image, built on
# bench/pull.sh's Debian image (MPICH's runtime copied from the host's
# packages, so image and host MPI are the same build; what is measured is
# the container's cost).
#
#   sudo bench/mpi.sh [--runs N] [--smoke]
#
# Results: bench/results/mpi-<UTC>.json, a markdown table on stdout.
set -Eeuo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO_ROOT=$(cd "$HERE/.." && pwd)
# berth and the helpers run as the unprivileged user: work from /, not
# from the caller's directory (a clone under a 0700 directory, say).
cd /
BENCH_NAME=mpi.sh
# shellcheck source=bench/lib/common.sh
source "$HERE/lib/common.sh"
bench_defaults   # WORK BENCH_USER REGISTRY BERTH_BIN ...
RUNS=10
ITERS=2000
SMOKE=0
usage() { sed -n 2,18p "$HERE/mpi.sh"; }
bench_options --runs=RUNS --smoke:SMOKE=1 -- "$@"
if ((SMOKE)); then RUNS=1; ITERS=200; fi
bench_int --runs "$RUNS"
bench_start "it installs MPICH and switches to $BENCH_USER"
[[ -x $BERTH_BIN ]] || die "no berth binary at $BERTH_BIN (cargo build --release)"
install_packages mpich libmpich-dev umoci skopeo jq curl
bench_user_setup
ensure_registry
need_base_layout
W=$WORK/mpi
rm -rf "$W/site" "$W/logs"
install -d -m 0755 "$W" "$W/bin" "$W/site/modules.d" "$W/logs"
install -m 0755 "$BERTH_BIN" "$W/bin/berth"
"$REPO_ROOT/tests/setup/mpi_images.sh" "$REGISTRY" "$WORK/oci:bookworm" > "$W/logs/images.log" 2>&1 \
    || { tail -5 "$W/logs/images.log" >&2; die "building the MPI image failed"; }
mpicc.mpich -O2 -o "$W/bin/pingpong" "$REPO_ROOT/tests/setup/mpi/pingpong.c"
HOST_LIBMPI=$(readlink -f /usr/lib/x86_64-linux-gnu/libmpich.so.12)
cat > "$W/site/modules.d/mpich.toml" <<TOML
description = "host MPICH (bench)"
when = "mpi"
[mpi]
libraries = ["/usr/lib/x86_64-linux-gnu/libmpich.so.12"]
TOML
: > "$W/site/berth.toml"
BERTH_SITE_CONF=$W/site/berth.toml
STORE=$W/store
rm -rf "$STORE"
install -d -m 0755 -o "$BUID" -g "$BGID" "$STORE"
chown "$BUID:$BGID" "$W/logs"
IMG=$REGISTRY/berth-test/mpich:latest
as_user env BERTH_STORE="$STORE" "$W/bin/berth" pull -q --tls-verify=false "$IMG" > /dev/null
B=$W/bin/berth

run_variant() {   # VARIANT -> the output line of rank 0
    local args
    case $1 in
        native) args=("$W/bin/pingpong" "$ITERS") ;;
        image) args=("$B" run "$IMG" pingpong "$ITERS") ;;
        host) args=("$B" run --mpi "$IMG" pingpong "$ITERS") ;;
    esac
    as_user env BERTH_STORE="$STORE" mpiexec.hydra -n 2 "${args[@]}" 2>> "$W/logs/$1.log" \
        | grep '^latency_us' || echo "failed"
}

VARIANTS=(native image host)
TSV=$W/logs/rounds.tsv
: > "$TSV"
LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
run_variant native > /dev/null; run_variant image > /dev/null   # warm-up (keeper up)
for ((r = 1; r <= RUNS; r++)); do
    for ((k = 0; k < 3; k++)); do
        v=${VARIANTS[$(((r + k) % 3))]}
        line=$(run_variant "$v")
        echo -e "$r\t$v\t$line" >> "$TSV"
        log "round $r $v: $line"
    done
done
STAMP=$(date -u +%Y%m%dT%H%M%SZ)
OUT=$HERE/results/mpi-$STAMP.json
install -d "$HERE/results"
jq -n --arg stamp "$STAMP" --argjson smoke "$SMOKE" --argjson runs "$RUNS" --argjson iters "$ITERS" \
    --arg load_before "$LOAD_BEFORE" --arg berth_version "$("$B" --version | head -1)" \
    --arg git "$(git_describe)" \
    --arg mpich "$(mpichversion 2>/dev/null | sed -n 's/MPICH Version:[[:space:]]*//p' | head -1)" \
    --arg host_libmpi "$HOST_LIBMPI" \
    '{time_utc: $stamp, smoke: ($smoke == 1), runs: $runs, iterations: $iters,
      loadavg_before: $load_before, berth: {version: $berth_version, git: $git},
      versions: {mpich: $mpich}, host_libmpi: $host_libmpi}' > "$W/logs/meta.json"
python3 "$HERE/lib/mpi-report.py" "$TSV" "$W/logs/meta.json" "$OUT"
log "results: $OUT"
