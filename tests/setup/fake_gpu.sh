#!/bin/bash
# A fake NVIDIA driver tree for the host-resource tests on machines without
# a GPU (named as a fake: it only stands in for the driver). Run by
# setup.sh as root (device nodes need mknod):
#
#   fake_gpu.sh DIR [REGISTRY]
#
# DIR/lib        libcuda.so.999.99 (soname libcuda.so.1, exports cuInit and
#                cuDeviceGetCount) and libnvidia-ml.so.999.99, with the
#                soname links ldconfig makes
# DIR/ld.so.cache  the loader cache of DIR/lib, written by the real ldconfig
# DIR/bin        nvidia-smi (a script that says it is the fake)
# DIR/dev        nvidiactl, nvidia0, nvidia1, nvidia-uvm, nvidia-caps/nvidia-cap1:
#                character devices 1:3 (the null device), so they open
# DIR/proc       gpus/*/information with UUIDs and minors, as the driver's
# DIR/cdi        nvidia.com/gpu spec for the same tree (devices 0, 1, all)
# DIR/cdi-empty  no specs (forces discovery)
#
# and, given a REGISTRY, pushes REGISTRY/berth-test/gpu-probe:latest: the
# Debian test image plus /usr/local/bin/cuda-probe, which dlopens
# libcuda.so.1 (bench/inject.sh needs only the tree).
set -Eeuo pipefail
DIR=${1:?usage: fake_gpu.sh DIR [REGISTRY]}
REG=${2:-}
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
CACHE=${BERTH_IT_CACHE:-/var/tmp/berth-it-cache}
log() { echo "fake_gpu: $*"; }
die() { echo "fake_gpu: ERROR: $*" >&2; exit 1; }

rm -rf "$DIR"
install -d -m 0755 "$DIR" "$DIR/lib" "$DIR/bin" "$DIR/dev" "$DIR/dev/nvidia-caps" \
    "$DIR/cdi" "$DIR/cdi-empty" "$DIR/proc/gpus/0000:01:00.0" "$DIR/proc/gpus/0000:02:00.0"

gcc -shared -fPIC -O2 -Wl,-soname,libcuda.so.1 -o "$DIR/lib/libcuda.so.999.99" "$HERE/fakegpu/libcuda.c"
echo 'int nvmlInit_v2(void) { return 0; }' > "$DIR/nvml.c"
gcc -shared -fPIC -O2 -Wl,-soname,libnvidia-ml.so.1 -o "$DIR/lib/libnvidia-ml.so.999.99" "$DIR/nvml.c"
rm -f "$DIR/nvml.c"
# The soname links and the cache, as the driver installer's ldconfig run
# makes them (-f /dev/null: only this directory and the trusted ones).
ldconfig -n "$DIR/lib"
ldconfig -C "$DIR/ld.so.cache" -f /dev/null "$DIR/lib"
# grep reads it all (-q could leave early: SIGPIPE under pipefail).
ldconfig -p -C "$DIR/ld.so.cache" | grep "libcuda.so.1 .*=> $DIR/lib/" > /dev/null \
    || die "the fake loader cache lacks libcuda.so.1"

cat > "$DIR/bin/nvidia-smi" <<'SH'
#!/bin/sh
# FAKE nvidia-smi (berth's test fixture)
echo "GPU 0: Fake GPU (UUID: GPU-fake-0000)"
echo "GPU 1: Fake GPU (UUID: GPU-fake-0001)"
SH
chmod 0755 "$DIR/bin/nvidia-smi"

for n in nvidiactl nvidia0 nvidia1 nvidia-uvm nvidia-caps/nvidia-cap1; do
    mknod -m 0666 "$DIR/dev/$n" c 1 3
done
printf 'Model: \t\t Fake GPU\nGPU UUID: \t GPU-fake-0000\nDevice Minor: \t 0\n' \
    > "$DIR/proc/gpus/0000:01:00.0/information"
printf 'Model: \t\t Fake GPU\nGPU UUID: \t GPU-fake-0001\nDevice Minor: \t 1\n' \
    > "$DIR/proc/gpus/0000:02:00.0/information"

cat > "$DIR/cdi/fake-nvidia.yaml" <<YAML
# A CDI spec for the fake driver tree, in the form nvidia-ctk writes.
cdiVersion: "0.6.0"
kind: nvidia.com/gpu
devices:
  - name: "0"
    containerEdits:
      deviceNodes:
        - path: /dev/nvidia0
          hostPath: $DIR/dev/nvidia0
  - name: "1"
    containerEdits:
      deviceNodes:
        - path: /dev/nvidia1
          hostPath: $DIR/dev/nvidia1
  - name: all
    containerEdits:
      deviceNodes:
        - path: /dev/nvidia0
          hostPath: $DIR/dev/nvidia0
        - path: /dev/nvidia1
          hostPath: $DIR/dev/nvidia1
containerEdits:
  env:
    - NVIDIA_VISIBLE_DEVICES=void
    - FAKE_CDI_SPEC=yes
  deviceNodes:
    - path: /dev/nvidiactl
      hostPath: $DIR/dev/nvidiactl
  mounts:
    - hostPath: $DIR/lib/libcuda.so.999.99
      containerPath: /usr/lib/x86_64-linux-gnu/libcuda.so.1
      options: [ro, nosuid, nodev, bind]
    - hostPath: $DIR/bin/nvidia-smi
      containerPath: /usr/bin/nvidia-smi
      options: [ro, nosuid, nodev, bind]
YAML
chmod -R a+rX "$DIR"
if [[ -z $REG ]]; then
    log "fake driver tree in $DIR"
    exit 0
fi

# The probe image: the Debian test image plus the probe.
LAYOUT=$CACHE/debian-python-oci
[[ -e $LAYOUT/index.json ]] || die "no Debian test image at $LAYOUT (debian_image.sh runs first)"
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
gcc -O2 -o "$WORK/cuda-probe" "$HERE/fakegpu/cuda-probe.c" -ldl
install -d "$WORK/layer/usr/local/bin"
install -m 0755 "$WORK/cuda-probe" "$WORK/layer/usr/local/bin/cuda-probe"
tar --numeric-owner --owner=0 --group=0 -C "$WORK/layer" -cf "$WORK/layer.tar" usr
cp -a "$LAYOUT" "$WORK/oci"
umoci raw add-layer --image "$WORK/oci:latest" "$WORK/layer.tar"
skopeo --insecure-policy copy --quiet --dest-tls-verify=false \
    "oci:$WORK/oci:latest" "docker://$REG/berth-test/gpu-probe:latest" || die "push failed"
log "fake driver tree in $DIR; pushed $REG/berth-test/gpu-probe:latest"
