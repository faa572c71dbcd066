#!/bin/bash
# What host-resource injection costs a start: `berth run IMAGE true` plain,
# and with GPUs (driver discovery from the loader cache, and through a CDI
# spec) and with an MPI-style site module, all interleaved round by round
# (bench/lib/start-loop.py). The GPU driver is the test suite's fake tree
# (tests/setup/fake_gpu.sh: libraries, nvidia-smi, device nodes made with
# mknod, a CDI spec), so this runs on any machine; the module binds two of
# its libraries, a device node and sets variables, as an MPI or network
# module does. Target: under 2 ms more than a plain start.
#
#   sudo bench/inject.sh [--runs N] [--smoke]
#
# Results: bench/results/inject-<UTC>.json, a markdown table on stdout.
set -Eeuo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO_ROOT=$(cd "$HERE/.." && pwd)
# berth and the helpers run as the unprivileged user: work from /, not
# from the caller's directory (a clone under a 0700 directory, say).
cd /
BENCH_NAME=inject.sh
# shellcheck source=bench/lib/common.sh
source "$HERE/lib/common.sh"
bench_defaults   # WORK BENCH_USER REGISTRY BERTH_BIN ...
RUNS=30
WARMUP=3
SMOKE=0
usage() { sed -n 2,13p "$HERE/inject.sh"; }
bench_options --runs=RUNS --smoke:SMOKE=1 -- "$@"
if ((SMOKE)); then RUNS=3; WARMUP=1; fi
bench_int --runs "$RUNS"
bench_start "it makes device nodes and switches to $BENCH_USER"
[[ -x $BERTH_BIN ]] || die "no berth binary at $BERTH_BIN (cargo build --release)"
install_packages jq   # the report's META.json
bench_user_setup
need_base_layout
W=$WORK/inject
rm -rf "$W/site-discovery" "$W/site-cdi" "$W/logs"
install -d -m 0755 "$W" "$W/bin" "$W/logs" "$W/site-discovery/modules.d" "$W/site-cdi"
install -m 0755 "$BERTH_BIN" "$W/bin/berth"
# The helper, where the user can read it (the checkout may not be).
install -m 0755 "$HERE/lib/start-loop.py" "$W/bin/start-loop.py"
install -m 0644 "$HERE/lib/timed_starts.py" "$W/bin/timed_starts.py"
chown "$BUID:$BGID" "$W/logs"
"$REPO_ROOT/tests/setup/fake_gpu.sh" "$W/fake" > "$W/logs/fake_gpu.log"
F=$W/fake
for variant in discovery cdi; do
    cdi=$([[ $variant == cdi ]] && echo "$F/cdi" || echo "$F/cdi-empty")
    cat > "$W/site-$variant/berth.toml" <<TOML
[host]
cdi_spec_dirs = ["$cdi"]
ld_cache = "$F/ld.so.cache"
dev_dir = "$F/dev"
bin_dirs = ["$F/bin"]
nvidia_proc = "$F/proc"
TOML
done
cat > "$W/site-discovery/modules.d/mpi.toml" <<TOML
description = "an MPI-style module for the benchmark: libraries, a device, variables"
when = "mpi"
libraries = ["$F/lib/libnvidia-ml.so.1", "$F/lib/libcuda.so.1"]
devices = ["$F/dev/nvidia-uvm:/dev/cxi0"]
[env.set]
FI_PROVIDER = "cxi"
MPICH_GPU_SUPPORT_ENABLED = "0"
[env.prepend]
PATH = "/opt/cray/pe/bin"
TOML
BERTH_SITE_CONF=$W/site-discovery/berth.toml
STORE=$W/store
install -d -m 0755 -o "$BUID" -g "$BGID" "$STORE"
if ! as_user env BERTH_STORE="$STORE" "$W/bin/berth" inspect bench/inject:base > /dev/null 2>&1; then
    log "importing the Debian + python3 image"
    chmod -R a+rX "$WORK/oci"
    as_user env BERTH_STORE="$STORE" "$W/bin/berth" import -q "oci:$WORK/oci:bookworm" bench/inject:base > /dev/null
fi

cmd() {   # tool argv-json site
    printf '{"tool":"%s","case":"true","argv":%s,"env":{"BERTH_STORE":"%s","BERTH_SYSTEM_CONFIG":"%s"}}' \
        "$1" "$2" "$STORE" "$3"
}
B=$W/bin/berth
D=$W/site-discovery/berth.toml
C=$W/site-cdi/berth.toml
cat > "$W/spec.json" <<JSON
{"runs": $RUNS, "warmup": $WARMUP, "cwd": "/", "log_dir": "$W/logs", "commands": [
 $(cmd plain "[\"$B\",\"run\",\"bench/inject:base\",\"true\"]" "$D"),
 $(cmd gpus-discovery "[\"$B\",\"run\",\"--gpus\",\"all\",\"bench/inject:base\",\"true\"]" "$D"),
 $(cmd gpus-cdi "[\"$B\",\"run\",\"--gpus\",\"all\",\"bench/inject:base\",\"true\"]" "$C"),
 $(cmd mpi-module "[\"$B\",\"run\",\"--mpi\",\"bench/inject:base\",\"true\"]" "$D")
]}
JSON
LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
log "$RUNS rounds of 4 starts (plain, --gpus discovery, --gpus CDI, --mpi module)"
as_user python3 "$W/bin/start-loop.py" "$W/spec.json" "$W/logs/starts.tsv"
STAMP=$(date -u +%Y%m%dT%H%M%SZ)
OUT=$HERE/results/inject-$STAMP.json
install -d "$HERE/results"
jq -n --arg stamp "$STAMP" --argjson smoke "$SMOKE" --argjson runs "$RUNS" \
    --arg load_before "$LOAD_BEFORE" --arg berth_version "$("$B" --version | head -1)" \
    --arg git "$(git_describe)" \
    '{time_utc: $stamp, smoke: ($smoke == 1), runs: $runs, loadavg_before: $load_before,
      berth: {version: $berth_version, git: $git}}' > "$W/logs/meta.json"
python3 "$HERE/lib/inject-report.py" "$W/logs/starts.tsv" "$W/logs/meta.json" "$OUT"
log "results: $OUT"
