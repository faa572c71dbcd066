#!/bin/bash
# File access inside a berth container against the same image content read
# other ways.
#
#   berth   berth run IMAGE sh -c WORKLOAD: the image through berth's
#           per-image keeper (its squashfs server: berth's own, or
#           squashfuse_ll with --squashfs-server squashfuse_ll) and the
#           container's overlay
#   kernel  the same commands run natively against a kernel squashfs loop
#           mount (mount -t squashfs -o loop,ro, as root) of berth's own
#           image file
#   host    the same commands run natively against the unpacked directory
#           (pull.sh's rootfs for the Debian image; the data files as
#           written)
#
# Workloads (the time is taken inside the container or shell, so berth's
# start-up is not in it; the time of the whole command is recorded too):
#
#   read    cat FILES > /dev/null: sequential read of N large files of
#           incompressible data (default 4 x 256 MiB), in MB/s
#   find    find /usr -xdev -printf '%s\n' | wc -l over the Debian image
#   stat    find /usr -xdev -print0 | xargs -0 stat -c %s: a stat(1) of
#           every entry, each by its full path
#
# Each is run twice in a row from a fresh mount: "cold" (berth: no keeper
# before the run; kernel: a new loop mount) and "warm" (the same mount
# again). Cold means cold-ish: the image file itself stays in the page
# cache unless --drop-caches is given, so "cold" times decompression and
# the mount's own caches, not the disk. The host directory has no mount to
# renew: it is measured warm only (after one unsummarised "prime" run), and
# cold as well with --drop-caches.
#
# The methods run one after another in every round, their order rotating
# from round to round; ratios are taken per round, then summarised by
# their median. Target: berth within 0.8x of the kernel mount
# (berth_time <= kernel_time / 0.8).
#
# Usage (as root: it builds the data image once, makes the loop mounts and
# switches to the unprivileged user for every timed command):
#
#   bench/fileaccess.sh [--runs N] [--smoke] [options]     see --help
#
# Results: bench/results/fileaccess-<UTC>.{json,csv}, a markdown report on
# stdout, progress on stderr. The data files and the image are cached under
# WORK/fileaccess, so a rerun only times.
set -Eeuo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO_ROOT=$(cd "$HERE/.." && pwd)
BENCH_NAME=fileaccess.sh
# shellcheck source-path=SCRIPTDIR source=lib/common.sh
. "$HERE/lib/common.sh"
# shellcheck source-path=SCRIPTDIR source=lib/node.sh
. "$HERE/lib/node.sh"

# ---------------------------------------------------------------------------
# Defaults and options
# ---------------------------------------------------------------------------
bench_defaults   # WORK BENCH_USER REGISTRY IMAGE_PATH BERTH_BIN RESULTS
RUNS=5
FILES=4
FILE_MIB=256
METHODS=berth,kernel,host
WORKLOADS=read,find,stat
DROP_CACHES=0
HOST_FIXES=1
SMOKE=0
SQUASHFS_SERVER=berth
NO_VERIFY=0

usage() {
    cat <<EOF
usage: $0 [options]    (run as root)

  --runs N             measured rounds (default $RUNS)
  --smoke              1 round, 4 files of 16 MiB (for CI)
  --files N            number of large files (default $FILES)
  --file-mib M         size of each, MiB (default $FILE_MIB)
  --methods LIST       comma list of berth,kernel,host (default $METHODS)
  --workloads LIST     comma list of read,find,stat (default $WORKLOADS)
  --drop-caches        drop the page cache before every cold run (whole
                       node: the image file and the host files are read
                       from disk; the host method gets a cold run too)
  --berth PATH         berth binary (default target/release/berth)
  --registry H:P       loopback registry, only used when pull.sh's image
                       is not cached yet (default $REGISTRY)
  --user NAME          unprivileged user that runs the commands (default $BENCH_USER)
  --work-dir DIR       cache and scratch space (default $WORK)
  --results DIR        where JSON and CSV go (default bench/results)
  --no-host-fixes      do not chmod /dev/fuse 0666
  --squashfs-server S  berth's image server: berth (default) or squashfuse_ll
  --no-verify          berth's server without verified reads
                       (BERTH_SQUASHFS_VERIFY=0), to measure their cost
EOF
}

