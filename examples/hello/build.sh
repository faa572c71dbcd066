#!/bin/bash
# Builds the bundled example image as an OCI layout, from Debian's static
# busybox and the files under rootfs/, with umoci (no registry, no network):
#
#   bash examples/hello/build.sh OUT_DIR      # then: berth import oci:OUT_DIR:latest hello
set -Eeuo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
OUT=${1:?usage: build.sh OUT_DIR}
BUSYBOX=${BUSYBOX:-/bin/busybox}
[[ -x $BUSYBOX ]] || { echo "build.sh: $BUSYBOX missing: apt-get install busybox-static" >&2; exit 1; }
file -L "$BUSYBOX" 2>/dev/null | grep -q "statically linked" \
    || { echo "build.sh: $BUSYBOX is not static: apt-get install busybox-static" >&2; exit 1; }

rootless=()
[[ $(id -u) == 0 ]] || rootless=(--rootless)
work=$(mktemp -d)
trap 'chmod -R u+w "$work" 2>/dev/null; rm -rf "$work"' EXIT

rm -rf "$OUT"
umoci init --layout "$OUT"
umoci new --image "$OUT:latest"
umoci unpack "${rootless[@]}" --image "$OUT:latest" "$work/bundle" >/dev/null
root=$work/bundle/rootfs
mkdir -p "$root"/{bin,etc,tmp,home,work,proc,sys,dev}
chmod 1777 "$root/tmp"
cp "$BUSYBOX" "$root/bin/busybox"
for applet in sh ls cat echo id env pwd true false sleep uname head grep find wc; do
    ln -s busybox "$root/bin/$applet"
done
cp -a "$HERE/rootfs/." "$root/"
printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\n' > "$root/etc/passwd"
printf 'root:x:0:\nnogroup:x:65534:\n' > "$root/etc/group"
umoci repack --image "$OUT:latest" "$work/bundle" >/dev/null
umoci config --image "$OUT:latest" --tag latest \
    --config.env PATH=/bin --config.env GREETING=hello \
    --config.cmd /hello --config.workingdir /work \
    --config.label org.opencontainers.image.title=berth-hello
umoci gc --layout "$OUT"
echo "built $OUT:latest"
