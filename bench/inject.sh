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
bench_user_setup
need_base_layout
W=$WORK/inject
rm -rf "$W/site-discovery" "$W/site-cdi" "$W/logs"
install -d -m 0755 "$W" "$W/bin" "$W/logs" "$W/site-discovery/modules.d" "$W/site-cdi"
install -m 0755 "$BERTH_BIN" "$W/bin/berth"
# The helper, where the user can read it (the checkout may not be).
install -m 0755 "$HERE/lib/start-loop.py" "$W/bin/start-loop.py"
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
python3 - "$W/logs/starts.tsv" "$OUT" <<PY
import json, os, platform, statistics, sys
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1]) if l.strip()]
rounds = {}
failed = 0
for rnd, pos, tool, case, status, ms in rows:
    if rnd.startswith("warmup"):
        continue
    if status != "ok":
        failed += 1
        continue
    rounds.setdefault(rnd, {})[tool] = float(ms)
tools = ["plain", "gpus-discovery", "gpus-cdi", "mpi-module"]
def q(v, p):
    v = sorted(v); return v[min(len(v) - 1, int(p * len(v)))]
summary, deltas = {}, {}
for t in tools:
    v = [r[t] for r in rounds.values() if t in r]
    if v:
        summary[t] = {"n": len(v), "median": round(statistics.median(v), 3),
                      "p25": round(q(v, .25), 3), "p75": round(q(v, .75), 3)}
    if t != "plain":
        d = [r[t] - r["plain"] for r in rounds.values() if t in r and "plain" in r]
        if d:
            deltas[t] = {"n": len(d), "median": round(statistics.median(d), 3),
                         "p25": round(q(d, .25), 3), "p75": round(q(d, .75), 3)}
json.dump({"benchmark": "inject", "time_utc": "$STAMP", "smoke": bool($SMOKE), "runs": $RUNS,
           "how": {"plain": "berth run IMAGE true",
                   "gpus-discovery": "berth run --gpus all (no CDI spec: loader cache, /dev, programs)",
                   "gpus-cdi": "berth run --gpus all (the fake tree's CDI spec)",
                   "mpi-module": "berth run --mpi (a module: 2 libraries, 1 device, 3 variables)"},
           "host": {"kernel": platform.release(), "cpus": os.cpu_count(),
                    "loadavg_before": "$LOAD_BEFORE",
                    "loadavg_after": " ".join(open("/proc/loadavg").read().split()[:3])},
           "berth": {"version": "$("$B" --version | head -1)", "git": "$(git_describe)"},
           "failed": failed, "summary": summary, "deltas_ms": deltas},
          open(sys.argv[2], "w"), indent=1)
print("| variant | median ms | IQR | more than plain, ms (per round) |")
print("|---|---:|---:|---:|")
for t in tools:
    s = summary.get(t)
    if not s: continue
    d = deltas.get(t)
    print(f"| {t} | {s['median']:.2f} | {s['p25']:.2f}–{s['p75']:.2f} | {d['median']:+.2f} |" if d else
          f"| {t} | {s['median']:.2f} | {s['p25']:.2f}–{s['p75']:.2f} | |")
sys.exit(1 if failed else 0)
PY
log "results: $OUT"