bench_options --runs=RUNS --smoke:SMOKE=1 --files=FILES --file-mib=FILE_MIB \
    --methods=METHODS --workloads=WORKLOADS --drop-caches:DROP_CACHES=1 \
    --no-host-fixes:HOST_FIXES=0 --squashfs-server=SQUASHFS_SERVER \
    --no-verify:NO_VERIFY=1 common -- "$@"
if ((SMOKE)); then RUNS=1; FILES=4; FILE_MIB=16; fi
bench_int --runs "$RUNS"
bench_int --files "$FILES"
bench_int --file-mib "$FILE_MIB"
bench_list METHOD_LIST "$METHODS" berth,kernel,host method
bench_list WORKLOAD_LIST "$WORKLOADS" read,find,stat workload

bench_start "it mounts the image file and switches to user $BENCH_USER"

# ---------------------------------------------------------------------------
# Packages, user, base image
# ---------------------------------------------------------------------------
install_packages squashfs-tools squashfuse fuse3 umoci uidmap jq curl python3 \
    skopeo debootstrap ca-certificates

bench_user_setup
HOST_FIXES_DONE=()
fuse_fix

FA=$WORK/fileaccess
install -d -m 0755 "$FA" "$FA/bin"
install -d -m 0755 -o "$BUID" -g "$BGID" "$FA/logs"
STORE=$FA/store                 # berth's store (the user's)
RT=$FA/runtime                  # the user's XDG_RUNTIME_DIR here: its own keepers
MNT=$FA/mnt                     # the kernel loop mount
install -d -m 0700 -o "$BUID" -g "$BGID" "$STORE" "$RT"
install -d -m 0755 "$MNT"
# berth: built-in settings, but the keeper stays long enough for every warm
# run (cold runs stop it on purpose).
BERTH_SITE_CONF=$FA/berth-site.toml
cat > "$BERTH_SITE_CONF" <<'EOF'
# written by bench/fileaccess.sh: built-in settings, a keeper that outlives the rounds
[runtime]
keeper_idle_seconds = 900
EOF
echo "squashfs_server = \"$SQUASHFS_SERVER\"" >> "$BERTH_SITE_CONF"
[[ -x $BERTH_BIN ]] || die "no berth binary at $BERTH_BIN (cargo build --release, or --berth PATH)"
# A copy the user can surely execute, whatever the permissions of the checkout.
install -m 0755 "$BERTH_BIN" "$FA/bin/berth"
BERTH=$FA/bin/berth

base_image "$IMAGE_PATH"

# user CMD...: as the user, from /, with this benchmark's store and runtime
# directory.
user() {
    (cd / && as_user env XDG_RUNTIME_DIR="$RT" BERTH_STORE="$STORE" \
        BERTH_SQUASHFS_VERIFY=$((1 - NO_VERIFY)) "$@")
}

