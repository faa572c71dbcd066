#!/bin/bash
# Runs berth's fuzz targets (fuzz/, cargo-fuzz with libFuzzer) for a fixed
# time each, from seeds written here, and prints executions per target:
#
#   bash tests/fuzz.sh [--seconds N] [TARGET...]     (default 60 s each, all)
#
# Targets: reference, manifest, layer (the layer applier: no emitted path
# or hard link outside the root), ldcache, cdi, config, squashfs (the
# reader, seeded with mksquashfs images of each compressor), amend (the
# writer amending such an image, same seeds). Needs the nightly
# toolchain and cargo-fuzz (installed here when missing). A crash stops the
# run with its input in fuzz/artifacts/TARGET/; it becomes a regression
# test next to the code it broke. CI runs 10 s each (tests/run.sh).
set -Eeuo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
SECONDS_EACH=60
TARGETS=()
while (($#)); do
    case $1 in
        --seconds) SECONDS_EACH=$2; shift 2 ;;
        -h|--help) sed -n 2,12p "$0"; exit 0 ;;
        *) TARGETS+=("$1"); shift ;;
    esac
done
((${#TARGETS[@]})) || TARGETS=(reference manifest layer ldcache cdi config squashfs amend)
log() { echo "fuzz.sh: $*" >&2; }
# Exit 3: the tools could not be had (no network to the toolchain
# server, say): tests/run.sh reports the fuzz run as skipped, not failed.
if ! cargo +nightly --version > /dev/null 2>&1; then
    log "no nightly toolchain: installing it (rustup toolchain install nightly --profile minimal)"
    rustup toolchain install nightly --profile minimal > /dev/null || { log "cannot install nightly"; exit 3; }
fi
if ! cargo fuzz --version > /dev/null 2>&1; then
    log "installing cargo-fuzz (cargo install --locked cargo-fuzz)"
    cargo install --locked --quiet cargo-fuzz || { log "cannot install cargo-fuzz"; exit 3; }
fi
cd "$ROOT/fuzz"
# No sanitizer: the code under test is safe Rust (a panic is the crash);
# the build is much faster without AddressSanitizer.
FLAGS=(--sanitizer none -O)
log "building the targets"
cargo +nightly fuzz build "${FLAGS[@]}" > /dev/null 2>&1 || cargo +nightly fuzz build "${FLAGS[@]}"

seed() {   # TARGET NAME: the seed's content on stdin
    install -d "corpus/$1"
    cat > "corpus/$1/seed-$2"
}
printf 'docker.io/library/debian:12' | seed reference 1
printf '127.0.0.1:5000/berth-test/layers@sha256:%064d' 0 | seed reference 2
printf 'ghcr.io/org/app:v1.2-rc.3' | seed reference 3
printf 'localhost/x' | seed reference 4
python3 - <<'PY'
import io, json, os, tarfile
def w(target, name, data):
    os.makedirs(f"corpus/{target}", exist_ok=True)
    open(f"corpus/{target}/seed-{name}", "wb").write(data)
d = "sha256:" + "0" * 64
w("manifest", "manifest", json.dumps({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
  "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": d, "size": 2},
  "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", "digest": d, "size": 10}]}).encode())
w("manifest", "index", json.dumps({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json",
  "manifests": [{"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": d, "size": 10,
                 "platform": {"os": "linux", "architecture": "amd64"}},
                {"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": d, "size": 10,
                 "platform": {"os": "linux", "architecture": "arm64", "variant": "v8"}}]}).encode())
w("manifest", "config", json.dumps({"architecture": "amd64", "os": "linux",
  "config": {"Env": ["PATH=/usr/bin"], "Entrypoint": ["/bin/sh"], "Cmd": ["-c", "true"], "WorkingDir": "/w"},
  "rootfs": {"type": "layers", "diff_ids": [d]}}).encode())
def layer(entries):
    b = io.BytesIO()
    with tarfile.open(fileobj=b, mode="w", format=tarfile.GNU_FORMAT) as t:
        for kind, name, extra in entries:
            i = tarfile.TarInfo(name)
            if kind == "dir":
                i.type = tarfile.DIRTYPE; i.mode = 0o755; t.addfile(i)
            elif kind == "file":
                i.size = len(extra); t.addfile(i, io.BytesIO(extra))
            elif kind == "sym":
                i.type = tarfile.SYMTYPE; i.linkname = extra; t.addfile(i)
            elif kind == "hard":
                i.type = tarfile.LNKTYPE; i.linkname = extra; t.addfile(i)
    return b.getvalue()
