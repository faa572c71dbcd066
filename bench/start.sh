#!/bin/bash
# Container start latency: berth against its peers, side by side.
#
# Times, as an unprivileged user, starting a container from the Debian
# bookworm minbase + python3 image of bench/pull.sh and running `true` or
# `python3 -c pass` in it:
#
#   berth        berth run, from the squashfs store, keeper warm (the image
#                stays mounted between starts)
#   berth-unpack berth's fallbacks of issue 20, each forced by a site file:
#   berth-binds  the image unpacked once per node instead of mounted
#   berth-fuse   (image_mount = "unpack"), a binds-only root instead of an
#                overlay (overlay = "none"), the root served by
#                fuse-overlayfs (overlay = "fuse"); read-only runs start
#                from the keeper's prepared root, built once
#   berth-rw     berth run --writable: a root of its own each start, on the
#   berth-fuse-rw  kernel's overlay or fuse-overlayfs (a server per start,
#                what a writable run gets where the kernel refuses overlayfs)
#   ch-run-dir   ch-run on an unpacked directory
#   ch-run-sqfs  ch-run on a squashfs file (squashfuse mount per start)
#   crun         crun run of a rootless OCI bundle (umoci unpack --rootless);
#                runc when crun cannot start here
#   podman       podman run --rm (rootless, overlay)
#   unshare      unshare -Urm --root=DIR CMD, DIR the unpacked image: the
#                floor (a user and a mount namespace and a chroot, no mounts)
#
# Every round starts each (tool, case) once; the order rotates from round to
# round, so drift in the neighbours' load hits every tool alike. Ratios
# berth/peer are taken per round, then summarised by their median.
#
# Usage (as root: it installs packages, prepares each tool's image once and
# switches to the unprivileged user for every timed command):
#
#   bench/start.sh [--runs N] [--smoke] [options]     see --help
#
# Results: bench/results/start-<UTC time>.{json,csv}, a markdown table on
# stdout, progress on stderr. The image comes from bench/pull.sh's cache
# (built there if missing); the tools' copies of it are cached under
# WORK/start, so a rerun only times.
set -Eeuo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO_ROOT=$(cd "$HERE/.." && pwd)
# berth and the helpers run as the unprivileged user: work from /, not
# from the caller's directory (a clone under a 0700 directory, say).
cd /
BENCH_NAME=start.sh
# shellcheck source-path=SCRIPTDIR source=lib/common.sh
. "$HERE/lib/common.sh"
# shellcheck source-path=SCRIPTDIR source=lib/node.sh
. "$HERE/lib/node.sh"

# ---------------------------------------------------------------------------
# Defaults and options
# ---------------------------------------------------------------------------
bench_defaults   # WORK BENCH_USER REGISTRY IMAGE_PATH BERTH_BIN RESULTS
RUNS=30
WARMUP=3
ALL_TOOLS=berth,berth-unpack,berth-binds,berth-fuse,berth-rw,berth-fuse-rw,ch-run-dir,ch-run-sqfs,crun,podman,unshare
TOOLS=$ALL_TOOLS
CASES=true,python
TIMING_RUNS=10
COLD_RUNS=10
HOST_FIXES=1
FRESH=0
SMOKE=0

usage() {
    cat <<EOF
usage: $0 [options]    (run as root)

  --runs N             measured rounds (default $RUNS)
  --warmup N           unrecorded rounds first, at least 1 (default $WARMUP)
  --smoke              3 rounds after 1 warm-up (for CI)
  --tools LIST         comma list of $ALL_TOOLS,runc
                       (default: all but runc, which stands in for crun
                       when crun cannot start)
  --cases LIST         comma list of true,python (default $CASES)
  --timing-runs N      extra untimed berth --timing starts per case, for the
                       phase breakdown (default $TIMING_RUNS; 0: none)
  --cold-runs N        rounds of berth's first starts on the node (no keeper
                       running) per case, each without and with the image's
                       read profile, after the warm rounds (default
                       $COLD_RUNS; 0: none)
  --berth PATH         berth binary (default target/release/berth)
  --registry H:P       loopback registry (default $REGISTRY)
  --user NAME          unprivileged user that runs the tools (default $BENCH_USER)
  --work-dir DIR       cache and scratch space (default $WORK)
  --results DIR        where JSON and CSV go (default bench/results)
  --no-host-fixes      do not chmod /dev/fuse 0666 or mount the hugetlb
                       cgroup v1 hierarchy crun needs here; peers that then
                       cannot start are reported as unavailable
  --fresh              prepare every tool's copy of the image again
