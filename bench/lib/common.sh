# Shared set-up for the benchmarks in bench/ (sourced by the scripts that
# run as root and switch to an unprivileged user for every timed command).
#
# The sourcing script sets, before sourcing this file:
#   BENCH_NAME       prefix of log lines ("pull.sh")
#   REPO_ROOT        the checkout (for tests/setup/setup.sh)
# then calls bench_defaults, which sets (options may change them):
#   WORK             cache and scratch space (default /var/tmp/berth-bench)
#   BENCH_USER       the unprivileged user (default berthtest)
#   REGISTRY         the loopback registry, HOST:PORT
# and, before as_user:
#   BERTH_SITE_CONF  the berth site config the user's berth reads
#
# A benchmark's prologue, after sourcing:
#   bench_defaults; its own defaults; usage() { ...; }
#   bench_options SPEC... -- "$@"; its checks (bench_int, bench_list)
#   bench_start "what it needs root for"
#
# Functions set these globals:
#   bench_defaults     WORK BENCH_USER REGISTRY IMAGE_PATH BIN_DIR BERTH_BIN
#                      RESULTS
#   bench_options      the variables its SPECs name
#   bench_list         the array it is given
#   bench_user_setup   BUID BGID BHOME UDIR
#   bench_image        ROOTFS LAYOUT TAG IMAGE_REF IMAGE_MANIFEST_DIGEST
#                      LAYER_BYTES LAYER_COUNT ROOTFS_BYTES ROOTFS_ENTRIES
# shellcheck shell=bash disable=SC2034   # the globals are for the caller

log() { echo "$BENCH_NAME: $*" >&2; }
die() { echo "$BENCH_NAME: ERROR: $*" >&2; exit 1; }

# bench_defaults: the defaults every benchmark shares; the environment
# variables BERTH_BENCH_WORK, BERTH_BENCH_USER and BERTH_BENCH_BIN_DIR
# (bench/run.sh --bin-dir) override theirs.
bench_defaults() {
    WORK=${BERTH_BENCH_WORK:-/var/tmp/berth-bench}
    BENCH_USER=${BERTH_BENCH_USER:-berthtest}
    REGISTRY=127.0.0.1:5000
    IMAGE_PATH=bench/debian-python:bookworm    # pull.sh's image
    BIN_DIR=${BERTH_BENCH_BIN_DIR:-$REPO_ROOT/target/release}
    BERTH_BIN=$BIN_DIR/berth
    RESULTS=$REPO_ROOT/bench/results
}

