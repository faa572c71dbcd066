#!/bin/bash
# Stop the registries (and the token server, and dockerd) that
# tests/setup/setup.sh started.
#
# Only processes recorded in $BERTH_IT_DIR/run/*.pid are touched, and only
# when they still are a docker-registry serving a config under
# $BERTH_IT_DIR, token_server.py with its key under $BERTH_IT_DIR, or a
# dockerd whose socket is under $BERTH_IT_DIR (so a recycled PID is never
# killed).
#
#   teardown.sh          stop the registries, keep fixtures and storage
#   teardown.sh --purge  also delete $BERTH_IT_DIR
set -euo pipefail

BERTH_IT_DIR=${BERTH_IT_DIR:-/tmp/berth-it}
RUN_DIR=$BERTH_IT_DIR/run

# is_ours PID: true when PID is a docker-registry or the token server
# started by setup.sh.
is_ours() {
    local cmdline
    cmdline=$(tr '\0' ' ' 2>/dev/null < "/proc/$1/cmdline") || return 1
    [[ $cmdline == *docker-registry\ serve\ "$BERTH_IT_DIR"/registry/* ||
       $cmdline == */usr/sbin/dockerd\ --host\ unix://"$BERTH_IT_DIR"/docker/* ||
       $cmdline == *python3*\ */token_server.py\ --key\ "$BERTH_IT_DIR"/registry/* ]]
}

stop_pid() {
    local pid=$1 name=$2 i
    if ! is_ours "$pid"; then
        echo "teardown: $name: pid $pid not running (or not ours), nothing to stop"
        return 0
    fi
    kill -TERM "$pid" 2>/dev/null || true
    for ((i = 0; i < 50; i++)); do
        is_ours "$pid" || { echo "teardown: stopped $name (pid $pid)"; return 0; }
        sleep 0.1
    done
    echo "teardown: $name (pid $pid) ignored SIGTERM, sending SIGKILL"
    kill -KILL "$pid" 2>/dev/null || true
    for ((i = 0; i < 50; i++)); do
        is_ours "$pid" || return 0
        sleep 0.1
    done
    echo "teardown: ERROR: could not stop $name (pid $pid)" >&2
    return 1
}

# The Slurm test cluster stops its own daemons (by their pid files).
if [[ -e $BERTH_IT_DIR/slurm/slurm.conf ]]; then
    bash "$(dirname "${BASH_SOURCE[0]}")/slurm_cluster.sh" down "$BERTH_IT_DIR/slurm" || true
fi

if [[ -d $RUN_DIR ]]; then
    for pidfile in "$RUN_DIR"/*.pid; do
        [[ -e $pidfile ]] || continue
        name=$(basename "$pidfile" .pid)
        pid=$(cat "$pidfile")
        if [[ $pid =~ ^[0-9]+$ ]]; then
            stop_pid "$pid" "$name"
        fi
        rm -f "$pidfile"
    done
fi

# Mounts left under $BERTH_IT_DIR by a process that died without its
# shutdown: dockerd bind-mounts its data root onto itself and unmounts it
# only when it stops cleanly (a killed session leaves the mount, and the
# next setup could not remove the directory). Deepest first.
unmount_leftovers() {
    local mp
    awk -v d="$BERTH_IT_DIR" '$5 == d || index($5, d "/") == 1 { print $5 }' \
        /proc/self/mountinfo | sort -r | while read -r mp; do
        if umount -l "$mp"; then
            echo "teardown: unmounted $mp, left by a process that is gone"
        fi
    done
}
unmount_leftovers

if [[ ${1:-} == --purge ]]; then
    # Refuse to delete a directory setup.sh did not create.
    if [[ -e $BERTH_IT_DIR/.berth-it ]]; then
        rm -rf "$BERTH_IT_DIR"
        echo "teardown: removed $BERTH_IT_DIR"
    elif [[ -e $BERTH_IT_DIR ]]; then
        echo "teardown: $BERTH_IT_DIR has no .berth-it marker, not removing it" >&2
        exit 1
    fi
fi