EOF
}

bench_options --runs=RUNS --warmup=WARMUP --smoke:SMOKE=1 --tools=TOOLS --cases=CASES \
    --timing-runs=TIMING_RUNS --cold-runs=COLD_RUNS --no-host-fixes:HOST_FIXES=0 --fresh:FRESH=1 common -- "$@"
if ((SMOKE)); then RUNS=3; WARMUP=1; TIMING_RUNS=3; COLD_RUNS=1; fi
bench_int --runs "$RUNS"
bench_int --warmup "$WARMUP"
bench_int --timing-runs "$TIMING_RUNS" 0
bench_int --cold-runs "$COLD_RUNS" 0
bench_list TOOL_LIST "$TOOLS" "$ALL_TOOLS,runc" tool
bench_list CASE_LIST "$CASES" true,python case

bench_start "it installs packages and switches to user $BENCH_USER"

# ---------------------------------------------------------------------------
# Packages, user, registry, image
# ---------------------------------------------------------------------------
# jq is also the probe's marker: the host has it, the image does not.
install_packages charliecloud-runtime crun runc podman catatonit uidmap \
    fuse-overlayfs fuse3 squashfuse squashfs-tools umoci skopeo debootstrap \
    jq curl python3 ca-certificates

bench_user_setup
SW=$WORK/start
install -d -m 0755 -o "$BUID" -g "$BGID" "$SW"
# berth: built-in settings only (the keeper stays 30 s after its last user).
BERTH_SITE_CONF=$SW/berth-site.toml
echo "# written by bench/start.sh: berth's built-in settings" > "$BERTH_SITE_CONF"
# The fallbacks' site files, and a runtime directory each (keepers of one
# setting are not shared with another's runs).
declare -A VARIANT=([berth-unpack]='image_mount = "unpack"' [berth-binds]='overlay = "none"'
                    [berth-fuse]='overlay = "fuse"' [berth-rw]='overlay = "kernel"'
                    [berth-fuse-rw]='overlay = "fuse"')
for v in "${!VARIANT[@]}"; do
    printf '# written by bench/start.sh\n[runtime]\n%s\n' "${VARIANT[$v]}" > "$SW/$v.toml"
    install -d -m 0700 -o "$BUID" -g "$BGID" "$SW/run-$v"
done

ensure_registry
bench_image "$IMAGE_PATH" 0 ""

# Every tool's copy of the image is cached under $SW for this image.
if ((FRESH)) || [[ $(cat "$SW/image.digest" 2>/dev/null) != "$IMAGE_MANIFEST_DIGEST" ]]; then
    log "preparing the tools' images afresh under $SW"
    find "$SW" -mindepth 1 -maxdepth 1 ! -name berth-site.toml -exec rm -rf {} +
    echo "$IMAGE_MANIFEST_DIGEST" > "$SW/image.digest"
fi
install -d -m 0755 -o "$BUID" -g "$BGID" "$SW/logs"
STAMP=$(date -u +%Y%m%dT%H%M%SZ)
LOGS=$SW/logs/$STAMP
install -d -m 0755 -o "$BUID" -g "$BGID" "$LOGS"

install -d -m 0755 "$WORK/bin"
install -m 0755 "$HERE/lib/start-loop.py" "$WORK/bin/start-loop.py"
install -m 0644 "$HERE/lib/timed_starts.py" "$WORK/bin/timed_starts.py"
install -m 0755 "$HERE/lib/start-cold.py" "$WORK/bin/start-cold.py"

