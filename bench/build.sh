#!/bin/bash
# Rootless image build: berth build against podman build and ch-image
# build (Charliecloud 0.31; its ch-image is taken from the
# charliecloud-builders package without that package's docker.io and
# buildah dependencies, which it does not need), as the unprivileged user,
# on one Dockerfile that needs no network (so the mirror's speed is not
# measured): FROM the benchmark's Debian bookworm + python3 image, useradd,
# COPY --chown of 400 Python files, WORKDIR, python3 -m compileall, a 16 MB
# file written and /usr/share/doc removed, CMD.
#
#   cold    build --no-cache, the base image already in the tool's storage
#   cached  the same build again: every step from the cache
#
# berth also builds under root emulation (--root-emulation seccomp, what a
# user without a subordinate range gets), reported against the subuid
# build and ch-image (which maps only the user; 0.31 has no
# --force=seccomp). Tools alternate within each round and the order
# rotates by round. Each build's image is checked by running it. Targets:
# cold at most 1.2 x podman's, cached at most 0.5 x podman's.
#
#   sudo bench/build.sh [--runs N] [--smoke]
#
# Results: bench/results/build-<UTC>.json, a markdown table on stdout.
set -Eeuo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO_ROOT=$(cd "$HERE/.." && pwd)
cd /
BENCH_NAME=build.sh
# shellcheck source=bench/lib/common.sh
source "$HERE/lib/common.sh"
bench_defaults   # WORK BENCH_USER REGISTRY BIN_DIR ...
RUNS=5
SMOKE=0
usage() { sed -n 2,18p "$HERE/build.sh"; }
bench_options --runs=RUNS --smoke:SMOKE=1 -- "$@"
if ((SMOKE)); then RUNS=1; fi
bench_int --runs "$RUNS"
bench_start "it switches to $BENCH_USER"
[[ -x $BIN_DIR/berth ]] || die "no berth in $BIN_DIR (cargo build --release -p berth)"
install_packages podman catatonit uidmap fuse-overlayfs squashfs-tools squashfs-tools-ng jq curl \
    charliecloud-common charliecloud-runtime python3-lark python3-requests git
bench_user_setup
ensure_bench_image
IMG=$REGISTRY/bench/debian-python:bookworm
W=$WORK/build
rm -rf "$W"
install -d -m 0755 -o "$BUID" -g "$BGID" "$W" "$W/logs" "$W/site" "$W/ctx/src"
install -m 0755 "$BIN_DIR/berth" "$W/berth"
echo "insecure_registries = [\"$REGISTRY\"]" > "$W/site/berth.toml"
BERTH_SITE_CONF=$W/site/berth.toml
cat > "$W/ctx/Dockerfile" <<'EOF'
ARG BASE
FROM $BASE
ENV APP_HOME=/srv/app
RUN useradd -u 1234 -m app && mkdir -p $APP_HOME
COPY --chown=app:app src/ /srv/app/src/
WORKDIR /srv/app
RUN python3 -m compileall -q src && find src -name '*.pyc' | wc -l > pyc-count.txt
RUN dd if=/dev/urandom of=/srv/app/data.bin bs=1M count=16 status=none && rm -rf /usr/share/doc
CMD ["cat", "/srv/app/pyc-count.txt"]
EOF
for i in $(seq 1 400); do
    printf 'import os\n\ndef f%d(x):\n    return [os.sep * i for i in range(x)]\n' "$i" > "$W/ctx/src/mod$i.py"
done
chown -R "$BUID:$BGID" "$W/ctx" "$W/logs"
trap stop_podman_pause EXIT

# berth-seccomp: the same build under root emulation (--root-emulation
# seccomp), what a user without a subordinate range gets.
TOOLS=(berth berth-seccomp podman)
# ch-image: on PATH, else unpacked from its package (not installed: the
# package would pull in docker.io and buildah).
CH_IMAGE=$(command -v ch-image || true)
if [[ -z $CH_IMAGE ]]; then
    CHX=$WORK/ch-image
    if [[ ! -x $CHX/usr/bin/ch-image ]]; then
        rm -rf "$CHX" && install -d "$CHX"
        (cd "$CHX" && apt-get download -q charliecloud-builders > /dev/null 2>&1 \
            && dpkg -x charliecloud-builders_*.deb . && rm -f charliecloud-builders_*.deb) \
            || log "cannot fetch charliecloud-builders: ch-image left out"
        install -d "$CHX/usr/lib"
        ln -sfn /usr/lib/charliecloud "$CHX/usr/lib/charliecloud"
        ln -sf "$(command -v ch-run)" "$CHX/usr/bin/ch-run"
    fi
    [[ -x $CHX/usr/bin/ch-image ]] && CH_IMAGE=$CHX/usr/bin/ch-image
fi
[[ -n $CH_IMAGE ]] && TOOLS+=(ch-image)
# ch-image's build cache is a git repository: it needs an identity.
CH_ENV=(env GIT_AUTHOR_NAME=bench GIT_AUTHOR_EMAIL=bench@localhost
    GIT_COMMITTER_NAME=bench GIT_COMMITTER_EMAIL=bench@localhost)
