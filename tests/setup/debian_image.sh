#!/bin/bash
# Builds the "Debian bookworm minbase + python3" test image (debootstrap,
# cached across runs under $BERTH_IT_CACHE) and pushes it to the anonymous
# test registry as berth-test/debian-python:latest. Run by setup.sh, as root.
#
# Config (what the runtime tests check against Docker semantics): Env PATH
# and GREETING, WorkingDir /srv/app, Cmd python3 -c "print('default cmd')".
#
# The same tree is also pushed as berth-test/debian:12 and :latest with
# Docker Hub's debian config (Env PATH, Cmd bash, no WorkingDir): the
# documentation's examples (tests/docs.sh) run against it as "debian".
set -Eeuo pipefail
REG=${1:?usage: debian_image.sh REGISTRY}
CACHE=${BERTH_IT_CACHE:-/var/tmp/berth-it-cache}
ROOTFS=$CACHE/debian-python-rootfs
LAYOUT=$CACHE/debian-python-oci
log() { echo "debian_image: $*"; }
die() { echo "debian_image: ERROR: $*" >&2; exit 1; }

# shellcheck source=tests/setup/debian_mirror.sh
source "$(dirname "${BASH_SOURCE[0]}")/debian_mirror.sh"

mkdir -p "$CACHE"
if [[ ! -e $CACHE/rootfs.done ]]; then
    mirror=$(debian_mirror)
    [[ -n $mirror ]] || die "no bookworm apt source found"
    log "debootstrap minbase + python3 from $mirror"
    rm -rf "$ROOTFS" "$ROOTFS.tmp"
    debootstrap --variant=minbase --include=python3 bookworm "$ROOTFS.tmp" "$mirror" \
        > "$CACHE/debootstrap.log" 2>&1 || { tail -20 "$CACHE/debootstrap.log" >&2; die "debootstrap failed"; }
    rm -rf "$ROOTFS.tmp"/var/cache/apt/archives/*.deb "$ROOTFS.tmp"/var/lib/apt/lists/*
    # Registry images carry no device nodes (rootless unpackers cannot make them).
    find "$ROOTFS.tmp" -xdev \( -type b -o -type c \) -delete
    mkdir -p "$ROOTFS.tmp/srv/app"
    mv "$ROOTFS.tmp" "$ROOTFS"
    touch "$CACHE/rootfs.done"
fi

if [[ ! -e $CACHE/oci.done ]]; then
    log "packing the OCI layout"
    rm -rf "$LAYOUT"
    # shellcheck disable=SC2012   # debootstrap's top-level names are plain; ls sorts them
    (cd "$ROOTFS" && ls -A | tar --numeric-owner --sort=name --xattrs -cf - -T -) > "$CACHE/layer.tar"
    umoci init --layout "$LAYOUT"
    umoci new --image "$LAYOUT:latest"
    umoci config --image "$LAYOUT:latest" \
        --config.env "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" \
        --config.env "GREETING=hello from the image" \
        --config.workingdir /srv/app \
        --config.cmd python3 --config.cmd -c --config.cmd "print('default cmd')"
    umoci raw add-layer --image "$LAYOUT:latest" "$CACHE/layer.tar"
    umoci gc --layout "$LAYOUT"
    rm -f "$CACHE/layer.tar"
    touch "$CACHE/oci.done"
fi

skopeo --insecure-policy copy --quiet --dest-tls-verify=false \
    "oci:$LAYOUT:latest" "docker://$REG/berth-test/debian-python:latest" || die "push failed"
log "pushed $REG/berth-test/debian-python:latest"

umoci config --image "$LAYOUT:latest" --tag debian --clear=config.env --clear=config.cmd \
    --config.workingdir "" --config.cmd bash \
    --config.env "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
for tag in 12 latest; do
    skopeo --insecure-policy copy --quiet --dest-tls-verify=false \
        "oci:$LAYOUT:debian" "docker://$REG/berth-test/debian:$tag" || die "push failed"
done
log "pushed $REG/berth-test/debian:12 and :latest (Docker Hub's debian config)"
