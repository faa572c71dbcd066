#!/bin/bash
# Builds berth's RPM package from a build directory:
#
#   packaging/rpm/build.sh [BIN_DIR] [OUT_DIR]
#       BIN_DIR  holds berth and libberth_spank.so (default target/release)
#       OUT_DIR  where berth-VERSION-1.ARCH.rpm goes (default target/rpm)
#
# The files are those of the .deb (packaging/stage.sh); rpmbuild (RPM
# distributions, or Debian's rpm package) writes the package from a spec
# made here. /etc/berth/berth.toml is %config(noreplace): an upgrade keeps
# the site's edits. Dependencies name the RPM distributions' packages
# (squashfs-tools-ng comes from EPEL on RHEL); the libraries berth links
# are found by rpmbuild itself.
set -Eeuo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BIN=${1:-$ROOT/target/release}
OUT=${2:-$ROOT/target/rpm}
command -v rpmbuild > /dev/null \
    || { echo "rpm/build.sh: rpmbuild not found (dnf install rpm-build, or apt-get install rpm)" >&2; exit 1; }
VERSION=$(sed -n 's/^version = "\(.*\)"/\1/p' "$ROOT/Cargo.toml" | head -1)
ARCH=$(uname -m)
TOP=$(mktemp -d)
trap 'rm -rf "$TOP"' EXIT
STAGE=$TOP/stage
mkdir -p "$STAGE" "$TOP/rpmbuild"
bash "$ROOT/packaging/stage.sh" "$BIN" "$STAGE"
# Every staged file, directories of berth's own as %dir, the config as a
# conffile.
files() {
    echo '%config(noreplace) /etc/berth/berth.toml'
    echo '%dir /etc/berth'
    echo '%dir /etc/berth/modules.d'
    echo '%dir /usr/lib/berth'
    (cd "$STAGE" && find usr/share/doc/berth -type d | sort | sed 's|^|%dir /|')
    (cd "$STAGE" && find . -type f ! -path ./etc/berth/berth.toml | sort | sed 's|^\.||')
}
cat > "$TOP/berth.spec" <<SPEC
Name:           berth
Version:        $VERSION
Release:        1
Summary:        Rootless container engine for HPC
License:        Apache-2.0
Requires:       squashfs-tools-ng, fuse3, shadow-utils
Recommends:     fuse-overlayfs, squashfuse, ca-certificates
Suggests:       slurm, dropbear

%define debug_package %{nil}
%define __os_install_post %{nil}
%define _build_id_links none

%description
berth runs OCI/Docker images on supercomputers without root or a daemon:
images are pulled or imported into one squashfs file each, mounted
read-only in a user namespace, with GPUs, the host's MPI and interconnects
injected, and Slurm jobs run in them through a SPANK plugin
(srun --container-image=...).

%install
cp -a "$STAGE/." "%{buildroot}/"

%files
$(files)
SPEC
rpmbuild -bb --quiet --target "$ARCH" --define "_topdir $TOP/rpmbuild" \
    --define "_rpmdir $TOP/out" "$TOP/berth.spec" > "$TOP/rpmbuild.log" 2>&1 \
    || { cat "$TOP/rpmbuild.log" >&2; exit 1; }
mkdir -p "$OUT"
RPM=$OUT/berth-$VERSION-1.$ARCH.rpm
mv "$TOP/out/$ARCH/berth-$VERSION-1.$ARCH.rpm" "$RPM"
echo "$RPM"