# ---------------------------------------------------------------------------
# The data files and the image: the Debian image plus one layer holding
# /data/file-1..N (incompressible), imported into berth's store
# ---------------------------------------------------------------------------
KEY=${FILES}x${FILE_MIB}M
DATA=$FA/data-$KEY              # the host copy: $DATA/data/file-N
IMAGE=bench/fileaccess:$KEY
if [[ ! -e $DATA.done ]]; then
    log "writing $FILES files of $FILE_MIB MiB from /dev/urandom to $DATA/data"
    rm -rf "$DATA"
    install -d -m 0755 "$DATA" "$DATA/data"
    for ((i = 1; i <= FILES; i++)); do
        head -c "${FILE_MIB}M" /dev/urandom > "$DATA/data/file-$i"
    done
    chmod 0644 "$DATA"/data/*
    touch "$DATA.done"
    rm -f "$FA/image-$KEY.base"
fi
BASE_DIGEST=$(layout_digest)
if [[ $(cat "$FA/image-$KEY.base" 2>/dev/null) != "$BASE_DIGEST" ]] \
    || ! user "$BERTH" inspect "$IMAGE" > /dev/null 2>&1; then
    log "building $IMAGE: the Debian image + a layer with $DATA/data, imported into $STORE"
    tmp=$FA/oci-tmp
    rm -rf "$tmp" "$FA/layer.tar"
    cp -r "$LAYOUT" "$tmp"
    tar --numeric-owner --owner=0 --group=0 -C "$DATA" -cf "$FA/layer.tar" data
    umoci raw add-layer --image "$tmp:$TAG" "$FA/layer.tar"   # gzips it
    rm -f "$FA/layer.tar"
    chown -R "$BUID:$BGID" "$tmp"
    user "$BERTH" import -q "oci:$tmp:$TAG" "$IMAGE" > "$FA/logs/import-$KEY.log" 2>&1 \
        || { tail -n 5 "$FA/logs/import-$KEY.log" >&2; die "berth import failed"; }
    rm -rf "$tmp"
    user "$BERTH" prune > /dev/null 2>&1 || true   # an earlier build of the same name
    echo "$BASE_DIGEST" > "$FA/image-$KEY.base"
fi
INSPECT=$(user "$BERTH" inspect "$IMAGE")
IMAGE_ID=$(jq -r .id <<< "$INSPECT")
SQFS=$(jq -r .squashfs.path <<< "$INSPECT")
[[ -f $SQFS ]] || die "berth inspect names no image file ($SQFS)"
KDIR=$(keeper_dir "$RT" "$IMAGE_ID")

# ---------------------------------------------------------------------------
# The workloads: one POSIX sh script, run by the image's sh inside berth and
# by the host's sh natively. Arguments: DIR WORKLOAD. Prints
# "NANOSECONDS COUNT" (COUNT: bytes read, or entries seen).
# ---------------------------------------------------------------------------
read -r -d '' WL <<'EOF' || true
d=$1 w=$2 n=0
t0=$(date +%s%N)
case $w in
    read) cat "$d"/* > /dev/null || exit 1 ;;
    find) n=$(find "$d" -xdev -printf '%s\n' | wc -l) ;;
    stat) n=$(find "$d" -xdev -print0 | xargs -0 stat -c %s | wc -l) ;;
    *) exit 2 ;;
esac
t1=$(date +%s%N)
if [ "$w" = read ]; then
    for f in "$d"/*; do n=$((n + $(stat -c %s "$f"))); done
fi
echo "$((t1 - t0)) $n"
EOF

# target METHOD WORKLOAD: the directory the workload works on.
target() {
    local sub=usr
    [[ $2 == read ]] && sub=data
    case $1 in
        berth) echo "/$sub" ;;
        kernel) echo "$MNT/$sub" ;;
        host) if [[ $sub == data ]]; then echo "$DATA/data"; else echo "$ROOTFS/usr"; fi ;;
    esac
}

# command_of METHOD WORKLOAD: sets CMD to the timed command.
command_of() {
    local dir
    dir=$(target "$1" "$2")
    case $1 in
        berth) CMD=("$BERTH" run "$IMAGE" sh -c "$WL" wl "$dir" "$2") ;;
        *) CMD=(sh -c "$WL" wl "$dir" "$2") ;;
    esac
}

kernel_mount() {
    mount -t squashfs -o loop,ro,nosuid,nodev "$SQFS" "$MNT"
}
kernel_umount() {
    if mountpoint -q "$MNT"; then umount "$MNT"; fi
}
cleanup() { kernel_umount || true; stop_keeper "$KDIR" || true; }
trap cleanup EXIT

drop_caches() { sync; echo 3 > /proc/sys/vm/drop_caches; }

# fresh METHOD: a fresh mount (not timed).
fresh() {
    case $1 in
        berth) stop_keeper "$KDIR" ;;
        kernel) kernel_umount && kernel_mount ;;
        host) ;;
    esac
    if ((DROP_CACHES)); then drop_caches; fi
}

# ---------------------------------------------------------------------------
# Probes: every method must see the same files
# ---------------------------------------------------------------------------
declare -A WHY=()
kernel_umount
if ((DROP_CACHES)) && ! drop_caches 2>/dev/null; then
    die "--drop-caches: cannot write /proc/sys/vm/drop_caches here"
fi
STAMP=$(date -u +%Y%m%dT%H%M%SZ)
LOGS=$FA/logs/$STAMP
install -d -m 0755 -o "$BUID" -g "$BGID" "$LOGS"
READY=()
for m in "${METHOD_LIST[@]}"; do
    logf=$LOGS/probe-$m.log
    if [[ $m == kernel ]] && ! kernel_mount > "$logf" 2>&1; then
        WHY[$m]="mount -t squashfs -o loop failed: $(tail -n 1 "$logf")"
    else
        command_of "$m" read
        if ! out=$(user "${CMD[@]}" 2>> "$logf"); then
            WHY[$m]="the probe failed: $(tail -n 1 "$logf")"
        elif [[ ${out#* } != $((FILES * FILE_MIB * 1048576)) ]]; then
            WHY[$m]="the probe read ${out#* } bytes, expected $((FILES * FILE_MIB * 1048576))"
        fi
    fi
    if [[ -n ${WHY[$m]:-} ]]; then
        log "$m cannot run here: ${WHY[$m]} (log: $logf)"
    else
        READY+=("$m")
    fi
done
[[ " ${READY[*]} " == *" berth "* ]] || die "berth cannot run the workloads: ${WHY[berth]:-not asked for}"

# ---------------------------------------------------------------------------
# Rounds
# ---------------------------------------------------------------------------
RAW=$LOGS/raw.tsv
: > "$RAW"
# run_one ROUND POS METHOD WORKLOAD STATE: one timed command, one TSV row:
# round pos method workload state status inside_s outer_s count
run_one() {
    local round=$1 pos=$2 m=$3 w=$4 state=$5 out status=ok t0 t1 ns=0 n=0
    command_of "$m" "$w"
    t0=$EPOCHREALTIME
    out=$(user "${CMD[@]}" 2>> "$LOGS/$m-$w.log" < /dev/null) || status=failed
    t1=$EPOCHREALTIME
    if [[ $status == ok && $out =~ ^([0-9]+)\ ([0-9]+)$ ]]; then
        ns=${BASH_REMATCH[1]} n=${BASH_REMATCH[2]}
    elif [[ $status == ok ]]; then
        status=bad-output
    fi
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$round" "$pos" "$m" "$w" "$state" "$status" \
        "$(awk -v ns="$ns" 'BEGIN { printf "%.6f", ns / 1e9 }')" \
        "$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.6f", b - a }')" "$n" >> "$RAW"
    if [[ $status != ok ]]; then
        log "round $round: $m $w $state: $status (log: $LOGS/$m-$w.log)"
    fi
}

LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
nm=${#READY[@]}
log "$RUNS rounds of ${READY[*]} x ${WORKLOAD_LIST[*]} (cold, then warm)"
for ((r = 1; r <= RUNS; r++)); do
    for ((k = 0; k < nm; k++)); do
        m=${READY[(r - 1 + k) % nm]}    # rotate the order every round
        for w in "${WORKLOAD_LIST[@]}"; do
            if [[ $m != host ]] || ((DROP_CACHES)); then
                fresh "$m"
                run_one "$r" "$k" "$m" "$w" cold
            else
                # No mount to renew: a first run, recorded but not
                # summarised, so that "warm" means the same for all.
                run_one "$r" "$k" "$m" "$w" prime
            fi
            run_one "$r" "$k" "$m" "$w" warm
        done
    done
    log "round $r/$RUNS done"
done
LOAD_AFTER=$(cut -d' ' -f1-3 /proc/loadavg)
cleanup

# ---------------------------------------------------------------------------
# Report
# ---------------------------------------------------------------------------
declare -A ARGV=()
# shellcheck disable=SC2034   # ARGV is read through json_map's nameref
for m in berth kernel host; do
    command_of "$m" find
    ARGV[$m]="${CMD[*]:0:${#CMD[@]}-4} SCRIPT wl $(target "$m" read)|$(target "$m" find) WORKLOAD"
done
mkdir -p "$RESULTS"
META=$LOGS/meta.json
jq -n \
    --arg stamp "$STAMP" --argjson runs "$RUNS" --argjson smoke "$SMOKE" \
    --arg methods "${READY[*]}" --arg workloads "${WORKLOAD_LIST[*]}" \
    --argjson why "$(json_map WHY)" --argjson argv "$(json_map ARGV)" \
    --arg image "$IMAGE" --arg image_id "$IMAGE_ID" --arg base "$BASE_DIGEST" \
    --argjson squashfs "$(jq -c .squashfs <<< "$INSPECT")" \
    --argjson files "$FILES" --argjson file_mib "$FILE_MIB" \
    --arg data "$DATA/data" --arg rootfs "$ROOTFS" --arg mnt "$MNT" \
    --argjson usr_entries "$(find "$ROOTFS/usr" -xdev | wc -l)" \
    --argjson drop_caches "$DROP_CACHES" --arg user "$BENCH_USER" \
    --arg workload_script "$WL" \
    --arg fixes "$(printf '%s\n' "${HOST_FIXES_DONE[@]}")" \
    --arg kernel "$(uname -r)" --arg cpus "$(nproc)" \
    --arg cpu_model "$(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo)" \
    --arg mem "$(awk '/^MemTotal/ { print $2 " kB" }' /proc/meminfo)" \
    --arg load_before "$LOAD_BEFORE" --arg load_after "$LOAD_AFTER" \
    --arg berth_version "$(version_of "$BERTH" --version)" \
    --arg berth_sha256 "$(sha256sum "$BERTH" | cut -d' ' -f1)" --arg git "$(git_describe)" \
    --arg server "$SQUASHFS_SERVER" \
    --argjson verify "$((1 - NO_VERIFY))" \
    --arg squashfuse "$(dpkg-query -W -f='${Version}' squashfuse 2>/dev/null || echo unknown)" \
    --arg coreutils "$(dpkg-query -W -f='${Version}' coreutils 2>/dev/null || echo unknown)" \
    '{benchmark: "file-access", time_utc: $stamp, runs: $runs, smoke: ($smoke == 1),
      methods: ($methods | split(" ") | map(select(. != ""))), workloads: ($workloads | split(" ")),
      unavailable: $why, user: $user, argv: $argv, workload_script: $workload_script,
      verified_reads: ($verify == 1),
      how: {berth: "berth run IMAGE sh -c SCRIPT (keeper: \($server)\(if $verify == 1 then "" else ", verified reads off" end), then the container overlay)",
            kernel: "mount -t squashfs -o loop,ro,nosuid,nodev IMAGE_FILE (as root); SCRIPT run natively as the user",
            host: "SCRIPT run natively as the user on the unpacked files"},
      cold: (if $drop_caches == 1 then "fresh mount, page cache dropped (sync; echo 3 > /proc/sys/vm/drop_caches)"
             else "fresh mount (berth: keeper stopped; kernel: new loop mount); the image file stays in the page cache; host: no cold run (a first, unsummarised prime run, then warm)" end),
      drop_caches: ($drop_caches == 1),
      image: {name: $image, id: $image_id, base_manifest: $base, squashfs: $squashfs,
              data_files: $files, data_file_mib: $file_mib, host_data: $data,
              host_rootfs: $rootfs, usr_entries: $usr_entries, kernel_mount: $mnt},
      host: {kernel: $kernel, cpus: ($cpus | tonumber), cpu_model: $cpu_model, mem: $mem,
             loadavg_before: $load_before, loadavg_after: $load_after,
             fixes_applied: ($fixes | split("\n") | map(select(. != "")))},
      berth: {version: $berth_version, sha256: $berth_sha256, git: $git},
      versions: {squashfuse: $squashfuse, coreutils: $coreutils}}' > "$META"

status=0
python3 "$HERE/lib/fileaccess-report.py" "$RAW" "$META" "$RESULTS/fileaccess-$STAMP" || status=$?
log "results: $RESULTS/fileaccess-$STAMP.json, $RESULTS/fileaccess-$STAMP.csv (logs: $LOGS)"
exit "$status"
