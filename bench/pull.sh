#!/bin/bash
# "Pull to runnable" benchmark: berth against its peers.
#
# Times, as an unprivileged user, getting a Debian bookworm minbase + python3
# image (one gzip layer, about 65 MB) from a registry on loopback into a
# form each tool can run:
#
#   berth   berth pull (fresh store each run): a squashfs file
#   podman  rootless podman pull (fresh --root/--runroot each run): overlay
#   peer    skopeo copy + umoci unpack --rootless + mksquashfs (-comp gzip
#           -b 65536): a squashfs file, the way one builds it by hand
#
# The tools alternate inside each round, and the order rotates from round to
# round, so load drift on a shared machine hits every tool alike. Ratios
# berth/peer are computed per round (pairs measured close together), then
# summarised by their median.
#
# Usage (as root: it installs packages, builds the image once and switches
# to the unprivileged user for every timed command):
#
#   bench/pull.sh [--runs N] [--smoke] [options]     see --help
#
# Results: bench/results/pull-<UTC time>.{json,csv}, a markdown table on
# stdout, progress on stderr. Everything built is cached under --work-dir
# (default /var/tmp/berth-bench), so a rerun only times.
set -Eeuo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO_ROOT=$(cd "$HERE/.." && pwd)
# berth and the helpers run as the unprivileged user: work from /, not
# from the caller's directory (a clone under a 0700 directory, say).
cd /
BENCH_NAME=pull.sh
# shellcheck source-path=SCRIPTDIR source=lib/common.sh
. "$HERE/lib/common.sh"

# ---------------------------------------------------------------------------
# Defaults and options
# ---------------------------------------------------------------------------
bench_defaults   # WORK BENCH_USER REGISTRY IMAGE_PATH BERTH_BIN RESULTS
RUNS=5
WARMUP=1
TOOLS=berth,podman,peer
MIRROR=                   # empty: read from the apt sources
BERTH_SQUASHFS=           # empty: berth's own defaults
PEER_COMP=gzip
PEER_BLOCK=65536
REBUILD=0
SMOKE=0
KEEP=0

