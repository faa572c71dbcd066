#!/bin/bash
# Slurm step start-up with berth's SPANK plugin, on this machine's own
# Slurm cluster (tests/setup/slurm_cluster.sh: three slurmd "nodes" of two
# CPUs, ports 16917+, under the bench work directory):
#
#   true    srun -N1 -n16 -O                 [--container-image=IMG] true
#   step    the same, as a step of one allocation held for the whole run
#           (srun --jobid: how a job script runs its steps; berth's image
#           keeper lives per job and node, so a new job starts one)
#   mpi     srun --mpi=pmi2 -N1 -n16 -O      [--container-image=IMG] mpi-probe
#   mpi3    srun --mpi=pmi2 -N3 -n6 -O       [--container-image=IMG] mpi-probe
#
# each as native srun, shared mode (the default: one container per node
# that all tasks join) and --container-mode=per-task, interleaved round by
# round; the wall time of the whole srun (allocation, the plugin's image
# check in srun, every task, exit). The image is a registry reference, as
# users write it: each srun asks the registry for the tag's digest.
# Target: shared mode at most 1.5 x native srun.
#
#   sudo bench/slurm.sh [--runs N] [--smoke] [--squashfs-server berth|squashfuse_ll]
#
# Results: bench/results/slurm-<UTC>.json, a markdown table on stdout.
set -Eeuo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO_ROOT=$(cd "$HERE/.." && pwd)
cd /
BENCH_NAME=slurm.sh
# shellcheck source=bench/lib/common.sh
source "$HERE/lib/common.sh"
bench_defaults   # WORK BENCH_USER REGISTRY BIN_DIR ...
RUNS=10
SMOKE=0
SQUASHFS_SERVER=berth
usage() { sed -n 2,22p "$HERE/slurm.sh"; }
bench_options --runs=RUNS --smoke:SMOKE=1 --squashfs-server=SQUASHFS_SERVER -- "$@"
if ((SMOKE)); then RUNS=1; fi
bench_int --runs "$RUNS"
bench_start "it starts a Slurm cluster and switches to $BENCH_USER"
for f in berth libberth_spank.so; do
    [[ -e $BIN_DIR/$f ]] || die "no $f in $BIN_DIR (cargo build --release -p berth -p berth-slurm)"
done
install_packages slurm-wlm munge mpich libmpich-dev umoci skopeo jq curl
bench_user_setup
ensure_registry
need_base_layout
W=$WORK/slurm
rm -rf "$W"
install -d -m 0755 "$W" "$W/bin" "$W/logs" "$W/site"
install -m 0755 "$BIN_DIR/berth" "$W/bin/berth"
"$REPO_ROOT/tests/setup/mpi_images.sh" "$REGISTRY" "$WORK/oci:bookworm" > "$W/logs/images.log" 2>&1 \
    || { tail -5 "$W/logs/images.log" >&2; die "building the MPI image failed"; }
mpicc.mpich -O2 -o "$W/bin/mpi-probe" "$REPO_ROOT/tests/setup/mpi/mpi-probe.c"
CLUSTER=$W/cluster
export BERTH_SLURM_PORT=16917
ALLOC=
stop_cluster() {
    if [[ $ALLOC ]]; then scancel "$ALLOC" > /dev/null 2>&1 || true; fi
    bash "$REPO_ROOT/tests/setup/slurm_cluster.sh" down "$CLUSTER" > /dev/null 2>&1 || true
}
trap stop_cluster EXIT
BERTH_SPANK_PLUGIN=$BIN_DIR/libberth_spank.so BERTH_SPANK_BERTH=$W/bin/berth \
    bash "$REPO_ROOT/tests/setup/slurm_cluster.sh" up "$CLUSTER" 3 > "$W/logs/cluster.log" 2>&1 \
    || { tail -5 "$W/logs/cluster.log" >&2; die "the Slurm cluster did not start"; }
export SLURM_CONF=$CLUSTER/slurm.conf
printf 'insecure_registries = ["%s"]\n[runtime]\nsquashfs_server = "%s"\n' \
    "$REGISTRY" "$SQUASHFS_SERVER" > "$W/site/berth.toml"