# ---------------------------------------------------------------------------
# Host set-up the peers need here (see the peers-baseline notes)
# ---------------------------------------------------------------------------
HOST_FIXES_DONE=()
fuse_fix

# hugetlb_fix: crun 1.8 refuses a hybrid cgroup layout ("cgroups in hybrid
# mode not supported") while the v2 hierarchy lists a controller that no v1
# hierarchy holds; on these machines that is hugetlb. Mounting it as v1
# takes it off the v2 list.
hugetlb_fix() {
    local unified=/sys/fs/cgroup/unified
    ((HOST_FIXES)) || return 1
    [[ -e $unified/cgroup.controllers ]] || return 1
    grep -qw hugetlb "$unified/cgroup.controllers" || return 1
    mkdir -p /sys/fs/cgroup/hugetlb
    mount -t cgroup -o hugetlb cgroup /sys/fs/cgroup/hugetlb || return 1
    log "mounted the hugetlb cgroup controller as v1 (crun: hybrid cgroups)"
    HOST_FIXES_DONE+=("mount -t cgroup -o hugetlb cgroup /sys/fs/cgroup/hugetlb")
}

# ---------------------------------------------------------------------------
# Tools: prepare each one's image (once), then probe that it starts
# ---------------------------------------------------------------------------
declare -A WHY=()       # tool -> why it cannot run here
declare -A HOW=()       # tool -> what is timed, in words
IMAGE_REF=$REGISTRY/$IMAGE_PATH
BUNDLE=$SW/bundle       # umoci unpack --rootless: shared by ch-run and crun
PODMAN=(podman --root "$SW/podman/root" --runroot "$SW/podman/runroot" --storage-driver overlay)
PODMAN_RUNTIME=         # empty: podman's default (crun)

# A copy of berth the user can surely execute, whatever the permissions of
# the checkout.
# shellcheck disable=SC2317   # called through setup's $prep
prep_berth() {
    [[ -x $BERTH_BIN ]] || { echo "no berth binary at $BERTH_BIN (cargo build --release, or --berth PATH)"; return 1; }
    install -m 0755 "$BERTH_BIN" "$WORK/bin/berth" || return 1
    if [[ -z $(as_user env BERTH_STORE="$SW/berth-store" "$WORK/bin/berth" images -q 2>/dev/null) ]]; then
        rm -rf "$SW/berth-store"
        as_user env BERTH_STORE="$SW/berth-store" "$WORK/bin/berth" \
            pull -q --tls-verify=false "$IMAGE_REF" || return 1
    fi
}

# The OCI layout of pull.sh is root's (mode 0600 files): the user unpacks a
# copy of it.
# shellcheck disable=SC2317   # called by prep_oci and prep_ch_* (setup's $prep)
prep_bundle() {
    [[ -e $SW/bundle.done ]] && return 0
    rm -rf "$SW/oci" "$BUNDLE"
    cp -r "$LAYOUT" "$SW/oci" && chown -R "$BUID:$BGID" "$SW/oci" || return 1
    as_user umoci unpack --rootless --image "$SW/oci:$TAG" "$BUNDLE" || return 1
    rm -rf "$SW/oci"
    touch "$SW/bundle.done"
}

# ch-run's directory and squashfs file (prep_ch_dir, prep_ch_sqfs).
# shellcheck source-path=SCRIPTDIR source=lib/charliecloud.sh
source "$HERE/lib/charliecloud.sh"

# One bundle per case for crun/runc: a config.json (terminal off, the
# case's command) whose root is the shared unpacked rootfs.
# shellcheck disable=SC2317   # called through setup's $prep
prep_oci() {
    local c args
    prep_bundle || return 1
    for c in "${CASE_LIST[@]}" probe; do
        args=$(case_argv "$c" | jq -R . | jq -cs .) || return 1
        install -d -m 0755 -o "$BUID" -g "$BGID" "$SW/oci-$c" || return 1
        jq --arg root "$BUNDLE/rootfs" --argjson args "$args" \
            '.process.terminal = false | .process.args = $args | .root.path = $root' \
            "$BUNDLE/config.json" > "$SW/oci-$c/config.json" || return 1
        chown "$BUID:$BGID" "$SW/oci-$c/config.json" || return 1
    done
    install -d -m 0700 -o "$BUID" -g "$BGID" "$SW/oci-state"
}

