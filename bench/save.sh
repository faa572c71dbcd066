#!/bin/bash
# Saving a container: `berth run --save FILE.sqsh` against `podman commit`
# and against mksquashfs of the container's unpacked tree, as the
# unprivileged user. The container is the benchmark's Debian bookworm +
# python3 image after `dpkg -i` of one package (made here with dpkg-deb:
# 400 Python files and an 8 MiB binary, about 14 MB), installed as root
# inside (berth --fakeroot --overlay, podman run) and not timed.
#
#   berth      berth run --overlay DIR --save OUT.sqsh IMAGE true
#              (the image's squashfs amended by berth's own writer: its
#              blocks copied, the changes compressed with zstd level 3,
#              128 KiB blocks: berth's defaults)
#   podman     podman commit CONTAINER NAME (a new overlay layer)
#   mksquashfs mksquashfs TREE OUT -comp zstd -Xcompression-level 3
#              -b 131072 (the same settings), TREE the container's root
#              unpacked (as a tool that unpacks first would have it)
#
# Tools alternate within each round and the order rotates by round; each
# saved file is checked by running the package's program from it. Target:
# berth at most 0.5 x mksquashfs's time. Sizes are reported.
#
#   sudo bench/save.sh [--runs N] [--smoke]
#
# Results: bench/results/save-<UTC>.json, a markdown table on stdout.
set -Eeuo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO_ROOT=$(cd "$HERE/.." && pwd)
cd /
BENCH_NAME=save.sh
# shellcheck source=bench/lib/common.sh
source "$HERE/lib/common.sh"
bench_defaults   # WORK BENCH_USER REGISTRY BIN_DIR ...
RUNS=5
SMOKE=0
usage() { sed -n 2,23p "$HERE/save.sh"; }
bench_options --runs=RUNS --smoke:SMOKE=1 -- "$@"
if ((SMOKE)); then RUNS=1; fi
bench_int --runs "$RUNS"
bench_start "it switches to $BENCH_USER"
[[ -x $BIN_DIR/berth ]] || die "no berth in $BIN_DIR (cargo build --release -p berth)"
install_packages podman catatonit uidmap fuse-overlayfs squashfs-tools squashfs-tools-ng jq curl dpkg
bench_user_setup
ensure_bench_image
IMG=$REGISTRY/bench/debian-python:bookworm
W=$WORK/save
rm -rf "$W"
install -d -m 0755 -o "$BUID" -g "$BGID" "$W" "$W/logs" "$W/site" "$W/out"
install -m 0755 "$BIN_DIR/berth" "$W/berth"
echo "insecure_registries = [\"$REGISTRY\"]" > "$W/site/berth.toml"
BERTH_SITE_CONF=$W/site/berth.toml

# The package: a program, 400 Python modules and a binary blob.
P=$W/pkg
install -d "$P/DEBIAN" "$P/usr/bin" "$P/usr/lib/python3/dist-packages/benchpkg" "$P/usr/share/benchpkg"
printf 'Package: bench-save\nVersion: 1.0\nArchitecture: all\nMaintainer: berth bench <b@example.org>\nDescription: the package bench/save.sh installs\n' \
    > "$P/DEBIAN/control"
printf '#!/bin/sh\necho bench-save-ok\n' > "$P/usr/bin/bench-save"
chmod 0755 "$P/usr/bin/bench-save"
for i in $(seq 1 400); do
    for j in $(seq 1 20); do
        printf 'def f%d_%d(x):\n    """Module %d, function %d."""\n    return [x * k for k in range(%d)]\n\n' "$i" "$j" "$i" "$j" "$j"
    done > "$P/usr/lib/python3/dist-packages/benchpkg/mod$i.py"
done
head -c 8388608 /dev/urandom > "$P/usr/share/benchpkg/blob.bin"
dpkg-deb --build --root-owner-group "$P" "$W/bench-save.deb" > /dev/null
chmod 0644 "$W/bench-save.deb"
DEB_BYTES=$(stat -c %s "$W/bench-save.deb")

BSTORE=$W/berth-store
# podman's storage from a file of its own: `podman commit` (4.3) refuses
# --root/--runroot on its command line ("runroot must be set").
printf '[storage]\ndriver = "overlay"\nrunroot = "%s"\ngraphroot = "%s"\nrootless_storage_path = "%s"\n' \
    "$W/podman/runroot" "$W/podman/root" "$W/podman/root" > "$W/storage.conf"
PODMAN=(env CONTAINERS_STORAGE_CONF="$W/storage.conf" podman)
install -d -m 0755 -o "$BUID" -g "$BGID" "$BSTORE" "$W/podman"
trap stop_podman_pause EXIT
# The image in each tool's storage and the package installed (not timed).
B=(as_user "$W/berth" --store "$BSTORE")
"${B[@]}" pull -q --tls-verify=false "$IMG" > /dev/null
"${B[@]}" run --fakeroot --overlay "$W/overlay" -v "$W/bench-save.deb:/pkg.deb:ro" "$IMG" \
    dpkg -i /pkg.deb > "$W/logs/berth-install.log" 2>&1
