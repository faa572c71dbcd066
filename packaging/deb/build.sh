#!/bin/bash
# Builds berth's Debian package from a build directory:
#
#   packaging/deb/build.sh [--fast] [BIN_DIR] [OUT_DIR]
#       BIN_DIR  holds berth and libberth_spank.so (default target/release)
#       OUT_DIR  where berth_VERSION_ARCH.deb goes (default target/debian)
#       --fast   gzip level 1 instead of xz (CI)
#
# The package's files are staged by packaging/stage.sh (the .rpm has the
# same), the control file written here, and dpkg-deb builds it (no other
# tool needed). Not cargo-deb or cargo-generate-rpm: each is one more tool
# to build (cargo install, minutes on a 2-core node) that would list the
# files a second time, and neither runs the built berth to write the
# manual pages and completions; dpkg-deb and rpmbuild are the
# distributions' own.
set -Eeuo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
COMPRESS=(-Zxz)
if [[ ${1:-} == --fast ]]; then COMPRESS=(-Zgzip -z1); shift; fi
BIN=${1:-$ROOT/target/release}
OUT=${2:-$ROOT/target/debian}
VERSION=$(sed -n 's/^version = "\(.*\)"/\1/p' "$ROOT/Cargo.toml" | head -1)
ARCH=$(dpkg --print-architecture)
STAGE=$(mktemp -d)
trap 'rm -rf "$STAGE"' EXIT
bash "$ROOT/packaging/stage.sh" "$BIN" "$STAGE"
install -d "$STAGE/DEBIAN"
echo /etc/berth/berth.toml > "$STAGE/DEBIAN/conffiles"
SIZE=$(du -sk --exclude=DEBIAN "$STAGE" | cut -f1)
cat > "$STAGE/DEBIAN/control" <<CONF
Package: berth
Version: $VERSION
Architecture: $ARCH
Maintainer: berth developers <berth@localhost>
Installed-Size: $SIZE
Depends: libc6, squashfs-tools-ng, fuse3, uidmap
Recommends: squashfuse, ca-certificates, fuse-overlayfs
Suggests: slurm-wlm, dropbear-bin
Section: admin
Priority: optional
Description: rootless container engine for HPC
 berth runs OCI/Docker images on supercomputers without root or a daemon:
 images are pulled or imported into one squashfs file each, mounted
 read-only in a user namespace, with GPUs, the host's MPI and interconnects
 injected, and Slurm jobs run in them through a SPANK plugin
 (srun --container-image=...).
CONF
mkdir -p "$OUT"
DEB=$OUT/berth_${VERSION}_${ARCH}.deb
dpkg-deb --root-owner-group "${COMPRESS[@]}" --build "$STAGE" "$DEB" > /dev/null
echo "$DEB"
