# Node-local helpers shared by fileaccess.sh, ranks.sh and start.sh (sourced
# after lib/common.sh, whose log/die/as_user they use).
#
#   case_argv CASE      the command of a case (true, python; probe: the check
#                       that a tool runs in the image), one word a line
#   base_image          ROOTFS LAYOUT TAG: pull.sh's cached Debian bookworm
#                       minbase + python3 image (unpacked rootfs and OCI
#                       layout); built, and pushed to the registry, by
#                       common.sh's bench_image only when the cache is missing
#   layout_digest       sha256 of that layout's manifest for TAG
#   keeper_dir RT ID    berth's keeper directory for image ID under the
#                       runtime directory RT (XDG_RUNTIME_DIR)
#   keeper_pid DIR      the live keeper's pid, or nothing
#   stop_keeper DIR     stops that keeper (and its squashfs server)
#   keepers_for DIR     how many keeper processes serve DIR (1 expected)
#   fuse_fix            /dev/fuse 0666 when HOST_FIXES=1 (records it in
#                       HOST_FIXES_DONE)
# shellcheck shell=bash disable=SC2034   # the globals are for the caller

# case_argv CASE: the command of each case, one word a line. "probe" checks
# that a tool runs in the image, not on the host: the image has python3 and
# no jq, the host has both.
case_argv() {
    case $1 in
        true) echo true ;;
        python) printf '%s\n' python3 -c pass ;;
        probe) printf '%s\n' sh -c 'test -x /usr/bin/python3 && ! test -e /usr/bin/jq' ;;
    esac
}

base_image() {
    local image_path=$1
    if [[ -e $WORK/rootfs.done && -e $WORK/oci.done ]]; then
        ROOTFS=$WORK/rootfs
        LAYOUT=$WORK/oci
        TAG=bookworm
    else
        # Not built yet: pull.sh's way (debootstrap, one gzip layer, push).
        ensure_registry
        bench_image "$image_path" 0 ""
    fi
}

layout_digest() {
    jq -r --arg t "$TAG" \
        '.manifests[] | select(.annotations["org.opencontainers.image.ref.name"] == $t) | .digest' \
        "$LAYOUT/index.json"
}

# keeper_dir RT ID: named by the image's whole id, as berth's keeper.rs
# names it (keeper_name: HEX-user).
keeper_dir() {
    local rt=$1 id=${2#sha256:}
    echo "$rt/berth/keepers/$id-user"
}

# keeper_pid DIR: the pid in DIR/pid when that process is the user's berth
# keeper and alive.
keeper_pid() {
    local dir=$1 pid
    [[ -e $dir/pid ]] || return 0
    pid=$(cat "$dir/pid" 2>/dev/null) || return 0
    [[ $pid =~ ^[0-9]+$ && $(stat -c %u "/proc/$pid" 2>/dev/null) == "$BUID" ]] || return 0
    tr '\0' ' ' < "/proc/$pid/cmdline" 2>/dev/null | grep -q __keeper || return 0
    echo "$pid"
}

# stop_keeper DIR: stopping the keeper's squashfs server (berth-squashfs or
# squashfuse_ll) makes the
# keeper leave by its own exit path within 250 ms (as start.sh does). Only
# the keeper named in its pid file, owned by the user, and that keeper's own
# squashfuse_ll child are touched. Returns 1 if it is still there after 5 s.
stop_keeper() {
    local dir=$1 pid child i
    pid=$(keeper_pid "$dir")
    [[ -n $pid ]] || return 0
    for child in $(pgrep -P "$pid" -x 'squashfuse_ll|berth-squashfs' || true); do
        kill -TERM "$child" 2>/dev/null || true
    done
    for ((i = 0; i < 50; i++)); do
        kill -0 "$pid" 2>/dev/null || return 0
        sleep 0.1
    done
    log "berth's keeper $pid did not stop"
    return 1
}

# keepers_for DIR: the user's keeper processes for DIR. The keeper's holder
# (of the prepared root) is a fork of it with the same command line: a
# match whose parent matches too is not counted.
keepers_for() {
    local pids p n=0
    pids=" $(pgrep -u "$BUID" -f -- "__keeper $1 " | tr '\n' ' ' || true) "
    for p in $pids; do
        [[ $pids == *" $(ps -o ppid= -p "$p" | tr -d ' ') "* ]] || n=$((n + 1))
    done
    echo "$n"
}

fuse_fix() {
    local mode
    mode=$(stat -c %a /dev/fuse 2>/dev/null || echo missing)
    [[ $mode != 666 && -c /dev/fuse ]] || return 0
    if ((HOST_FIXES)); then
        log "chmod 0666 /dev/fuse (was $mode; distributions ship 0666, rootless FUSE needs it)"
        chmod 0666 /dev/fuse
        HOST_FIXES_DONE+=("chmod 0666 /dev/fuse (was $mode)")
    else
        log "/dev/fuse is mode $mode: rootless FUSE (berth, ch-run squashfs) may fail"
    fi
}
