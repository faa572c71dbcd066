#!/bin/bash
# Packs what the real-GPU check (check.sh) needs for a GPU node that has
# no compiler, no Rust and no package registry:
#
#   tests/gpu/bundle.sh OUTDIR [BERTH]
#
# OUTDIR/bin/berth            berth, stripped (default: target/release/berth)
# OUTDIR/bin/squashfuse_ll    wrappers that run this machine's squashfuse_ll
# OUTDIR/bin/tar2sqfs         and tar2sqfs with their libraries (libfuse3,
#                             libsquashfs, compressors) from OUTDIR/lib; the
#                             node's own glibc is used
# OUTDIR/bin/cuda-probe       the driver-API probe, for the native baseline
# OUTDIR/image                an OCI layout, tag latest: static busybox, the
#                             probe and the glibc files it and nvidia-smi need
#                             (a few MiB)
# OUTDIR/check.sh             the check itself
set -Eeuo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
OUT=${1:?usage: bundle.sh OUTDIR [BERTH]}
BERTH=${2:-$ROOT/target/release/berth}
die() { echo "bundle: ERROR: $*" >&2; exit 1; }
for t in gcc strip umoci squashfuse_ll tar2sqfs; do
    command -v "$t" >/dev/null || die "needs $t (apt-get install gcc binutils umoci squashfuse)"
done
if [[ ! -x /bin/busybox ]] || ! file -L /bin/busybox | grep -q 'statically linked'; then
    die "needs a static /bin/busybox (apt-get install busybox-static)"
fi
[[ -x $BERTH ]] || die "no berth at $BERTH (cargo build --release)"

rm -rf "$OUT"
install -d "$OUT/bin" "$OUT/lib"
strip -o "$OUT/bin/berth" "$BERTH"
# squashfuse_ll (rootless mounts) and tar2sqfs (imports), each with a
# wrapper that finds its libraries (not glibc's) in OUTDIR/lib.
for tool in squashfuse_ll tar2sqfs; do
    cp "$(command -v $tool)" "$OUT/bin/$tool.bin"
    for lib in $(ldd "$(command -v $tool)" | awk '/=>/ {print $3}'); do
        case $(basename "$lib") in libc.so.*|libm.so.*|libpthread.so.*|libdl.so.*) continue ;; esac
        cp -L "$lib" "$OUT/lib/"
    done
    cat > "$OUT/bin/$tool" <<SH
#!/bin/sh
D=\$(dirname "\$0")
LD_LIBRARY_PATH="\$D/../lib\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}" exec "\$D/$tool.bin" "\$@"
SH
    chmod 0755 "$OUT/bin/$tool"
done
gcc -O2 -o "$OUT/bin/cuda-probe" "$ROOT/tests/setup/fakegpu/cuda-probe.c" -ldl
cp "$HERE/check.sh" "$OUT/check.sh"

WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
R=$WORK/rootfs
install -d "$R/bin" "$R/usr/local/bin" "$R/lib64" "$R/lib/x86_64-linux-gnu" "$R/etc" \
    "$R/tmp" "$R/proc" "$R/sys" "$R/dev" "$R/root" "$R/home"
chmod 1777 "$R/tmp"
cp /bin/busybox "$R/bin/busybox"
for a in sh ls cat env echo true false id grep head wc readlink ln; do ln -s busybox "$R/bin/$a"; done
cp "$OUT/bin/cuda-probe" "$R/usr/local/bin/cuda-probe"
cp -L /lib64/ld-linux-x86-64.so.2 "$R/lib64/"
for l in libc.so.6 libm.so.6 libpthread.so.0 libdl.so.2 librt.so.1; do
    cp -L "/lib/x86_64-linux-gnu/$l" "$R/lib/x86_64-linux-gnu/"
done
printf 'root:x:0:0:root:/root:/bin/sh\n' > "$R/etc/passwd"
printf 'root:x:0:\n' > "$R/etc/group"
tar --numeric-owner --owner=0 --group=0 -C "$R" -cf "$WORK/layer.tar" .
umoci init --layout "$OUT/image"
umoci new --image "$OUT/image:latest"
umoci raw add-layer --image "$OUT/image:latest" "$WORK/layer.tar"
umoci config --image "$OUT/image:latest" \
    --config.env PATH=/usr/local/bin:/usr/bin:/bin --config.cmd cuda-probe
echo "bundle: $(du -sh "$OUT" | cut -f1) in $OUT"