BERTH_SITE_CONF=$W/site/berth.toml
STORE=$W/store
install -d -m 0755 -o "$BUID" -g "$BGID" "$STORE" "$W/run"
chown "$BUID:$BGID" "$W/logs"
IMG=$REGISTRY/berth-test/mpich:latest
as_user env BERTH_STORE="$STORE" "$W/bin/berth" pull -q "$IMG" > /dev/null

# One srun, as the user; prints its wall time in ms, or "failed".
run_case() {   # CASE VARIANT
    local shape opts=() cmd=(true) s e
    case $1 in
        true) shape=(-N1 -n16 -O) ;;
        step) shape=(--jobid="$ALLOC" -N1 -n16 -O) ;;
        mpi) shape=(--mpi=pmi2 -N1 -n16 -O); cmd=(mpi-probe) ;;
        mpi3) shape=(--mpi=pmi2 -N3 -n6 -O); cmd=(mpi-probe) ;;
    esac
    case $2 in
        native) [[ ${cmd[0]} == mpi-probe ]] && cmd=("$W/bin/mpi-probe") ;;
        shared) opts=(--container-image="$IMG") ;;
        per-task) opts=(--container-image="$IMG" --container-mode=per-task) ;;
    esac
    s=$(date +%s%N)
    if as_user env SLURM_CONF="$SLURM_CONF" BERTH_STORE="$STORE" \
        srun "${shape[@]}" "${opts[@]}" "${cmd[@]}" > "$W/logs/out.txt" 2>> "$W/logs/$1-$2.log"; then
        e=$(date +%s%N)
        if [[ ${cmd[0]} != true ]] && (($(grep -c '^rank ' "$W/logs/out.txt") != ${shape[-2]#-n})); then
            echo failed; return
        fi
        echo $(((e - s) / 1000))
    else
        echo failed
    fi
}

# The allocation the step case's sruns are steps of (released on exit).
ALLOC=$(as_user env SLURM_CONF="$SLURM_CONF" salloc -N1 -n1 --no-shell 2>&1 | sed -n 's/.*Granted job allocation \([0-9]*\).*/\1/p')
[[ $ALLOC ]] || die "salloc --no-shell gave no allocation"
CASES=(true step mpi mpi3)
VARIANTS=(native shared per-task)
TSV=$W/logs/rounds.tsv
: > "$TSV"
LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
for c in "${CASES[@]}"; do for v in "${VARIANTS[@]}"; do run_case "$c" "$v" > /dev/null; done; done   # warm-up
for ((r = 1; r <= RUNS; r++)); do
    for c in "${CASES[@]}"; do
        for ((k = 0; k < 3; k++)); do
            v=${VARIANTS[$(((r + k) % 3))]}
            us=$(run_case "$c" "$v")
            echo -e "$r\t$c\t$v\t$us" >> "$TSV"
            log "round $r $c $v: $us us"
        done
    done
done
STAMP=$(date -u +%Y%m%dT%H%M%SZ)
OUT=$HERE/results/slurm-$STAMP.json
install -d "$HERE/results"
jq -n --arg stamp "$STAMP" --argjson smoke "$SMOKE" --argjson runs "$RUNS" \
    --arg load_before "$LOAD_BEFORE" --arg berth_version "$("$W/bin/berth" --version | head -1)" \
    --arg git "$(git_describe)" --arg slurm "$(slurmd -V 2>/dev/null | head -1)" \
    --arg mpich "$(mpichversion 2>/dev/null | sed -n 's/MPICH Version:[[:space:]]*//p' | head -1)" \
    --arg server "$SQUASHFS_SERVER" \
    '{time_utc: $stamp, smoke: ($smoke == 1), runs: $runs, loadavg_before: $load_before,
      berth: {version: $berth_version, git: $git, squashfs_server: $server},
      versions: {slurm: $slurm, mpich: $mpich}}' \
    > "$W/logs/meta.json"
python3 "$HERE/lib/slurm-report.py" "$TSV" "$W/logs/meta.json" "$OUT"
log "results: $OUT"
