#!/bin/bash
# Images for the MPI bind-model tests, pushed to REGISTRY/berth-test/:
#
#   mpich          the Debian test image plus MPICH's runtime (the host's
#                  libmpich12 and its dependencies' packaged files, copied
#                  in) and /usr/local/bin/mpi-probe and pingpong, built with
#                  mpicc: an image with its own MPI (the hybrid model)
#   openmpi        the same with Open MPI's runtime (libopenmpi3, its MCA
#                  components, PMIx, their libraries' packages and Open
#                  MPI's help and configuration files) and mpi-probe built
#                  with mpicc.openmpi: for srun --mpi=pmix
#   openmpi-stub   the Debian test image plus a stub libmpi.so.40.30.2
#                  (soname libmpi.so.40, Open MPI's ABI): to be refused
#   mpich-newer    the Debian test image plus a stub libmpi.so.12.9.0: an
#                  MPICH-ABI library newer than the host's (refused under
#                  abi = "full")
#
# Run by setup.sh as root, after debian_image.sh:
#
#   mpi_images.sh REGISTRY [BASE_LAYOUT:TAG]
#
# BASE_LAYOUT:TAG is the image to build on (default: the test suite's Debian
# image; bench/mpi.sh passes bench/pull.sh's).
set -Eeuo pipefail
REG=${1:?usage: mpi_images.sh REGISTRY [BASE_LAYOUT:TAG]}
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
CACHE=${BERTH_IT_CACHE:-/var/tmp/berth-it-cache}
BASE=${2:-$CACHE/debian-python-oci:latest}
LAYOUT=${BASE%:*}
TAG=${BASE##*:}
LIBDIR=/usr/lib/x86_64-linux-gnu
log() { echo "mpi_images: $*"; }
die() { echo "mpi_images: ERROR: $*" >&2; exit 1; }
[[ -e $LAYOUT/index.json ]] || die "no Debian test image at $LAYOUT"
# The MPI compiler wrappers by name: plain mpicc is whichever MPI the
# alternatives system prefers (Open MPI once it is installed).
command -v mpicc.mpich > /dev/null || die "mpicc.mpich missing (package libmpich-dev)"
command -v mpicc.openmpi > /dev/null || die "mpicc.openmpi missing (package libopenmpi-dev)"
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

# push NAME LAYERDIR: the Debian image plus LAYERDIR as one layer.
push() {
    local name=$1 layer=$2
    rm -rf "$WORK/oci"
    cp -a "$LAYOUT" "$WORK/oci"
    tar --numeric-owner --owner=0 --group=0 -C "$layer" -cf "$WORK/$name.tar" .
    umoci raw add-layer --image "$WORK/oci:$TAG" "$WORK/$name.tar"
    skopeo --insecure-policy copy --quiet --dest-tls-verify=false \
        "oci:$WORK/oci:$TAG" "docker://$REG/berth-test/$name:latest" || die "push $name failed"
    log "pushed $REG/berth-test/$name:latest"
}

# copy_file PATH ROOT: PATH copied under ROOT at its real directory (so a
# /lib/... path lands in /usr/lib/... and never shadows the image's
# /lib -> usr/lib link), symlinks kept as symlinks.
copy_file() {
    local f=$1 root=$2 dir
    dir=$(readlink -f "$(dirname "$f")")
    install -d "$root$dir"
    # A link managed by update-alternatives points into /etc/alternatives,
    # which no package lists: copy what it resolves to.
    if [[ -L $f && $(readlink "$f") == /etc/alternatives/* ]]; then
        cp -L "$f" "$root$dir/"
    else
        cp -a "$f" "$root$dir/"
    fi
}

# mpich: the probe and MPICH's runtime.
L=$WORK/mpich
install -d "$L/usr/local/bin"
mpicc.mpich -O2 -o "$L/usr/local/bin/mpi-probe" "$HERE/mpi/mpi-probe.c" -ldl
mpicc.mpich -O2 -o "$L/usr/local/bin/pingpong" "$HERE/mpi/pingpong.c"

# packages_of FILE...: the packages of every library FILEs load (dpkg knows
# a file under /lib or /usr/lib, whichever its package lists), but glibc's.
packages_of() {
    for f in $(ldd "$@" 2>/dev/null | awk '$2 == "=>" { print $3 }' | sort -u); do
        dpkg -S "$f" 2>/dev/null || dpkg -S "$(readlink -f "$f")" 2>/dev/null || true
    done | cut -d: -f1 | sort -u | grep -vx 'libc6' || true
}

# copy_packages ROOT KEEP_SHARE PACKAGE...: the packages' files under ROOT
# (their /usr/share and /etc too when KEEP_SHARE is 1).
copy_packages() {
    local root=$1 share=$2 p f
    shift 2
    for p in "$@"; do
        dpkg -L "$p" | while read -r f; do
            if [[ $share == 0 ]]; then
                case $f in /usr/share/*|/etc/*) continue ;; esac
            else
                case $f in /usr/share/doc/*|/usr/share/man/*|/usr/share/lintian/*) continue ;; esac
            fi
            if [[ -f $f || -L $f ]] && [[ ! -d $f ]]; then copy_file "$f" "$root"; fi
        done
    done
}

mapfile -t pkgs < <({ packages_of "$L/usr/local/bin/mpi-probe"; printf '%s\n' libmpich12 libucx0; } | sort -u)
log "MPICH runtime packages copied into the image: ${pkgs[*]}"
copy_packages "$L" 0 "${pkgs[@]}"
push mpich "$L"

# openmpi: the probe and Open MPI's runtime, components and PMIx included
# (they are loaded with dlopen, so ldd of the probe does not name them).
L=$WORK/openmpi
install -d "$L/usr/local/bin"
mpicc.openmpi -O2 -o "$L/usr/local/bin/mpi-probe" "$HERE/mpi/mpi-probe.c" -ldl
base=(libopenmpi3 libpmix2 openmpi-common)
mapfile -t plugins < <(dpkg -L "${base[@]}" | grep '\.so' | while read -r f; do [[ -f $f ]] && echo "$f"; done)
mapfile -t pkgs < <({ printf '%s\n' "${base[@]}"; packages_of "$L/usr/local/bin/mpi-probe" "${plugins[@]}"; } \
    | sort -u)
log "Open MPI runtime packages copied into the image: ${pkgs[*]}"
copy_packages "$L" 1 "${pkgs[@]}"
# Sonames that postinst scripts make (update-alternatives), which dpkg -L
# does not list: each library as the loader finds it here.
for f in $(ldd "$L/usr/local/bin/mpi-probe" "${plugins[@]}" 2>/dev/null | awk '$2 == "=>" { print $3 }' | sort -u); do
    d=$(readlink -f "$(dirname "$f")")
    [[ -e $L$d/$(basename "$f") ]] || { install -d "$L$d"; cp -L "$f" "$L$d/"; }
done
push openmpi "$L"

# Stub MPI libraries with chosen sonames.
stub() {   # NAME SONAME FILE
    local l=$WORK/$1
    install -d "$l$LIBDIR"
    echo 'int MPI_Init(int *c, char ***v) { (void)c; (void)v; return 0; }' > "$WORK/stub.c"
    gcc -shared -fPIC -Wl,-soname,"$2" -o "$l$LIBDIR/$3" "$WORK/stub.c"
    ln -s "$3" "$l$LIBDIR/$2"
    push "$1" "$l"
}
stub openmpi-stub libmpi.so.40 libmpi.so.40.30.2
stub mpich-newer libmpi.so.12 libmpi.so.12.9.0