usage() {
    cat <<EOF
usage: $0 [options]    (run as root)

  --runs N             measured rounds (default $RUNS)
  --warmup N           unrecorded rounds first (default $WARMUP)
  --smoke              1 round, no warm-up (for CI)
  --tools LIST         comma list of berth,podman,peer (default $TOOLS)
  --berth PATH         berth binary (default target/release/berth)
  --berth-squashfs C[:B[:L]]
                       make berth write compressor C, block size B, level L
                       (default: berth's built-in settings)
  --peer-comp C        mksquashfs compressor for the peer (default $PEER_COMP)
  --peer-block B       mksquashfs block size for the peer (default $PEER_BLOCK)
  --registry H:P       loopback registry (default $REGISTRY)
  --user NAME          unprivileged user that runs the tools (default $BENCH_USER)
  --work-dir DIR       cache and scratch space (default $WORK)
  --mirror URL         Debian mirror for debootstrap (default: from apt sources)
  --results DIR        where JSON and CSV go (default bench/results)
  --rebuild            rebuild the rootfs and the OCI image
  --keep               keep the last run's results under WORK/runs
EOF
}

bench_options --runs=RUNS --warmup=WARMUP --smoke:SMOKE=1 --tools=TOOLS \
    --berth-squashfs=BERTH_SQUASHFS --peer-comp=PEER_COMP --peer-block=PEER_BLOCK \
    --mirror=MIRROR --rebuild:REBUILD=1 --keep:KEEP=1 common -- "$@"
if ((SMOKE)); then RUNS=1; WARMUP=0; fi
bench_int --runs "$RUNS"
bench_int --warmup "$WARMUP" 0
bench_list TOOL_LIST "$TOOLS" berth,podman,peer tool
IMAGE_REF=$REGISTRY/$IMAGE_PATH

bench_start "it installs packages and switches to user $BENCH_USER"

# ---------------------------------------------------------------------------
# Packages (only when missing)
# ---------------------------------------------------------------------------
PACKAGES=(debootstrap podman catatonit uidmap fuse-overlayfs skopeo umoci
          squashfs-tools squashfs-tools-ng docker-registry jq curl python3
          ca-certificates)

install_packages "${PACKAGES[@]}"

# ---------------------------------------------------------------------------
# The unprivileged user, its private XDG directories, the registry
# ---------------------------------------------------------------------------
bench_user_setup

# berth: no site config, unless asked for.
BERTH_SITE_CONF=$WORK/berth-site.toml
if [[ -n $BERTH_SQUASHFS ]]; then
    IFS=: read -r bc bb bl <<< "$BERTH_SQUASHFS"
    {
        echo "# written by bench/pull.sh (--berth-squashfs $BERTH_SQUASHFS)"
        echo "[squashfs]"
        echo "compressor = \"$bc\""
        if [[ -n ${bb:-} ]]; then echo "block_size = $bb"; fi
        if [[ -n ${bl:-} ]]; then echo "level = $bl"; fi
    } > "$BERTH_SITE_CONF"
else
    echo "# written by bench/pull.sh: berth's built-in settings" > "$BERTH_SITE_CONF"
fi
ensure_registry

# ---------------------------------------------------------------------------
# The image: debootstrap once, one gzip layer, push when the registry lacks it
# ---------------------------------------------------------------------------

bench_image "$IMAGE_PATH" "$REBUILD" "$MIRROR"

# ---------------------------------------------------------------------------
# Tools
# ---------------------------------------------------------------------------
install -d -m 0755 "$WORK/bin"
if [[ " ${TOOL_LIST[*]} " == *" berth "* ]]; then
    [[ -x $BERTH_BIN ]] || die "no berth binary at $BERTH_BIN (cargo build --release, or --berth PATH)"
    # A copy the user can surely execute, whatever the permissions of the
    # checkout.
    install -m 0755 "$BERTH_BIN" "$WORK/bin/berth"
fi
install -m 0755 "$HERE/lib/peer-pull.sh" "$WORK/bin/peer-pull.sh"

RUNDIR=$WORK/runs
install -d -m 0755 -o "$BUID" -g "$BGID" "$RUNDIR"

# Stop podman's pause process before every run (so that every run starts as
# cold as the first) and at exit.
trap stop_podman_pause EXIT

# fresh TOOL: empties the tool's scratch directory (not timed). Root can
# remove what rootless podman/umoci left with subordinate ids.
fresh() {
    rm -rf "${RUNDIR:?}/$1" "$UDIR/tmp"
    install -d -m 0755 -o "$BUID" -g "$BGID" "$RUNDIR/$1"
    install -d -m 0700 -o "$BUID" -g "$BGID" "$UDIR/tmp"
}

# The timed commands. Each runs as the user and leaves its result in
# $RUNDIR/TOOL.
# shellcheck disable=SC2317   # called as "cmd_$tool"
cmd_berth() {
    as_user "$WORK/bin/berth" --store "$RUNDIR/berth/store" \
        pull --tls-verify=false -q "$IMAGE_REF"
}
# shellcheck disable=SC2317   # called as "cmd_$tool"
cmd_podman() {
    as_user podman --root "$RUNDIR/podman/root" --runroot "$RUNDIR/podman/runroot" \
        --storage-driver overlay pull --tls-verify=false -q "$IMAGE_REF"
}
# shellcheck disable=SC2317   # called as "cmd_$tool"
cmd_peer() {
    as_user "$WORK/bin/peer-pull.sh" "$IMAGE_REF" "$RUNDIR/peer" "$PEER_COMP" "$PEER_BLOCK"
}

# check TOOL: after a run (not timed), that the result is runnable: an image
# with /usr/bin/python3 in it. Prints "bytes_of_result".
check() {
    local sq
    case $1 in
        berth)
            sq=$(find "$RUNDIR/berth/store" -name image.sqfs -print -quit)
            [[ -n $sq ]] || return 1
            [[ -n $(as_user "$WORK/bin/berth" --store "$RUNDIR/berth/store" images -q) ]] || return 1
            has_python "$sq" && stat -c %s "$sq" ;;
        podman)
            as_user podman --root "$RUNDIR/podman/root" --runroot "$RUNDIR/podman/runroot" \
                --storage-driver overlay image inspect --format '{{.Size}}' "$IMAGE_REF" ;;
        peer)
            sq=$RUNDIR/peer/image.sqfs
            has_python "$sq" && stat -c %s "$sq" ;;
    esac
}