# shellcheck disable=SC2317   # called through setup's $prep
prep_podman() {
    if ! as_user "${PODMAN[@]}" image exists "$IMAGE_REF" 2>/dev/null; then
        rm -rf "$SW/podman"
        install -d -m 0755 -o "$BUID" -g "$BGID" "$SW/podman" || return 1
        as_user "${PODMAN[@]}" pull -q --tls-verify=false "$IMAGE_REF" > /dev/null || return 1
    fi
    # podman starts its containers with crun; runc when crun cannot start.
    if [[ -n ${WHY[crun]:-} ]] && command -v runc > /dev/null; then PODMAN_RUNTIME=runc; fi
}

# argv TOOL CASE: the command that starts CASE with TOOL, one word a line.
argv() {
    local tool=$1 c=$2 cmd rw=
    [[ $tool == *-rw ]] && rw=1
    mapfile -t cmd < <(case_argv "$c")
    case $tool in
        berth|berth-*) printf '%s\n' "$WORK/bin/berth" run ${rw:+--writable} "$IMAGE_REF" "${cmd[@]}" ;;
        ch-run-dir) printf '%s\n' ch-run "$SW/ch-dir" -- "${cmd[@]}" ;;
        ch-run-sqfs) printf '%s\n' ch-run "$SW/ch.sqfs" -- "${cmd[@]}" ;;
        crun|runc) printf '%s\n' "$tool" --root "$SW/oci-state/$tool" run --bundle "$SW/oci-$c" "bench-$c" ;;
        podman) printf '%s\n' "${PODMAN[@]}" ${PODMAN_RUNTIME:+--runtime "$PODMAN_RUNTIME"} run --rm "$IMAGE_REF" "${cmd[@]}" ;;
        unshare) printf '%s\n' unshare -Urm --root="$SW/ch-dir" "${cmd[@]}" ;;
    esac
}
# env_of TOOL: extra environment, as a JSON object.
env_of() {
    case $1 in
        berth) jq -cn --arg s "$SW/berth-store" '{BERTH_STORE: $s}' ;;
        berth-*) jq -cn --arg s "$SW/berth-store" --arg c "$SW/$1.toml" --arg r "$SW/run-$1" \
            '{BERTH_STORE: $s, BERTH_SYSTEM_CONFIG: $c, XDG_RUNTIME_DIR: $r}' ;;
        *) echo '{}' ;;
    esac
}

# run_as TOOL CASE: one start, as the user, from / (the user cannot read
# root's working directory).
run_as() {
    local a=() e=()
    mapfile -t a < <(argv "$1" "$2")
    mapfile -t e < <(env_of "$1" | jq -r 'to_entries[] | "\(.key)=\(.value)"')
    (cd / && as_user env "${e[@]}" "${a[@]}")
}

# probe TOOL: every case starts once, and the probe runs inside the image.
# On failure, the last line says which and why.
probe() {
    local tool=$1 c out
    for c in "${CASE_LIST[@]}" probe; do
        if ! out=$(run_as "$tool" "$c" < /dev/null 2>&1 > /dev/null); then
            echo "$out"
            echo "${c/probe/the image check} failed: $(grep -v '^[[:space:]]*$' <<< "${out:-no message}" | tail -n 1)"
            return 1
        fi
    done
}

