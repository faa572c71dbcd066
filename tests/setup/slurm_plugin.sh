#!/bin/bash
# Restarts the Slurm test cluster with berth's SPANK plugin and berth from
# a build directory (slurmd reads plugstack.conf when it starts):
#
#   tests/setup/slurm_plugin.sh [TARGET_DIR]     (default target/debug)
#
# Run as root after `cargo build --workspace` (tests/run.sh does).
set -Eeuo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BIN=${1:-$ROOT/target/debug}
BERTH_IT_DIR=${BERTH_IT_DIR:-/tmp/berth-it}
for f in "$BIN/libberth_spank.so" "$BIN/berth"; do
    [[ -e $f ]] || { echo "slurm_plugin: no $f (cargo build --workspace)" >&2; exit 1; }
done
bash "$ROOT/tests/setup/slurm_cluster.sh" down "$BERTH_IT_DIR/slurm" >/dev/null 2>&1 || true
BERTH_SPANK_PLUGIN=$BIN/libberth_spank.so BERTH_SPANK_BERTH=$BIN/berth \
    bash "$ROOT/tests/setup/slurm_cluster.sh" up "$BERTH_IT_DIR/slurm" 3