# has_python SQFS: the squashfs holds usr/bin/python3.
has_python() {
    [[ $(unsquashfs -l "$1" usr/bin/python3 2>/dev/null) == *usr/bin/python3* ]]
}

# squashfs_params FILE: "compressor block_size" from the superblock.
squashfs_params() {
    unsquashfs -s "$1" 2>/dev/null | awk '
        /^Compression / { c = $2 }
        /^Block size /  { b = $3 }
        END { print c, b }'
}

# ---------------------------------------------------------------------------
# Rounds
# ---------------------------------------------------------------------------
STAMP=$(date -u +%Y%m%dT%H%M%SZ)
RAW=$WORK/logs/raw-$STAMP.tsv
: > "$RAW"
LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
FAILED=0
ntools=${#TOOL_LIST[@]}
total=$((WARMUP + RUNS))

for ((r = 0; r < total; r++)); do
    if ((r < WARMUP)); then round=warmup-$((r + 1)); else round=$((r - WARMUP + 1)); fi
    for ((k = 0; k < ntools; k++)); do
        tool=${TOOL_LIST[(r + k) % ntools]}   # rotate the order every round
        fresh "$tool"
        stop_podman_pause
        logf=$WORK/logs/$STAMP-$round-$tool.log
        t0=$EPOCHREALTIME
        status=ok
        "cmd_$tool" > "$logf" 2>&1 || status=failed
        t1=$EPOCHREALTIME
        secs=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f", b - a }')
        steps=
        if [[ $tool == peer && -e $RUNDIR/peer/steps ]]; then steps=$(cat "$RUNDIR/peer/steps"); fi
        bytes=
        if [[ $status == ok ]]; then
            bytes=$(check "$tool" 2>>"$logf") || status=not-runnable
        fi
        # Facts read from the first successful result.
        if [[ $status == ok && $tool == berth && -z ${BERTH_SQFS:-} ]]; then
            BERTH_SQFS=$(squashfs_params "$(find "$RUNDIR/berth/store" -name image.sqfs -print -quit)")
        fi
        if [[ $status == ok && $tool == peer && -z ${PEER_SQFS:-} ]]; then
            PEER_SQFS=$(squashfs_params "$RUNDIR/peer/image.sqfs")
        fi
        if [[ $status == ok && $tool == podman && -z ${PODMAN_GRAPH:-} ]]; then
            # shellcheck disable=SC2016   # a Go template for podman, not shell
            PODMAN_GRAPH=$(as_user podman --root "$RUNDIR/podman/root" --runroot "$RUNDIR/podman/runroot" \
                --storage-driver overlay info --format \
                '{{.Store.GraphDriverName}} ({{range $k, $v := .Store.GraphStatus}}{{$k}}: {{$v}}; {{end}})' \
                2>/dev/null | sed 's/; )$/)/' || echo unknown)
        fi
        if [[ $status != ok ]]; then
            FAILED=1
            log "round $round: $tool $status after ${secs}s; last lines of $logf:"
            tail -n 5 "$logf" >&2
        else
            log "round $round: $tool ${secs}s"
        fi
        printf '%s\t%d\t%s\t%s\t%s\t%s\t%s\n' "$round" "$k" "$tool" "$status" "$secs" "$bytes" "$steps" >> "$RAW"
    done
done
stop_podman_pause
if ((!KEEP)); then rm -rf "${RUNDIR:?}"/*; fi
LOAD_AFTER=$(cut -d' ' -f1-3 /proc/loadavg)

# ---------------------------------------------------------------------------
# Report
# ---------------------------------------------------------------------------
mkdir -p "$RESULTS"
META=$WORK/logs/meta-$STAMP.json
jq -n \
    --arg stamp "$STAMP" --arg image "$IMAGE_REF" --arg manifest "$IMAGE_MANIFEST_DIGEST" \
    --argjson layer_bytes "$LAYER_BYTES" --argjson layers "$LAYER_COUNT" \
    --argjson rootfs_bytes "$ROOTFS_BYTES" --argjson rootfs_entries "$ROOTFS_ENTRIES" \
    --argjson runs "$RUNS" --argjson warmup "$WARMUP" --argjson smoke "$SMOKE" \
    --arg tools "$TOOLS" --arg user "$BENCH_USER" \
    --arg kernel "$(uname -r)" --arg cpus "$(nproc)" \
    --arg cpu_model "$(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo)" \
    --arg load_before "$LOAD_BEFORE" --arg load_after "$LOAD_AFTER" \
    --arg berth_version "$( [[ -x $WORK/bin/berth ]] && version_of "$WORK/bin/berth" --version || echo n/a)" \
    --arg berth_sha256 "$( [[ -x $WORK/bin/berth ]] && sha256sum "$WORK/bin/berth" | cut -d' ' -f1 || echo n/a)" \
    --arg berth_squashfs_option "${BERTH_SQUASHFS:-built-in defaults}" \
    --arg berth_squashfs "${BERTH_SQFS:-unknown}" \
    --arg peer_squashfs "${PEER_SQFS:-unknown}" \
    --arg peer_mksquashfs_args "-comp $PEER_COMP -b $PEER_BLOCK -all-root -noappend" \
    --arg podman_storage "${PODMAN_GRAPH:-unknown}" \
    --arg podman "$(version_of podman --version)" --arg skopeo "$(version_of skopeo --version)" \
    --arg umoci "$(version_of umoci --version)" --arg mksquashfs "$(version_of mksquashfs -version)" \
    --arg tar2sqfs "$(version_of tar2sqfs --version)" \
    --arg git "$(git_describe)" \
    '{benchmark: "pull-to-runnable", time_utc: $stamp,
      image: {ref: $image, manifest_digest: $manifest, layers: $layers,
              compressed_bytes: $layer_bytes, rootfs_bytes: $rootfs_bytes,
              rootfs_entries: $rootfs_entries},
      runs: $runs, warmup: $warmup, smoke: ($smoke == 1), tools: ($tools | split(",")),
      user: $user,
      host: {kernel: $kernel, cpus: ($cpus | tonumber), cpu_model: $cpu_model,
             loadavg_before: $load_before, loadavg_after: $load_after},
      berth: {version: $berth_version, sha256: $berth_sha256, git: $git,
              squashfs_setting: $berth_squashfs_option,
              squashfs_written: $berth_squashfs},
      peer: {mksquashfs_args: $peer_mksquashfs_args, squashfs_written: $peer_squashfs},
      podman_storage: $podman_storage,
      versions: {podman: $podman, skopeo: $skopeo, umoci: $umoci,
                 mksquashfs: $mksquashfs, tar2sqfs: $tar2sqfs}}' > "$META"

python3 "$HERE/lib/report.py" "$RAW" "$META" "$RESULTS/pull-$STAMP"
log "results: $RESULTS/pull-$STAMP.json, $RESULTS/pull-$STAMP.csv"
exit "$FAILED"
