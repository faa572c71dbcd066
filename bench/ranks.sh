#!/bin/bash
# Many ranks on one node: N copies of a container started at once from the
# same image, timed until the last one has ended, as MPI ranks start on a
# node. N is 1, 8, 32 and 64 by default; each copy runs `true` or
# `python3 -c pass` in the Debian bookworm minbase + python3 image of
# bench/pull.sh.
#
#   berth-warm        berth run, the image's keeper already running (the
#                     image stays mounted between bursts)
#   berth-cold        berth run with no keeper before the burst: the N runs
#                     race to start one
#   ch-run-sqfs       ch-run on a squashfs file: every rank mounts it
#                     (squashfuse) in its own namespace
#   ch-run-dir        ch-run on an unpacked directory
#   ch-run-sqfs-join  (opt-in) ch-run --join-ct=N --join-tag=T on the
#                     squashfs file: Charliecloud's way to share one
#                     container (one mount) among the ranks of a node. With
#                     ch-run 0.31 the mount goes when the peer serving it
#                     ends, and ranks still running fail (ENOTCONN, SIGBUS)
#
# ch-run's image directory and squashfs file are made as bench/start.sh
# makes them (ch-convert's dir -> dir and dir -> squash by hand: the mount
# points ch-run needs, mksquashfs -b 65536 -noappend -all-root, gzip).
#
# Every repetition runs every (ranks, case, tool) burst once; the order of
# the tools rotates from burst group to burst group. Bursts are summarised
# by their median over the repetitions; ratios berth/ch-run are taken per
# repetition, then summarised by their median. One warm-up burst of each
# (tool, case) comes first and is flagged as such.
#
# Usage (as root: it installs packages, prepares each tool's copy of the
# image once and switches to the unprivileged user for every timed burst):
#
#   bench/ranks.sh [--reps N] [--smoke] [options]     see --help
#
# Results: bench/results/ranks-<UTC>.{json,csv}, a markdown report on
# stdout, progress on stderr. The tools' copies of the image are cached
# under WORK/ranks, so a rerun only times.
set -Eeuo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO_ROOT=$(cd "$HERE/.." && pwd)
BENCH_NAME=ranks.sh
# shellcheck source-path=SCRIPTDIR source=lib/common.sh
. "$HERE/lib/common.sh"
# shellcheck source-path=SCRIPTDIR source=lib/node.sh
. "$HERE/lib/node.sh"

# ---------------------------------------------------------------------------
# Defaults and options
# ---------------------------------------------------------------------------
bench_defaults   # WORK BENCH_USER REGISTRY IMAGE_PATH BERTH_BIN RESULTS
REPS=5
RANKS=1,8,32,64
CASES=true,python
ALL_TOOLS=berth-warm,berth-cold,ch-run-sqfs,ch-run-dir,ch-run-sqfs-join
TOOLS=berth-warm,berth-cold,ch-run-sqfs,ch-run-dir
WARMUP=1
HOST_FIXES=1
FRESH=0
SMOKE=0

usage() {
    cat <<EOF
usage: $0 [options]    (run as root)

  --reps N             measured repetitions (default $REPS)
  --ranks LIST         comma list of burst sizes (default $RANKS)
  --cases LIST         comma list of true,python (default $CASES)
  --tools LIST         comma list of $ALL_TOOLS
                       (default: $TOOLS; ch-run-sqfs-join is opt-in: with
                       ch-run 0.31 the ranks still running lose the image,
                       ENOTCONN, when the peer serving the mount ends)
  --no-warmup          no warm-up bursts
  --smoke              1 repetition of 1 and 8 ranks (for CI)
  --berth PATH         berth binary (default target/release/berth)
  --registry H:P       loopback registry, only used when pull.sh's image
                       is not cached yet (default $REGISTRY)
  --user NAME          unprivileged user that runs the tools (default $BENCH_USER)
  --work-dir DIR       cache and scratch space (default $WORK)
  --results DIR        where JSON and CSV go (default bench/results)
  --no-host-fixes      do not chmod /dev/fuse 0666
  --fresh              prepare every tool's copy of the image again
EOF
}