w("layer", "tree", layer([("dir", "etc", None), ("file", "etc/hosts", b"127.0.0.1 x\n"),
  ("sym", "etc/link", "hosts"), ("hard", "etc/hard", "etc/hosts"), ("dir", "usr/lib", None)]))
w("layer", "whiteouts", layer([("file", "etc/.wh.hosts", b""), ("dir", "usr", None),
  ("file", "usr/.wh..wh..opq", b""), ("file", "usr/new", b"n")]))
w("layer", "hostile", layer([("sym", "up", "../../.."), ("file", "up/x", b"x"), ("hard", "h", "../etc/passwd")]))
w("cdi", "spec", b"""cdiVersion: "0.6.0"
kind: nvidia.com/gpu
devices:
  - name: "0"
    containerEdits:
      deviceNodes:
        - path: /dev/nvidia0
containerEdits:
  env: [NVIDIA_VISIBLE_DEVICES=void]
  mounts:
    - {hostPath: /usr/lib/libcuda.so.1, containerPath: /usr/lib/libcuda.so.1, options: [ro, bind]}
""")
w("cdi", "name", b"nvidia.com/gpu=all")
w("config", "site", b"""store = "/scratch/berth"
shared_stores = ["/lustre/berth"]
insecure_registries = ["reg:5000"]
[network]
attempts = 3
[squashfs]
compressor = "zstd"
block_size = 131072
[host]
ld_cache = "/etc/ld.so.cache"
[modules.cxi]
when = "request"
binds = ["/opt/cray:ro"]
devices = ["/dev/cxi0"]
[modules.cxi.env.set]
FI_PROVIDER = "cxi"
""")
PY
# squashfs: small real images, one per compressor (mksquashfs, when there).
install -d corpus/squashfs
if command -v mksquashfs > /dev/null; then
    sq=$(mktemp -d)
    mkdir -p "$sq/tree/d/e"
    printf 'hello\n' > "$sq/tree/a"
    head -c 20000 /etc/services > "$sq/tree/d/big" 2>/dev/null || printf 'x%.0s' {1..20000} > "$sq/tree/d/big"
    ln -s a "$sq/tree/link"
    ln "$sq/tree/a" "$sq/tree/d/e/hard"
    for c in gzip zstd xz lz4 lzo; do
        mksquashfs "$sq/tree" "corpus/squashfs/seed-$c" -comp "$c" -b 4096 \
            -noappend -quiet -no-progress > /dev/null 2>&1 || true
    done
    rm -rf "$sq"
fi
# amend: the same images.
install -d corpus/amend
cp corpus/squashfs/seed-* corpus/amend/ 2>/dev/null || true
install -d corpus/ldcache
if [[ -r /etc/ld.so.cache ]]; then cp /etc/ld.so.cache corpus/ldcache/seed-host 2>/dev/null || true; fi

declare -A EXECS
status=0
for t in "${TARGETS[@]}"; do
    log "$t: ${SECONDS_EACH} s"
    out=$(cargo +nightly fuzz run "${FLAGS[@]}" "$t" "corpus/$t" -- \
        -max_total_time="$SECONDS_EACH" -rss_limit_mb=2048 -print_final_stats=1 2>&1) || {
        echo "$out" | tail -40 >&2
        log "$t: CRASH (input in fuzz/artifacts/$t/)"
        status=1
        continue
    }
    runs=$(echo "$out" | sed -n 's/^stat::number_of_executed_units: *//p' | tail -1)
    EXECS[$t]=${runs:-?}
done
echo "| target | seconds | executions | crashes |"
echo "|---|---:|---:|---:|"
for t in "${TARGETS[@]}"; do
    echo "| $t | $SECONDS_EACH | ${EXECS[$t]:-crashed} | $([[ -n ${EXECS[$t]:-} ]] && echo 0 || echo 1) |"
done
exit "$status"