BSTORE=$W/berth-store
PROOT=(--root "$W/podman/root" --runroot "$W/podman/runroot" --storage-driver overlay)
CHS=$W/ch-storage
install -d -m 0755 -o "$BUID" -g "$BGID" "$BSTORE" "$W/podman"
# The base in every tool's storage (not timed).
as_user "$W/berth" --store "$BSTORE" pull -q --tls-verify=false "$IMG" > /dev/null
as_user podman "${PROOT[@]}" pull -q --tls-verify=false "$IMG" > /dev/null
if [[ " ${TOOLS[*]} " == *" ch-image "* ]]; then
    # The same base, as a directory (ch-image imports file system trees).
    BASE_SQFS=$(as_user "$W/berth" --store "$BSTORE" inspect "$IMG" | jq -r .squashfs.path)
    as_user unsquashfs -q -n -d "$W/ch-base" "$BASE_SQFS" > /dev/null 2>&1 || true
    as_user "${CH_ENV[@]}" "$CH_IMAGE" -s "$CHS" import "$W/ch-base" bench-base > "$W/logs/ch-import.log" 2>&1 \
        || { log "ch-image could not import the base; leaving it out"; TOOLS=(berth berth-seccomp podman); }
fi

# build TOOL KIND: one build as the user; prints its wall time in ms.
build() {
    local tool=$1 kind=$2 nc=() s e base=$IMG
    [[ $kind == cold ]] && nc=(--no-cache)
    s=$(date +%s%N)
    case $tool in
        berth) as_user "$W/berth" --store "$BSTORE" build -q "${nc[@]}" --build-arg "BASE=$base" -t bench-built "$W/ctx" ;;
        berth-seccomp) as_user "$W/berth" --store "$BSTORE" build -q "${nc[@]}" --root-emulation seccomp \
            --build-arg "BASE=$base" -t bench-built-seccomp "$W/ctx" ;;
        podman) as_user podman "${PROOT[@]}" build -q "${nc[@]}" --tls-verify=false --build-arg "BASE=$base" -t bench-built "$W/ctx" ;;
        ch-image) [[ $kind == cold ]] && nc=(--rebuild)
            as_user "${CH_ENV[@]}" "$CH_IMAGE" -s "$CHS" build "${nc[@]}" --build-arg BASE=bench-base -t bench-built "$W/ctx" ;;
    esac > "$W/logs/$tool-$kind.out" 2> "$W/logs/$tool-$kind.log" || { echo failed; return; }
    e=$(date +%s%N)
    echo $(((e - s) / 1000000))
}

# check TOOL: the built image runs and prints 400 (not timed).
check() {
    local out
    case $1 in
        berth) out=$(as_user "$W/berth" --store "$BSTORE" run bench-built 2>&1) ;;
        berth-seccomp) out=$(as_user "$W/berth" --store "$BSTORE" run bench-built-seccomp 2>&1) ;;
        podman) out=$(as_user podman "${PROOT[@]}" run --rm bench-built 2>&1) ;;
        ch-image) out=$(as_user ch-run -s "$CHS" bench-built -- cat /srv/app/pyc-count.txt 2>&1) ;;
    esac
    [[ $(echo "$out" | tail -1) == 400 ]] || { log "$1: the built image printed: $out"; return 1; }
}

TSV=$W/logs/rounds.tsv
: > "$TSV"
LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
for t in "${TOOLS[@]}"; do build "$t" cold > /dev/null; done   # warm-up (page cache, first-use set-up)
for ((r = 1; r <= RUNS; r++)); do
    n=${#TOOLS[@]}
    for ((k = 0; k < n; k++)); do
        t=${TOOLS[$(((r + k) % n))]}
        c=$(build "$t" cold)
        h=$(build "$t" cached)
        if [[ $c != failed ]] && ! check "$t"; then c=failed; fi
        echo -e "$r\t$t\t$c\t$h" >> "$TSV"
        log "round $r $t: cold $c ms, cached $h ms"
    done
done
STAMP=$(date -u +%Y%m%dT%H%M%SZ)
OUT=$HERE/results/build-$STAMP.json
install -d "$HERE/results"
jq -n --arg stamp "$STAMP" --argjson smoke "$SMOKE" --argjson runs "$RUNS" \
    --rawfile dockerfile "$W/ctx/Dockerfile" --arg load_before "$LOAD_BEFORE" \
    --arg berth_version "$("$W/berth" --version | head -1)" --arg git "$(git_describe)" \
    --arg podman "$(version_of podman --version)" --arg ch_image "$(version_of as_user "$CH_IMAGE" --version)" \
    '{time_utc: $stamp, smoke: ($smoke == 1), runs: $runs, dockerfile: $dockerfile,
      loadavg_before: $load_before, berth: {version: $berth_version, git: $git},
      versions: {podman: $podman, "ch-image": $ch_image}}' > "$W/logs/meta.json"
python3 "$HERE/lib/build-report.py" "$TSV" "$W/logs/meta.json" "$OUT"
log "results: $OUT"