# setup TOOL: prepare and probe; on failure, WHY[TOOL] is the last line of
# its log.
setup() {
    local tool=$1 logf=$LOGS/setup-$1.log prep='' exe=$1
    case $tool in
        berth|berth-*) prep=prep_berth; exe=install ;;   # prep_berth checks the binary
        ch-run-dir|unshare) prep=prep_ch_dir; exe=${tool/-dir} ;;
        ch-run-sqfs) prep=prep_ch_sqfs; exe=ch-run ;;
        crun|runc) prep=prep_oci ;;
        podman) prep=prep_podman ;;
    esac
    log "preparing $tool"
    if ! command -v "$exe" > /dev/null; then
        WHY[$tool]="$exe is not installed"
    elif [[ -n $prep ]] && ! $prep > "$logf" 2>&1; then
        WHY[$tool]="set-up failed: $(grep -v '^[[:space:]]*$' "$logf" | tail -n 1)"
    elif ! probe "$tool" >> "$logf" 2>&1; then
        WHY[$tool]="$(tail -n 1 "$logf")"
    fi
    if [[ -n ${WHY[$tool]:-} ]]; then
        log "$tool cannot run here: ${WHY[$tool]} (log: $logf)"
        return 1
    fi
}

for ((i = 0; i < ${#TOOL_LIST[@]}; i++)); do   # the list may grow (runc)
    tool=${TOOL_LIST[i]}
    setup "$tool" && continue
    # crun, and podman through it, retry once after the host fix for
    # crun's cgroup complaint.
    if grep -q 'hybrid mode' "$LOGS/setup-$tool.log" && hugetlb_fix; then
        unset "WHY[$tool]"
        setup "$tool" || true
    fi
    if [[ $tool == crun && -n ${WHY[crun]:-} && " ${TOOL_LIST[*]} " != *" runc "* ]]; then
        log "falling back to runc for the OCI runtime"
        TOOL_LIST+=(runc)
    fi
done
READY=()                # the tools that start here, berth first
for tool in berth "${TOOL_LIST[@]}"; do
    if [[ " ${TOOL_LIST[*]} " == *" $tool "* && -z ${WHY[$tool]:-} && " ${READY[*]} " != *" $tool "* ]]; then
        READY+=("$tool")
    fi
done
[[ ${#READY[@]} -gt 0 ]] || die "no tool can start a container here"

# shellcheck disable=SC2034   # HOW is read through json_map's nameref
{
    HOW[berth]="berth run (squashfs store, keeper warm)"
    HOW[berth-unpack]="berth run, image unpacked once per node (image_mount = \"unpack\")"
    HOW[berth-binds]="berth run, binds-only root (overlay = \"none\")"
    HOW[berth-fuse]="berth run, root through fuse-overlayfs (overlay = \"fuse\")"
    HOW[berth-rw]="berth run --writable (kernel overlay, a root per start)"
    HOW[berth-fuse-rw]="berth run --writable through fuse-overlayfs (a server per start)"
    HOW[ch-run-dir]="ch-run, unpacked directory"
    HOW[ch-run-sqfs]="ch-run, squashfs (squashfuse mount per start)"
    HOW[crun]="crun run, rootless bundle (umoci unpack --rootless)"
    HOW[runc]="runc run, rootless bundle (umoci unpack --rootless)"
    HOW[podman]="podman run --rm (rootless, overlay${PODMAN_RUNTIME:+, runtime $PODMAN_RUNTIME})"
    HOW[unshare]="unshare -Urm --root=DIR (floor: no mounts, same directory as ch-run-dir)"
}

# ---------------------------------------------------------------------------
# berth's keeper: start the run with none, so that the first warm-up start
# is a cold one (recorded apart), and watch its pid file during the rounds.
# ---------------------------------------------------------------------------
KEEPER_DIR=
if [[ " ${READY[*]} " == *" berth "* ]]; then
    id=$(as_user env BERTH_STORE="$SW/berth-store" "$WORK/bin/berth" inspect "$IMAGE_REF" | jq -r .id)
    KEEPER_DIR=$(keeper_dir "$UDIR/runtime" "$id")
fi

# cleanup: berth's keeper for the image, if it runs (node.sh's stop_keeper:
# stopping its squashfs server makes the keeper leave by its own exit
# path; a signal to the keeper itself works too, but leaves its pid file
# behind), and podman's pause process.
cleanup() {
    if [[ -n $KEEPER_DIR ]]; then stop_keeper "$KEEPER_DIR" || true; fi
    for v in "${!VARIANT[@]}"; do
        if [[ -n $KEEPER_DIR ]]; then stop_keeper "$SW/run-$v/berth/keepers/${KEEPER_DIR##*/}" || true; fi
    done
    stop_podman_pause
}
trap cleanup EXIT
cleanup

# ---------------------------------------------------------------------------
# Rounds
# ---------------------------------------------------------------------------
SPEC=$LOGS/spec.json
RAW=$LOGS/raw.tsv
# berth first: the first start of the first warm-up round is berth's cold
# start.
: > "$LOGS/commands.jsonl"
for c in "${CASE_LIST[@]}"; do
    for tool in "${READY[@]}"; do
        jq -cn --arg tool "$tool" --arg case "$c" --argjson env "$(env_of "$tool")" \
            --argjson argv "$(argv "$tool" "$c" | jq -R . | jq -cs .)" \
            '{tool: $tool, case: $case, argv: $argv, env: $env}' >> "$LOGS/commands.jsonl"
    done
done
jq -s --argjson runs "$RUNS" --argjson warmup "$WARMUP" --arg logs "$LOGS" \
    --arg watch "${KEEPER_DIR:+$KEEPER_DIR/pid}" \
    '{runs: $runs, warmup: $warmup, cwd: "/", log_dir: $logs, watch: $watch, commands: .}' \
    "$LOGS/commands.jsonl" > "$SPEC"

LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
log "$WARMUP warm-up + $RUNS measured rounds of ${#READY[@]} tools x ${#CASE_LIST[@]} cases"
(cd / && as_user python3 "$WORK/bin/start-loop.py" "$SPEC" "$RAW")
LOAD_AFTER=$(cut -d' ' -f1-3 /proc/loadavg)

# berth's first starts on the node (no keeper), without and with the
# image's read profile, apart from the timed rounds.
COLD=$LOGS/cold.tsv
if [[ -n $KEEPER_DIR ]] && ((COLD_RUNS > 0)); then
    log "$COLD_RUNS rounds of berth's first starts (no keeper), without and with a read profile"
    (cd / && as_user python3 "$WORK/bin/start-cold.py" "$SPEC" "$KEEPER_DIR" \
        "$UDIR/runtime/berth/profiles/${id#sha256:}" "$COLD_RUNS" "$COLD" \
        "$(find "$SW/berth-store" -name image.sqfs -print -quit)") ||
        log "the cold rounds failed (see $LOGS/berth-cold-*.log); reporting the rest"
fi

# berth's own account of a start (--timing), apart from the timed rounds.
PHASES=$LOGS/berth-phases.txt
: > "$PHASES"
if [[ -n $KEEPER_DIR ]] && ((TIMING_RUNS > 0)); then
    for c in "${CASE_LIST[@]}"; do
        for ((i = 0; i < TIMING_RUNS; i++)); do
            mapfile -t words < <(argv berth "$c")
            (cd / && as_user env BERTH_STORE="$SW/berth-store" BERTH_TIMING=1 "${words[@]}" \
                2>&1 > /dev/null < /dev/null | sed -n "s/^berth timing: /$c /p") >> "$PHASES" || true
        done
    done
fi

# ---------------------------------------------------------------------------
# Report
# ---------------------------------------------------------------------------
sqfs_params() {
    unsquashfs -s "$1" 2>/dev/null | awk '
        /^Compression / { c = $2 }
        /^Block size /  { b = $3 }
        END { print c, b }'
}
BERTH_SQFS=$(find "$SW/berth-store" -name image.sqfs -print -quit 2>/dev/null || true)

mkdir -p "$RESULTS"
META=$LOGS/meta.json
jq -n \
    --arg stamp "$STAMP" --arg image "$IMAGE_REF" --arg manifest "$IMAGE_MANIFEST_DIGEST" \
    --argjson layer_bytes "$LAYER_BYTES" --argjson rootfs_bytes "$ROOTFS_BYTES" \
    --argjson rootfs_entries "$ROOTFS_ENTRIES" \
    --argjson runs "$RUNS" --argjson warmup "$WARMUP" --argjson smoke "$SMOKE" \
    --arg cases "${CASE_LIST[*]}" --arg tools "${READY[*]}" --arg user "$BENCH_USER" \
    --argjson how "$(json_map HOW)" --argjson why "$(json_map WHY)" \
    --arg fixes "$(printf '%s\n' "${HOST_FIXES_DONE[@]}")" --argjson host_fixes "$HOST_FIXES" \
    --arg argv_true "$(argv berth true | paste -sd ' ')" \
    --arg argv_python "$(argv berth python | paste -sd ' ')" \
    --arg kernel "$(uname -r)" --arg cpus "$(nproc)" \
    --arg cpu_model "$(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo)" \
    --arg cgroups "$(stat -fc %T /sys/fs/cgroup)" \
    --arg hugetlb_v1 "$(findmnt -n -t cgroup -O hugetlb -o TARGET || true)" \
    --arg fuse_mode "$(stat -c %a /dev/fuse 2>/dev/null || echo missing)" \
    --arg load_before "$LOAD_BEFORE" --arg load_after "$LOAD_AFTER" \
    --arg berth_version "$( [[ -n $KEEPER_DIR ]] && version_of "$WORK/bin/berth" --version || echo "berth (not run)")" \
    --arg berth_sha256 "$( [[ -n $KEEPER_DIR ]] && sha256sum "$WORK/bin/berth" | cut -d' ' -f1 || echo n/a)" \
    --arg git "$(git_describe)" \
    --arg berth_sqfs "$( [[ -n $BERTH_SQFS ]] && sqfs_params "$BERTH_SQFS" || echo unknown)" \
    --arg ch_sqfs "$( [[ -e $SW/ch.sqfs ]] && sqfs_params "$SW/ch.sqfs" || echo unknown)" \
    --arg ch_run "$(as_user ch-run --version 2>&1 | sed -n 1p)" --arg crun "$(version_of crun --version)" \
    --arg runc "$(version_of runc --version)" --arg podman "$(version_of podman --version)" \
    --arg squashfuse "$(dpkg-query -W -f='${Version}' squashfuse 2>/dev/null || echo unknown)" \
    --arg umoci "$(version_of umoci --version)" \
    '{benchmark: "start-latency", time_utc: $stamp,
      image: {ref: $image, manifest_digest: $manifest, compressed_bytes: $layer_bytes,
              rootfs_bytes: $rootfs_bytes, rootfs_entries: $rootfs_entries},
      runs: $runs, warmup: $warmup, smoke: ($smoke == 1), user: $user,
      cases: ($cases | split(" ")), tools: ($tools | split(" ") | map(select(. != ""))),
      how: $how, unavailable: $why,
      berth_argv: {true: $argv_true, python: $argv_python},
      host: {kernel: $kernel, cpus: ($cpus | tonumber), cpu_model: $cpu_model,
             cgroup_fs: $cgroups, hugetlb_v1_mount: $hugetlb_v1, dev_fuse_mode: $fuse_mode,
             loadavg_before: $load_before, loadavg_after: $load_after,
             fixes_allowed: ($host_fixes == 1),
             fixes_applied: ($fixes | split("\n") | map(select(. != "")))},
      berth: {version: $berth_version, sha256: $berth_sha256, git: $git,
              squashfs: $berth_sqfs},
      ch_run_squashfs: $ch_sqfs,
      versions: {ch_run: $ch_run, crun: $crun, runc: $runc, podman: $podman,
                 squashfuse: $squashfuse, umoci: $umoci}}' > "$META"

status=0
python3 "$HERE/lib/start-report.py" "$RAW" "$META" "$PHASES" "$RESULTS/start-$STAMP" "$COLD" || status=$?
# A peer that cannot run here is reported; berth itself must run.
if [[ -n ${WHY[berth]:-} ]]; then status=1; fi
log "results: $RESULTS/start-$STAMP.json, $RESULTS/start-$STAMP.csv (logs: $LOGS)"
exit "$status"
