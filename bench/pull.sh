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

# ---------------------------------------------------------------------------
# Defaults and options
# ---------------------------------------------------------------------------
RUNS=5
WARMUP=1
WORK=${BERTH_BENCH_WORK:-/var/tmp/berth-bench}
BENCH_USER=${BERTH_BENCH_USER:-berthtest}
REGISTRY=127.0.0.1:5000
IMAGE_PATH=bench/debian-python:bookworm
BERTH_BIN=$REPO_ROOT/target/release/berth
TOOLS=berth,podman,peer
MIRROR=                   # empty: read from the apt sources
BERTH_SQUASHFS=           # empty: berth's own defaults
PEER_COMP=gzip
PEER_BLOCK=65536
RESULTS=$HERE/results
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

while (($#)); do
    case $1 in
        --runs) RUNS=$2; shift ;;
        --warmup) WARMUP=$2; shift ;;
        --smoke) SMOKE=1 ;;
        --tools) TOOLS=$2; shift ;;
        --berth) BERTH_BIN=$2; shift ;;
        --berth-squashfs) BERTH_SQUASHFS=$2; shift ;;
        --peer-comp) PEER_COMP=$2; shift ;;
        --peer-block) PEER_BLOCK=$2; shift ;;
        --registry) REGISTRY=$2; shift ;;
        --user) BENCH_USER=$2; shift ;;
        --work-dir) WORK=$2; shift ;;
        --mirror) MIRROR=$2; shift ;;
        --results) RESULTS=$2; shift ;;
        --rebuild) REBUILD=1 ;;
        --keep) KEEP=1 ;;
        -h|--help) usage; exit 0 ;;
        *) usage >&2; exit 2 ;;
    esac
    shift
done
if ((SMOKE)); then RUNS=1; WARMUP=0; fi
[[ $RUNS =~ ^[1-9][0-9]*$ ]] || { echo "--runs must be a positive integer" >&2; exit 2; }
[[ $WARMUP =~ ^[0-9]+$ ]] || { echo "--warmup must be a non-negative integer" >&2; exit 2; }
IFS=, read -r -a TOOL_LIST <<< "$TOOLS"
for t in "${TOOL_LIST[@]}"; do
    [[ $t == berth || $t == podman || $t == peer ]] || { echo "unknown tool: $t" >&2; exit 2; }
done
IMAGE_REF=$REGISTRY/$IMAGE_PATH

log() { echo "pull.sh: $*" >&2; }
die() { echo "pull.sh: ERROR: $*" >&2; exit 1; }
trap 'echo "pull.sh: FAILED at line $LINENO: $BASH_COMMAND" >&2' ERR

[[ $(id -u) == 0 ]] || die "run as root (it installs packages and switches to user $BENCH_USER)"
umask 022

# ---------------------------------------------------------------------------
# Packages (only when missing)
# ---------------------------------------------------------------------------
PACKAGES=(debootstrap podman catatonit uidmap fuse-overlayfs skopeo umoci
          squashfs-tools squashfs-tools-ng docker-registry jq curl python3
          ca-certificates)