as_user "${PODMAN[@]}" pull -q --tls-verify=false "$IMG" > /dev/null
as_user "${PODMAN[@]}" rm -f bench-save > /dev/null 2>&1 || true
as_user "${PODMAN[@]}" run --name bench-save -v "$W/bench-save.deb:/pkg.deb:ro" "$IMG" \
    dpkg -i /pkg.deb > "$W/logs/podman-install.log" 2>&1
# The container's root as a tree, for mksquashfs: berth's saved file
# unpacked (the same content as what the others save).
"${B[@]}" run --overlay "$W/overlay" --save "$W/out/tree-src.sqsh" "$IMG" true 2> "$W/logs/tree-src.log"
as_user unsquashfs -q -n -d "$W/tree" "$W/out/tree-src.sqsh" > /dev/null 2>&1
rm -f "$W/out/tree-src.sqsh"
TREE_BYTES=$(du -sb "$W/tree" | cut -f1)

# save TOOL ROUND: one save as the user; prints "ms bytes".
save() {
    local tool=$1 r=$2 s e bytes out=$W/out/$1-$2.sqsh
    s=$(date +%s%N)
    case $tool in
        berth) "${B[@]}" run --overlay "$W/overlay" --save "$out" "$IMG" true ;;
        podman) as_user "${PODMAN[@]}" commit -q bench-save "bench-saved:$r" ;;
        mksquashfs) as_user mksquashfs "$W/tree" "$out" -noappend -quiet -no-progress \
            -comp zstd -Xcompression-level 3 -b 131072 ;;
    esac > "$W/logs/$tool-$r.out" 2> "$W/logs/$tool-$r.log" || { echo "failed 0"; return; }
    e=$(date +%s%N)
    case $tool in
        podman) bytes=$(as_user "${PODMAN[@]}" image inspect --format '{{.Size}}' "bench-saved:$r") ;;
        *) bytes=$(stat -c %s "$out") ;;
    esac
    echo "$(((e - s) / 1000000)) $bytes"
}

# check TOOL ROUND: the saved image runs the package's program (not timed).
check() {
    local out
    case $1 in
        berth | mksquashfs) out=$("${B[@]}" run --entrypoint bench-save "$W/out/$1-$2.sqsh" 2>&1) ;;
        podman) out=$(as_user "${PODMAN[@]}" run --rm --entrypoint bench-save "bench-saved:$2" 2>&1) ;;
    esac
    [[ $(echo "$out" | tail -1) == bench-save-ok ]] || { log "$1: the saved image printed: $out"; return 1; }
}

TOOLS=(berth podman mksquashfs)
TSV=$W/logs/rounds.tsv
: > "$TSV"
LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
for t in "${TOOLS[@]}"; do save "$t" 0 > /dev/null; done   # warm-up (page cache)
for ((r = 1; r <= RUNS; r++)); do
    n=${#TOOLS[@]}
    for ((k = 0; k < n; k++)); do
        t=${TOOLS[$(((r + k) % n))]}
        read -r ms bytes < <(save "$t" "$r")
        if [[ $ms != failed ]] && ! check "$t" "$r"; then ms=failed; fi
        echo -e "$r\t$t\t$ms\t$bytes" >> "$TSV"
        log "round $r $t: $ms ms, $bytes bytes"
        rm -f "$W/out/$t-$r.sqsh"
        if [[ $t == podman ]]; then
            as_user "${PODMAN[@]}" rmi -f "bench-saved:$r" > /dev/null 2>&1 || true
        fi
    done
done
STAMP=$(date -u +%Y%m%dT%H%M%SZ)
OUT=$HERE/results/save-$STAMP.json
install -d "$HERE/results"
jq -n --arg stamp "$STAMP" --argjson smoke "$SMOKE" --argjson runs "$RUNS" --arg load_before "$LOAD_BEFORE" \
    --argjson deb "$DEB_BYTES" --argjson tree "$TREE_BYTES" \
    --arg berth_version "$("$W/berth" --version | head -1)" --arg git "$(git_describe)" \
    --arg podman "$(version_of podman --version)" --arg mksquashfs "$(version_of mksquashfs -version)" \
    '{time_utc: $stamp, smoke: ($smoke == 1), runs: $runs, loadavg_before: $load_before,
      package_bytes: $deb, tree_bytes: $tree, berth: {version: $berth_version, git: $git},
      versions: {podman: $podman, mksquashfs: $mksquashfs}}' > "$W/logs/meta.json"
python3 "$HERE/lib/save-report.py" "$TSV" "$W/logs/meta.json" "$OUT"
log "results: $OUT"
