#!/bin/bash
# Builds berth's Debian package from a build directory:
#
#   packaging/deb/build.sh [--fast] [BIN_DIR] [OUT_DIR]
#       BIN_DIR  holds berth and libberth_spank.so (default target/release)
#       OUT_DIR  where berth_VERSION_ARCH.deb goes (default target/debian)
#       --fast   gzip level 1 instead of xz (CI)
#
# The package, staged here and built by dpkg-deb (no other tool needed):
#   /usr/bin/berth                       (debug info stripped)
#   /usr/lib/berth/libberth_spank.so     the SPANK plugin (not enabled:
#                                        /usr/share/doc/berth/examples/plugstack.conf)
#   /usr/share/man/man1/berth*.1.gz      from `berth man`
#   bash, zsh and fish completions       from `berth completion`
#   /etc/berth/berth.toml                the commented site config (a conffile)
#   /etc/berth/modules.d/                empty: the site's modules
#   /usr/share/doc/berth/                README, benchmarks, examples/modules/*.toml
set -Eeuo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
COMPRESS=(-Zxz)
if [[ ${1:-} == --fast ]]; then COMPRESS=(-Zgzip -z1); shift; fi
BIN=${1:-$ROOT/target/release}
OUT=${2:-$ROOT/target/debian}
for f in "$BIN/berth" "$BIN/libberth_spank.so"; do
    [[ -x $f ]] || { echo "deb/build.sh: no $f (cargo build --release -p berth -p berth-slurm)" >&2; exit 1; }
done
VERSION=$(sed -n 's/^version = "\(.*\)"/\1/p' "$ROOT/Cargo.toml" | head -1)
ARCH=$(dpkg --print-architecture)
STAGE=$(mktemp -d)
trap 'rm -rf "$STAGE"' EXIT
umask 022

install -d "$STAGE/DEBIAN" "$STAGE/usr/bin" "$STAGE/usr/lib/berth" \
    "$STAGE/usr/share/man/man1" "$STAGE/usr/share/bash-completion/completions" \
    "$STAGE/usr/share/zsh/vendor-completions" "$STAGE/usr/share/fish/vendor_completions.d" \
    "$STAGE/etc/berth/modules.d" "$STAGE/usr/share/doc/berth/examples/modules"
objcopy --strip-debug "$BIN/berth" "$STAGE/usr/bin/berth"
objcopy --strip-debug "$BIN/libberth_spank.so" "$STAGE/usr/lib/berth/libberth_spank.so"
chmod 0755 "$STAGE/usr/bin/berth" "$STAGE/usr/lib/berth/libberth_spank.so"
"$BIN/berth" man --dir "$STAGE/usr/share/man/man1" > /dev/null
gzip -9n "$STAGE"/usr/share/man/man1/*.1
"$BIN/berth" completion bash > "$STAGE/usr/share/bash-completion/completions/berth"
"$BIN/berth" completion zsh > "$STAGE/usr/share/zsh/vendor-completions/_berth"
"$BIN/berth" completion fish > "$STAGE/usr/share/fish/vendor_completions.d/berth.fish"
install -m 0644 "$ROOT/packaging/berth.toml" "$STAGE/etc/berth/berth.toml"
install -m 0644 "$ROOT/README.md" "$ROOT/docs/benchmarks.md" "$STAGE/usr/share/doc/berth/"
install -m 0644 "$ROOT"/examples/modules/*.toml "$STAGE/usr/share/doc/berth/examples/modules/"
cat > "$STAGE/usr/share/doc/berth/examples/plugstack.conf" <<CONF
# Slurm's plugstack.conf line for berth's SPANK plugin (srun --container-image=...):
required /usr/lib/berth/libberth_spank.so berth=/usr/bin/berth
CONF
cat > "$STAGE/usr/share/doc/berth/copyright" <<CONF
Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/
Upstream-Name: berth
Files: *
License: Apache-2.0
 On Debian systems the full text is in /usr/share/common-licenses/Apache-2.0.
CONF
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
Suggests: slurm-wlm
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