bench_options --reps=REPS --ranks=RANKS --cases=CASES --tools=TOOLS --no-warmup:WARMUP=0 \
    --smoke:SMOKE=1 --no-host-fixes:HOST_FIXES=0 --fresh:FRESH=1 common -- "$@"
if ((SMOKE)); then REPS=1; RANKS=1,8; fi
bench_int --reps "$REPS"
IFS=, read -r -a RANK_LIST <<< "$RANKS"
for n in "${RANK_LIST[@]}"; do
    [[ $n =~ ^[1-9][0-9]*$ ]] || { echo "--ranks: $n is not a positive integer" >&2; exit 2; }
done
bench_list TOOL_LIST "$TOOLS" "$ALL_TOOLS" tool
bench_list CASE_LIST "$CASES" true,python case

bench_start "it installs packages and switches to user $BENCH_USER"

# ---------------------------------------------------------------------------
# Packages, user, base image
# ---------------------------------------------------------------------------
install_packages charliecloud-runtime squashfuse fuse3 squashfs-tools umoci uidmap \
    skopeo debootstrap jq curl python3 ca-certificates

bench_user_setup
HOST_FIXES_DONE=()
fuse_fix

SW=$WORK/ranks
install -d -m 0755 -o "$BUID" -g "$BGID" "$SW"
base_image "$IMAGE_PATH"
BASE_DIGEST=$(layout_digest)
if ((FRESH)) || [[ $(cat "$SW/image.digest" 2>/dev/null) != "$BASE_DIGEST" ]]; then
    log "preparing the tools' images afresh under $SW"
    find "$SW" -mindepth 1 -maxdepth 1 -exec rm -rf {} +
    echo "$BASE_DIGEST" > "$SW/image.digest"
fi
STORE=$SW/store                 # berth's store (the user's)
RT=$SW/runtime                  # the user's XDG_RUNTIME_DIR here: its own keepers
BUNDLE=$SW/bundle               # umoci unpack --rootless: ch-run's directory and squashfs come from it
install -d -m 0700 -o "$BUID" -g "$BGID" "$STORE" "$RT"
install -d -m 0755 -o "$BUID" -g "$BGID" "$SW/logs"
install -d -m 0755 "$SW/bin"
install -m 0755 "$HERE/lib/burst.py" "$SW/bin/burst.py"
# berth: built-in settings, but the keeper outlives the other tools' bursts
# (berth-cold stops it on purpose).
BERTH_SITE_CONF=$SW/berth-site.toml
cat > "$BERTH_SITE_CONF" <<'EOF'
# written by bench/ranks.sh: built-in settings, a keeper that outlives the rounds
[runtime]
keeper_idle_seconds = 900
EOF
BERTH=$SW/bin/berth
IMAGE=bench/debian-python:bookworm   # imported: localhost/bench/debian-python:bookworm
STAMP=$(date -u +%Y%m%dT%H%M%SZ)
LOGS=$SW/logs/$STAMP
install -d -m 0755 -o "$BUID" -g "$BGID" "$LOGS"

# user CMD...: as the user, from /, with this benchmark's store and runtime
# directory.
user() { (cd / && as_user env XDG_RUNTIME_DIR="$RT" BERTH_STORE="$STORE" "$@"); }