install_packages() {
    local missing=() p policy_rc= rc=0
    for p in "${PACKAGES[@]}"; do
        [[ $(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null) == installed ]] \
            || missing+=("$p")
    done
    ((${#missing[@]})) || return 0
    log "installing: ${missing[*]}"
    # policy-rc.d keeps apt from starting services (docker-registry would
    # take port 5000), as tests/setup/setup.sh does.
    if [[ ! -e /usr/sbin/policy-rc.d ]]; then
        policy_rc=/usr/sbin/policy-rc.d
        printf '#!/bin/sh\nexit 101\n' > "$policy_rc"
        chmod 0755 "$policy_rc"
    fi
    { DEBIAN_FRONTEND=noninteractive apt-get update -q &&
      DEBIAN_FRONTEND=noninteractive apt-get install -y -q \
          --no-install-recommends "${missing[@]}"; } >&2 || rc=$?
    if [[ -n $policy_rc ]]; then rm -f "$policy_rc"; fi
    ((rc == 0)) || die "apt-get install ${missing[*]} failed"
}
install_packages

# ---------------------------------------------------------------------------
# The unprivileged user, its private XDG directories, the registry
# ---------------------------------------------------------------------------
# The user and its subordinate ids, as tests/setup/setup.sh makes them.
if ! id -u "$BENCH_USER" >/dev/null 2>&1; then
    log "creating user $BENCH_USER"
    useradd --create-home --user-group --shell /bin/bash "$BENCH_USER"
fi
for f in /etc/subuid /etc/subgid; do
    touch "$f"
    grep -q "^$BENCH_USER:" "$f" || echo "$BENCH_USER:200000:65536" >> "$f"
done
BUID=$(id -u "$BENCH_USER")
BGID=$(id -g "$BENCH_USER")
BHOME=$(getent passwd "$BENCH_USER" | cut -d: -f6)

mkdir -p "$WORK" "$WORK/logs"
chmod 0755 "$WORK"

# The user's state for this benchmark lives under $WORK/user (its own
# XDG_CONFIG_HOME, XDG_DATA_HOME, XDG_CACHE_HOME, XDG_RUNTIME_DIR), so no
# config of the user or of the host leaks in, and nothing is left in $HOME.
UDIR=$WORK/user
install -d -m 0700 -o "$BUID" -g "$BGID" "$UDIR" "$UDIR/config" "$UDIR/data" \
    "$UDIR/cache" "$UDIR/runtime" "$UDIR/tmp"
install -d -m 0755 -o "$BUID" -g "$BGID" "$UDIR/config/containers"

# Rootless podman on these machines (see the peers-baseline notes): no
# systemd, so cgroupfs and file events; host network (no /dev/net/tun);
# native rootless overlayfs; the loopback registry is plain HTTP.
cat > "$UDIR/config/containers/containers.conf" <<EOF
# written by bench/pull.sh
[containers]
netns = "host"

[engine]
cgroup_manager = "cgroupfs"
events_logger = "file"
EOF
cat > "$UDIR/config/containers/registries.conf" <<EOF
# written by bench/pull.sh
unqualified-search-registries = []

[[registry]]
location = "$REGISTRY"
insecure = true
EOF
cat > "$UDIR/config/containers/storage.conf" <<EOF
# written by bench/pull.sh; --root/--runroot are given on each run
[storage]
driver = "overlay"
EOF
# berth: an empty user config, and no site config, unless asked for.
install -d -m 0755 -o "$BUID" -g "$BGID" "$UDIR/config/berth"
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
rm -f "$UDIR/config/berth/berth.toml"
chown -R "$BUID:$BGID" "$UDIR/config"

# as_user CMD...: runs CMD as the unprivileged user with a clean, fixed
# environment (setpriv: no PAM session, so the switch itself costs ~1 ms).
as_user() {
    setpriv --reuid="$BUID" --regid="$BGID" --init-groups \
        env -i HOME="$BHOME" USER="$BENCH_USER" LOGNAME="$BENCH_USER" \
        PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin LANG=C.UTF-8 \
        XDG_CONFIG_HOME="$UDIR/config" XDG_DATA_HOME="$UDIR/data" \
        XDG_CACHE_HOME="$UDIR/cache" XDG_RUNTIME_DIR="$UDIR/runtime" \
        TMPDIR="$UDIR/tmp" BERTH_SYSTEM_CONFIG="$BERTH_SITE_CONF" \
        "$@"
}

registry_up() {
    [[ $(curl -s -o /dev/null -w '%{http_code}' "http://$REGISTRY/v2/" || true) == 200 ]]
}
if ! registry_up; then
    [[ $REGISTRY == 127.0.0.1:5000 ]] \
        || die "no registry answers on $REGISTRY (start one, or use the default 127.0.0.1:5000)"
    log "no registry on $REGISTRY: starting the test fixture (tests/setup/setup.sh)"
    "$REPO_ROOT/tests/setup/setup.sh" >&2 || die "tests/setup/setup.sh failed"
    registry_up || die "registry on $REGISTRY still not answering"
fi

# ---------------------------------------------------------------------------
# The image: debootstrap once, one gzip layer, push when the registry lacks it
# ---------------------------------------------------------------------------

# debian_mirror: the first URI of the apt source that serves bookworm itself
# (deb822 .sources first, then one-line sources.list).
debian_mirror() {
    local f uri
    for f in /etc/apt/sources.list.d/*.sources; do
        [[ -e $f ]] || continue
        uri=$(awk '
            /^[[:space:]]*$/ { if (ok && uri != "") exit; ok = 0; uri = ""; next }
            tolower($1) == "uris:"   { uri = $2 }
            tolower($1) == "suites:" { for (i = 2; i <= NF; i++) if ($i == "bookworm") ok = 1 }
            END { if (ok && uri != "") print uri }
        ' "$f")
        if [[ -n $uri ]]; then echo "$uri"; return 0; fi
    done
    cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null | awk '
        $1 == "deb" && / bookworm / && !found {
            for (i = 2; i <= NF; i++) if ($i ~ /^[a-z]+:\/\//) { print $i; found = 1; break }
        }'
}

ROOTFS=$WORK/rootfs
LAYOUT=$WORK/oci
TAG=bookworm

if ((REBUILD)); then rm -rf "$ROOTFS" "$ROOTFS.tmp" "$WORK/rootfs.done" "$LAYOUT" "$WORK/oci.done"; fi

if [[ ! -e $WORK/rootfs.done ]]; then
    [[ -n $MIRROR ]] || MIRROR=$(debian_mirror)
    [[ -n $MIRROR ]] || die "no bookworm source found in /etc/apt; pass --mirror URL"
    log "debootstrap minbase + python3 from $MIRROR (about 2 minutes)"
    rm -rf "$ROOTFS" "$ROOTFS.tmp" "$LAYOUT" "$WORK/oci.done"
    debootstrap --variant=minbase --include=python3 bookworm "$ROOTFS.tmp" "$MIRROR" \
        > "$WORK/logs/debootstrap.log" 2>&1 \
        || { tail -n 20 "$WORK/logs/debootstrap.log" >&2; die "debootstrap failed"; }
    # Like a registry image: no package caches or lists, and no device
    # nodes (rootless unpackers cannot create them).
    rm -rf "$ROOTFS.tmp"/var/cache/apt/archives/*.deb "$ROOTFS.tmp"/var/lib/apt/lists/*
    find "$ROOTFS.tmp" -xdev \( -type b -o -type c \) -delete
    mv "$ROOTFS.tmp" "$ROOTFS"
    echo "$MIRROR" > "$WORK/rootfs.done"
fi

if [[ ! -e $WORK/oci.done ]]; then
    log "packing the rootfs into an OCI layout (one gzip layer)"
    rm -rf "$LAYOUT"
    # Top-level names without a "./" prefix, as registry images have them.
    (cd "$ROOTFS" && ls -A | tar --numeric-owner --sort=name --xattrs -cf - -T -) \
        > "$WORK/layer.tar"
    umoci init --layout "$LAYOUT"
    umoci new --image "$LAYOUT:$TAG"
    umoci config --image "$LAYOUT:$TAG" --author "bench/pull.sh" \
        --config.env "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" \
        --config.cmd /usr/bin/python3
    umoci raw add-layer --image "$LAYOUT:$TAG" "$WORK/layer.tar"   # gzips it
    umoci gc --layout "$LAYOUT"
    rm -f "$WORK/layer.tar"
    touch "$WORK/oci.done"
fi

# The layout's manifest, and what the registry serves under the tag.
layout_manifest() {
    local idx digest
    idx=$(jq -r --arg t "$TAG" \
        '.manifests[] | select(.annotations["org.opencontainers.image.ref.name"] == $t) | .digest' \
        "$LAYOUT/index.json")
    digest=${idx#sha256:}
    cat "$LAYOUT/blobs/sha256/$digest"
}
want_layers=$(layout_manifest | jq -c '[.layers[].digest]')
have_layers=$(skopeo inspect --raw --tls-verify=false "docker://$IMAGE_REF" 2>/dev/null \
    | jq -c '[.layers[].digest]' 2>/dev/null || true)
if [[ $have_layers != "$want_layers" ]]; then
    log "pushing $IMAGE_REF"
    skopeo --insecure-policy copy --quiet --dest-tls-verify=false \
        "oci:$LAYOUT:$TAG" "docker://$IMAGE_REF" || die "push to $IMAGE_REF failed"
    have_layers=$(skopeo inspect --raw --tls-verify=false "docker://$IMAGE_REF" | jq -c '[.layers[].digest]')
    [[ $have_layers == "$want_layers" ]] || die "registry serves layers $have_layers, expected $want_layers"
fi

# Facts about the image for the report.
IMAGE_MANIFEST_DIGEST=sha256:$(skopeo inspect --raw --tls-verify=false "docker://$IMAGE_REF" | sha256sum | cut -d' ' -f1)
LAYER_BYTES=$(layout_manifest | jq '[.layers[].size] | add')
LAYER_COUNT=$(layout_manifest | jq '.layers | length')
ROOTFS_BYTES=$(du -sb "$ROOTFS" | cut -f1)
ROOTFS_ENTRIES=$(find "$ROOTFS" -mindepth 1 | wc -l)

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

# stop_podman_pause: rootless podman leaves a pause process (catatonit)
# behind to keep its user namespace; stop it between runs so that every run
# starts as cold as the first, and none is left at exit. Only the PID that
# podman recorded under this benchmark's XDG_RUNTIME_DIR is touched.
stop_podman_pause() {
    local f=$UDIR/runtime/libpod/tmp/pause.pid pid i
    [[ -e $f ]] || return 0
    pid=$(cat "$f")
    if [[ $pid =~ ^[0-9]+$ ]] && [[ $(stat -c %u "/proc/$pid" 2>/dev/null) == "$BUID" ]]; then
        kill -TERM "$pid" 2>/dev/null || true
        for ((i = 0; i < 50; i++)); do
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.1
        done
    fi
    rm -f "$f"
}
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
cmd_berth() {
    as_user "$WORK/bin/berth" --store "$RUNDIR/berth/store" \
        pull --tls-verify=false -q "$IMAGE_REF"
}
cmd_podman() {
    as_user podman --root "$RUNDIR/podman/root" --runroot "$RUNDIR/podman/runroot" \
        --storage-driver overlay pull --tls-verify=false -q "$IMAGE_REF"
}
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
version_of() { local v; v=$("$@" 2>/dev/null | sed -n 1p) || true; echo "${v:-unknown}"; }
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
    --arg git "$(git -C "$REPO_ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)$(git -C "$REPO_ROOT" diff --quiet HEAD 2>/dev/null || echo -dirty)" \
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