# bench_options SPEC... -- ARG...: parses the command line ARG... by the
# SPECs, one an option:
#   --name=VAR        an option with a value, stored in VAR
#   --name:VAR=VALUE  a flag: sets VAR to VALUE
#   common            the options of bench_defaults' globals: --berth PATH,
#                     --registry H:P, --user NAME, --work-dir DIR and
#                     --results DIR
# -h and --help print usage (the script's function) and exit 0; anything
# else is an error: a line and usage on stderr, exit status 2.
bench_options() {
    local specs=() spec name var
    while (($#)) && [[ $1 != -- ]]; do
        if [[ $1 == common ]]; then
            specs+=(--berth=BERTH_BIN --registry=REGISTRY --user=BENCH_USER
                    --work-dir=WORK --results=RESULTS)
        else
            specs+=("$1")
        fi
        shift
    done
    shift   # --
    while (($#)); do
        if [[ $1 == -h || $1 == --help ]]; then usage; exit 0; fi
        for spec in "${specs[@]}"; do
            name=${spec%%[=:]*}
            [[ $1 == "$name" ]] || continue
            if [[ ${spec:${#name}:1} == = ]]; then
                if (($# < 2)); then
                    echo "$BENCH_NAME: $1 needs a value" >&2
                    usage >&2
                    exit 2
                fi
                printf -v "${spec#*=}" '%s' "$2"
                shift
            else
                var=${spec#*:}
                printf -v "${var%%=*}" '%s' "${var#*=}"
            fi
            shift
            continue 2
        done
        echo "$BENCH_NAME: unknown option $1" >&2
        usage >&2
        exit 2
    done
}

# bench_int OPTION VALUE [MIN]: exits (status 2) unless VALUE is a whole
# number of at least MIN, 1 (the default) or 0.
bench_int() {
    if [[ ${3:-1} == 0 ]]; then
        [[ $2 =~ ^[0-9]+$ ]] || { echo "$1 must be a non-negative integer" >&2; exit 2; }
    else
        [[ $2 =~ ^[1-9][0-9]*$ ]] || { echo "$1 must be a positive integer" >&2; exit 2; }
    fi
}

# bench_list ARRAY LIST ALLOWED WHAT: splits the comma list LIST into the
# array ARRAY; exits (status 2) on an element that the comma list ALLOWED
# does not have ("unknown WHAT: ELEMENT").
bench_list() {
    local -n bench_list_out=$1
    local x
    IFS=, read -r -a bench_list_out <<< "$2"
    for x in "${bench_list_out[@]}"; do
        [[ ,$3, == *,"$x",* ]] || { echo "unknown $4: $x" >&2; exit 2; }
    done
}

# bench_start WHY: what every benchmark does once its options are read: a
# line naming the command that failed on any error, root or an error
# saying what for (WHY), umask 022.
bench_start() {
    trap 'echo "$BENCH_NAME: FAILED at line $LINENO: $BASH_COMMAND" >&2' ERR
    [[ $(id -u) == 0 ]] || die "run as root ($1)"
    umask 022
}

# The test suite's host provisioning: install_packages PKG... (those
# missing, without recommends) and test_user NAME (the user and its
# subordinate ids). apt-get's output goes to stderr: stdout is the report.
APT_OUTPUT_FD=2
# shellcheck source=tests/setup/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../../tests/setup/lib.sh"

# bench_user_setup: the user and its subordinate ids (made as
# tests/setup/setup.sh makes them), and its private state under WORK/user.
bench_user_setup() {
    test_user "$BENCH_USER"
    BUID=$(id -u "$BENCH_USER")
    BGID=$(id -g "$BENCH_USER")
    BHOME=$(getent passwd "$BENCH_USER" | cut -d: -f6)

    mkdir -p "$WORK" "$WORK/logs"
    chmod 0755 "$WORK"

    # The user's state for the benchmarks lives under $WORK/user (its own
    # XDG_CONFIG_HOME, XDG_DATA_HOME, XDG_CACHE_HOME, XDG_RUNTIME_DIR), so
    # no config of the user or of the host leaks in, and nothing is left in
    # $HOME.
    UDIR=$WORK/user
    install -d -m 0700 -o "$BUID" -g "$BGID" "$UDIR" "$UDIR/config" "$UDIR/data" \
        "$UDIR/cache" "$UDIR/runtime" "$UDIR/tmp"
    install -d -m 0755 -o "$BUID" -g "$BGID" "$UDIR/config/containers"

    # Rootless podman on these machines (see the peers-baseline notes): no
    # systemd, so cgroupfs and file events; host network (no /dev/net/tun);
    # native rootless overlayfs; the loopback registry is plain HTTP.
    cat > "$UDIR/config/containers/containers.conf" <<EOF
# written by bench/lib/common.sh
[containers]
netns = "host"

[engine]
cgroup_manager = "cgroupfs"
events_logger = "file"
EOF
    cat > "$UDIR/config/containers/registries.conf" <<EOF
# written by bench/lib/common.sh
unqualified-search-registries = []

[[registry]]
location = "$REGISTRY"
insecure = true
EOF
    cat > "$UDIR/config/containers/storage.conf" <<EOF
# written by bench/lib/common.sh; --root/--runroot are given on each run
[storage]
driver = "overlay"
EOF
    # berth: an empty user config; each benchmark writes its own site
    # config (BERTH_SITE_CONF), so host-wide settings do not leak in.
    install -d -m 0755 -o "$BUID" -g "$BGID" "$UDIR/config/berth"
    rm -f "$UDIR/config/berth/berth.toml"
    chown -R "$BUID:$BGID" "$UDIR/config"
}

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

# ensure_registry: starts the registry test fixture when nothing answers on
# the default address.
ensure_registry() {
    registry_up && return 0
    [[ $REGISTRY == 127.0.0.1:5000 ]] \
        || die "no registry answers on $REGISTRY (start one, or use the default 127.0.0.1:5000)"
    log "no registry on $REGISTRY: starting the test fixture (tests/setup/setup.sh)"
    "$REPO_ROOT/tests/setup/setup.sh" >&2 || die "tests/setup/setup.sh failed"
    registry_up || die "registry on $REGISTRY still not answering"
}

# ensure_bench_image: pull.sh's image (bench/debian-python:bookworm) in the
# registry, built and pushed by a smoke run of pull.sh when it is missing.
ensure_bench_image() {
    ensure_registry
    [[ $(curl -s -o /dev/null -w '%{http_code}' -H 'Accept: application/vnd.oci.image.manifest.v1+json' \
        "http://$REGISTRY/v2/${IMAGE_PATH%:*}/manifests/${IMAGE_PATH##*:}" 2>/dev/null) == 200 ]] && return 0
    log "no base image in the registry: running bench/pull.sh --smoke --tools berth to build and push it"
    "$REPO_ROOT/bench/pull.sh" --smoke --tools berth > /dev/null
}

# need_base_layout: pull.sh's image as an OCI layout (WORK/oci), made by a
# smoke run of pull.sh when it is not there yet.
need_base_layout() {
    [[ -e $WORK/oci.done ]] && return 0
    log "no base image yet: running bench/pull.sh --smoke --tools berth to build it"
    "$REPO_ROOT/bench/pull.sh" --smoke --tools berth > /dev/null
}

# shellcheck source=tests/setup/debian_mirror.sh
source "$(dirname "${BASH_SOURCE[0]}")/../../tests/setup/debian_mirror.sh"

# layout_manifest: the OCI layout's manifest for TAG.
layout_manifest() {
    local idx digest
    idx=$(jq -r --arg t "$TAG" \
        '.manifests[] | select(.annotations["org.opencontainers.image.ref.name"] == $t) | .digest' \
        "$LAYOUT/index.json")
    digest=${idx#sha256:}
    cat "$LAYOUT/blobs/sha256/$digest"
}

# bench_image IMAGE_PATH REBUILD MIRROR: the benchmark image, built once and
# cached under WORK (debootstrap minbase + python3, one gzip layer in an OCI
# layout), and pushed to REGISTRY/IMAGE_PATH when the registry lacks it.
bench_image() {
    local image_path=$1 rebuild=$2 mirror=$3 want_layers have_layers
    ROOTFS=$WORK/rootfs
    LAYOUT=$WORK/oci
    TAG=bookworm
    IMAGE_REF=$REGISTRY/$image_path

    if ((rebuild)); then rm -rf "$ROOTFS" "$ROOTFS.tmp" "$WORK/rootfs.done" "$LAYOUT" "$WORK/oci.done"; fi

    # The test suite's set-up builds the same tree (minbase + python3) for
    # its own image: when it is there and no mirror was asked for, copy it
    # rather than run debootstrap again (CI runs both).
    local it_cache=${BERTH_IT_CACHE:-/var/tmp/berth-it-cache}
    if [[ ! -e $WORK/rootfs.done && -z $mirror && -e $it_cache/rootfs.done ]]; then
        log "copying the test suite's Debian tree ($it_cache)"
        rm -rf "$ROOTFS" "$ROOTFS.tmp" "$LAYOUT" "$WORK/oci.done"
        cp -a "$it_cache/debian-python-rootfs" "$ROOTFS.tmp"
        rm -rf "$ROOTFS.tmp/srv/app"   # the tests' working directory
        mv "$ROOTFS.tmp" "$ROOTFS"
        echo "copy of $it_cache/debian-python-rootfs" > "$WORK/rootfs.done"
    fi
    if [[ ! -e $WORK/rootfs.done ]]; then
        [[ -n $mirror ]] || mirror=$(debian_mirror)
        [[ -n $mirror ]] || die "no bookworm source found in /etc/apt; pass --mirror URL"
        log "debootstrap minbase + python3 from $mirror (about 2 minutes)"
        rm -rf "$ROOTFS" "$ROOTFS.tmp" "$LAYOUT" "$WORK/oci.done"
        debootstrap --variant=minbase --include=python3 bookworm "$ROOTFS.tmp" "$mirror" \
            > "$WORK/logs/debootstrap.log" 2>&1 \
            || { tail -n 20 "$WORK/logs/debootstrap.log" >&2; die "debootstrap failed"; }
        # Like a registry image: no package caches or lists, and no device
        # nodes (rootless unpackers cannot create them).
        rm -rf "$ROOTFS.tmp"/var/cache/apt/archives/*.deb "$ROOTFS.tmp"/var/lib/apt/lists/*
        find "$ROOTFS.tmp" -xdev \( -type b -o -type c \) -delete
        mv "$ROOTFS.tmp" "$ROOTFS"
        echo "$mirror" > "$WORK/rootfs.done"
    fi

    if [[ ! -e $WORK/oci.done ]]; then
        log "packing the rootfs into an OCI layout (one gzip layer)"
        rm -rf "$LAYOUT"
        # Top-level names without a "./" prefix, as registry images have them.
        # shellcheck disable=SC2012   # debootstrap's top-level names are plain; ls sorts them
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

    # Facts about the image for the reports.
    IMAGE_MANIFEST_DIGEST=sha256:$(skopeo inspect --raw --tls-verify=false "docker://$IMAGE_REF" | sha256sum | cut -d' ' -f1)
    LAYER_BYTES=$(layout_manifest | jq '[.layers[].size] | add')
    LAYER_COUNT=$(layout_manifest | jq '.layers | length')
    ROOTFS_BYTES=$(du -sb "$ROOTFS" | cut -f1)
    ROOTFS_ENTRIES=$(find "$ROOTFS" -mindepth 1 | wc -l)
}

# stop_podman_pause: rootless podman leaves a pause process (catatonit)
# behind to keep its user namespace. Only the PID that podman recorded under
# the benchmark's XDG_RUNTIME_DIR is touched.
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

# json_map ARRAY_NAME: a bash associative array as a JSON object.
json_map() {
    local -n map=$1
    local k out='{}'
    for k in "${!map[@]}"; do
        out=$(jq -c --arg k "$k" --arg v "${map[$k]}" '. + {($k): $v}' <<< "$out")
    done
    echo "$out"
}

# version_of CMD...: the first line CMD prints, or "unknown".
version_of() { local v; v=$("$@" 2>/dev/null | sed -n 1p) || true; echo "${v:-unknown}"; }

# git_describe: the checkout's short commit, "-dirty" when it has changes.
git_describe() {
    echo "$(git -C "$REPO_ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)$(
        git -C "$REPO_ROOT" diff --quiet HEAD 2>/dev/null || echo -dirty)"
}