# ---------------------------------------------------------------------------
# Each tool's copy of the image (once)
# ---------------------------------------------------------------------------
# The OCI layout of pull.sh is root's: the user works on a copy. (The
# prep_* functions are called through $prep.)
# shellcheck disable=SC2317
prep_layout() {
    [[ -e $SW/oci.done ]] && return 0
    rm -rf "$SW/oci"
    cp -r "$LAYOUT" "$SW/oci" && chown -R "$BUID:$BGID" "$SW/oci" || return 1
    touch "$SW/oci.done"
}
# shellcheck disable=SC2317
prep_berth() {
    [[ -x $BERTH_BIN ]] || { echo "no berth binary at $BERTH_BIN (cargo build --release, or --berth PATH)"; return 1; }
    # A copy the user can surely execute, whatever the permissions of the checkout.
    install -m 0755 "$BERTH_BIN" "$BERTH" || return 1
    user "$BERTH" inspect "$IMAGE" > /dev/null 2>&1 && return 0
    prep_layout || return 1
    user "$BERTH" import -q "oci:$SW/oci:$TAG" "$IMAGE"
}
# shellcheck disable=SC2317
prep_bundle() {
    [[ -e $SW/bundle.done ]] && return 0
    prep_layout || return 1
    rm -rf "$BUNDLE"
    as_user umoci unpack --rootless --image "$SW/oci:$TAG" "$BUNDLE" || return 1
    touch "$SW/bundle.done"
}
# ch-run's directory and squashfs file, as bench/start.sh makes them.
# shellcheck source-path=SCRIPTDIR source=lib/charliecloud.sh
source "$HERE/lib/charliecloud.sh"

# argv TOOL CASE N TAG: the command one rank runs, one word a line.
argv() {
    local tool=$1 c=$2 n=$3 tag=$4 cmd
    mapfile -t cmd < <(case_argv "$c")
    case $tool in
        berth-*) printf '%s\n' "$BERTH" run "$IMAGE" "${cmd[@]}" ;;
        ch-run-dir) printf '%s\n' ch-run "$SW/ch-dir" -- "${cmd[@]}" ;;
        ch-run-sqfs) printf '%s\n' ch-run "$SW/ch.sqfs" -- "${cmd[@]}" ;;
        ch-run-sqfs-join) printf '%s\n' ch-run "--join-ct=$n" "--join-tag=$tag" "$SW/ch.sqfs" -- "${cmd[@]}" ;;
    esac
}

# settle: waits (up to 5 s) until no ch-run of the user is left, e.g. a
# squashfs server still winding down, so that it does not run into the
# next burst.
settle() {
    local i
    for ((i = 0; i < 50; i++)); do
        pgrep -u "$BUID" -x ch-run > /dev/null || return 0
        sleep 0.1
    done
}

# probe TOOL: every case starts once as 1 rank, and the probe runs inside
# the image.
NPROBE=0
probe() {
    local tool=$1 c out a=()
    for c in "${CASE_LIST[@]}" probe; do
        NPROBE=$((NPROBE + 1))
        mapfile -t a < <(argv "$tool" "$c" 1 "probe-$STAMP-$NPROBE")
        if ! out=$(user "${a[@]}" < /dev/null 2>&1 > /dev/null); then
            echo "$out"
            echo "${c/probe/the image check} failed: $(grep -v '^[[:space:]]*$' <<< "${out:-no message}" | tail -n 1)"
            return 1
        fi
        settle
    done
}

declare -A WHY=()
READY=()
for tool in "${TOOL_LIST[@]}"; do
    logf=$LOGS/setup-$tool.log
    case $tool in
        berth-*) prep=prep_berth; exe=install ;;
        ch-run-dir) prep=prep_ch_dir; exe=ch-run ;;
        ch-run-sqfs*) prep=prep_ch_sqfs; exe=ch-run ;;
    esac
    log "preparing $tool"
    if ! command -v "$exe" > /dev/null; then
        WHY[$tool]="$exe is not installed"
    elif ! $prep > "$logf" 2>&1; then
        WHY[$tool]="set-up failed: $(grep -v '^[[:space:]]*$' "$logf" | tail -n 1)"
    elif ! probe "$tool" >> "$logf" 2>&1; then
        WHY[$tool]="$(tail -n 1 "$logf")"
    fi
    if [[ -n ${WHY[$tool]:-} ]]; then
        log "$tool cannot run here: ${WHY[$tool]} (log: $logf)"
    else
        READY+=("$tool")
    fi
done
((${#READY[@]})) || die "no tool can start a container here"

KDIR=
if [[ " ${READY[*]} " == *" berth-"* ]]; then
    KDIR=$(keeper_dir "$RT" "$(user "$BERTH" inspect "$IMAGE" | jq -r .id)")
fi
cleanup() { if [[ -n $KDIR ]]; then stop_keeper "$KDIR" || true; fi; }
trap cleanup EXIT

# ---------------------------------------------------------------------------
# Bursts
# ---------------------------------------------------------------------------
RAW=$LOGS/raw.tsv
: > "$RAW"
NBURST=0
# burst PHASE REP POS N CASE TOOL: one timed burst, one TSV row:
# phase rep pos ranks case tool status burst_json keeper_before keeper_after
# keepers_after keeper_restarted
burst() {
    local phase=$1 rep=$2 pos=$3 n=$4 c=$5 tool=$6 a=() out status=ok before='' after restarted=0 servers=0
    NBURST=$((NBURST + 1))
    mapfile -t a < <(argv "$tool" "$c" "$n" "rk-$STAMP-$NBURST")
    case $tool in
        berth-cold)
            stop_keeper "$KDIR" || status=keeper-did-not-stop ;;
        berth-warm)
            before=$(keeper_pid "$KDIR")
            if [[ -z $before ]]; then   # it left (or a cold burst's start failed): start one
                restarted=1
                user "$BERTH" run "$IMAGE" true < /dev/null > /dev/null 2>> "$LOGS/keeper-restarts.log" || true
                before=$(keeper_pid "$KDIR")
            fi ;;
    esac
    out=$(user python3 "$SW/bin/burst.py" "$n" "$LOGS/$tool-$c.log" -- "${a[@]}" < /dev/null) \
        || status=${status/ok/failed}
    [[ -n $out ]] || { out='{}'; status=${status/ok/no-output}; }
    after=$(keeper_pid "$KDIR")
    # Keepers serving this image from this runtime directory (1 expected
    # after any berth burst, however many ranks raced to start it).
    [[ -z $KDIR ]] || servers=$(keepers_for "$KDIR")
    settle
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$phase" "$rep" "$pos" "$n" "$c" "$tool" \
        "$status" "$out" "$before" "$after" "$servers" "$restarted" >> "$RAW"
    if [[ $status != ok ]]; then
        log "$phase $rep: $n x $tool $c: $status (log: $LOGS/$tool-$c.log)"
    fi
}

LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
nt=${#READY[@]}
group=0
if ((WARMUP)); then
    n=${RANK_LIST[-1]}; ((n <= 8)) || n=8
    log "warm-up: one burst of $n ranks per tool and case"
    for c in "${CASE_LIST[@]}"; do
        for ((k = 0; k < nt; k++)); do burst warmup 0 "$k" "$n" "$c" "${READY[k]}"; done
    done
fi
log "$REPS repetitions of ${#RANK_LIST[@]} burst sizes (${RANK_LIST[*]}) x ${#CASE_LIST[@]} cases x $nt tools"
for ((r = 1; r <= REPS; r++)); do
    for n in "${RANK_LIST[@]}"; do
        for c in "${CASE_LIST[@]}"; do
            for ((k = 0; k < nt; k++)); do   # the order rotates from group to group
                burst rep "$r" "$k" "$n" "$c" "${READY[(group + k) % nt]}"
            done
            group=$((group + 1))
        done
    done
    log "repetition $r/$REPS done"
done
LOAD_AFTER=$(cut -d' ' -f1-3 /proc/loadavg)
cleanup

# ---------------------------------------------------------------------------
# Report
# ---------------------------------------------------------------------------
declare -A ARGV=()
# shellcheck disable=SC2034   # ARGV is read through json_map's nameref
for tool in "${READY[@]}"; do
    ARGV[$tool]=$(argv "$tool" python N TAG | paste -sd ' ')
done
sqfs_params() {
    unsquashfs -s "$1" 2>/dev/null | awk '
        /^Compression / { c = $2 }
        /^Block size /  { b = $3 }
        END { print c, b }'
}
BERTH_SQFS=
if [[ -x $BERTH ]]; then
    BERTH_SQFS=$(user "$BERTH" inspect "$IMAGE" 2>/dev/null | jq -r '.squashfs | "\(.compressor) \(.block_size)"' || true)
fi
mkdir -p "$RESULTS"
META=$LOGS/meta.json
jq -n \
    --arg stamp "$STAMP" --argjson reps "$REPS" --argjson warmup "$WARMUP" --argjson smoke "$SMOKE" \
    --arg ranks "${RANK_LIST[*]}" --arg cases "${CASE_LIST[*]}" --arg tools "${READY[*]}" \
    --argjson why "$(json_map WHY)" --argjson argv "$(json_map ARGV)" --arg user "$BENCH_USER" \
    --arg image "$IMAGE" --arg base "$BASE_DIGEST" \
    --arg berth_sqfs "${BERTH_SQFS:-unknown}" \
    --arg ch_sqfs "$( [[ -e $SW/ch.sqfs ]] && sqfs_params "$SW/ch.sqfs" || echo unknown)" \
    --arg fixes "$(printf '%s\n' "${HOST_FIXES_DONE[@]}")" \
    --arg kernel "$(uname -r)" --arg cpus "$(nproc)" \
    --arg cpu_model "$(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo)" \
    --arg fuse_mode "$(stat -c %a /dev/fuse 2>/dev/null || echo missing)" \
    --arg load_before "$LOAD_BEFORE" --arg load_after "$LOAD_AFTER" \
    --arg berth_version "$( [[ -x $BERTH ]] && version_of "$BERTH" --version || echo n/a)" \
    --arg berth_sha256 "$( [[ -x $BERTH ]] && sha256sum "$BERTH" | cut -d' ' -f1 || echo n/a)" \
    --arg git "$(git_describe)" \
    --arg ch_run "$(as_user ch-run --version 2>&1 | sed -n 1p)" \
    --arg squashfuse "$(dpkg-query -W -f='${Version}' squashfuse 2>/dev/null || echo unknown)" \
    '{benchmark: "ranks", time_utc: $stamp, reps: $reps, warmup: ($warmup == 1), smoke: ($smoke == 1),
      ranks: ($ranks | split(" ") | map(tonumber)), cases: ($cases | split(" ")),
      tools: ($tools | split(" ") | map(select(. != ""))), unavailable: $why, argv: $argv,
      user: $user,
      how: {"berth-warm": "berth run, keeper running before the burst (one mount serves all ranks)",
            "berth-cold": "berth run, no keeper before the burst (the ranks race to start one)",
            "ch-run-sqfs": "ch-run FILE.sqfs: a squashfuse mount per rank",
            "ch-run-dir": "ch-run DIR: unpacked directory",
            "ch-run-sqfs-join": "ch-run --join-ct=N --join-tag=T FILE.sqfs: the ranks share one container"},
      image: {name: $image, base_manifest: $base, berth_squashfs: $berth_sqfs, ch_run_squashfs: $ch_sqfs},
      host: {kernel: $kernel, cpus: ($cpus | tonumber), cpu_model: $cpu_model, dev_fuse_mode: $fuse_mode,
             loadavg_before: $load_before, loadavg_after: $load_after,
             fixes_applied: ($fixes | split("\n") | map(select(. != "")))},
      berth: {version: $berth_version, sha256: $berth_sha256, git: $git},
      versions: {ch_run: $ch_run, squashfuse: $squashfuse}}' > "$META"

status=0
python3 "$HERE/lib/ranks-report.py" "$RAW" "$META" "$RESULTS/ranks-$STAMP" || status=$?
# A peer that fails is reported; berth itself must run.
if [[ -n ${WHY[berth-warm]:-}${WHY[berth-cold]:-} ]]; then status=1; fi
log "results: $RESULTS/ranks-$STAMP.json, $RESULTS/ranks-$STAMP.csv (logs: $LOGS)"
exit "$status"
