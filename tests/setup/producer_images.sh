#!/bin/bash
# Images made by other producers than make_images.py, each with umoci's
# unpacking of the same image as the oracle (issue: images that podman and
# umoci accept must not be refused). Run by setup.sh, as root:
#
#   producer_images.sh REGISTRY FIXTURES
#
# On a small merged-/usr base (bin -> usr/bin, lib -> usr/lib), with umoci
# 0.4.7 (Debian's package):
#   producer-umoci-insert  `umoci insert DIR /`: the root entry "/", and a
#                          layer without the last entry's padding or the
#                          end-of-archive marker
#   producer-tar-dot       `umoci raw add-layer` of `tar -C DIR -c .`
#   producer-tar-abs       ... of GNU tar with absolute names (`-P`, "/etc/x")
#   producer-merged-usr    ... of `tar -c lib/newfile bin/newtool`: no parent
#                          entries, so both land below the base's symlinks
# On the Debian test image (merged /usr):
#   producer-buildah       buildah bud: apt-get install hello, writes through
#                          /lib and /bin
#   producer-podman        podman build, saved by `podman save` as a
#                          docker-archive (FIXTURES/producer-podman.docker-archive.tar)
#
# Writes FIXTURES/producers.txt (one image name a line), the OCI layouts
# under FIXTURES/oci/NAME and the oracles under FIXTURES/oracle/NAME.
set -Eeuo pipefail
REG=${1:?usage: producer_images.sh REGISTRY FIXTURES}
FIX=${2:?usage: producer_images.sh REGISTRY FIXTURES}
WORK=$FIX/producers-work
log() { echo "producer_images: $*"; }
die() { echo "producer_images: ERROR: $*" >&2; exit 1; }
trap 'echo "producer_images: FAILED at line $LINENO: $BASH_COMMAND" >&2' ERR

rm -rf "$WORK"
mkdir -p "$WORK" "$FIX/oci" "$FIX/oracle"
: > "$FIX/producers.txt.tmp"
SKOPEO=(skopeo --insecure-policy)

# oracle NAME: umoci's unpacking of FIX/oci/NAME:latest, as the oracle.
oracle() {
    local name=$1
    rm -rf "$FIX/oracle/$name" "$WORK/bundle-$name"
    umoci unpack --image "$FIX/oci/$name:latest" "$WORK/bundle-$name" > /dev/null
    mv "$WORK/bundle-$name/rootfs" "$FIX/oracle/$name"
    rm -rf "$WORK/bundle-$name"
}

# publish NAME: push FIX/oci/NAME:latest to the registry, make its oracle.
publish() {
    local name=$1
    "${SKOPEO[@]}" copy --quiet --dest-tls-verify=false \
        "oci:$FIX/oci/$name:latest" "docker://$REG/berth-test/$name:latest" \
        || die "pushing $name failed"
    oracle "$name"
    echo "$name" >> "$FIX/producers.txt.tmp"
    log "$name"
}

# --------------------------------------------------------------------------
# A small merged-/usr base, and the umoci-made images on it
# --------------------------------------------------------------------------
base=$WORK/base
install -d -m 0755 "$base" "$base/usr" "$base/usr/bin" "$base/usr/lib" "$base/etc"
cp /bin/busybox "$base/usr/bin/busybox"
ln -s busybox "$base/usr/bin/sh"
ln -s usr/bin "$base/bin"
ln -s usr/lib "$base/lib"
echo "from the base" > "$base/usr/lib/base.txt"
echo "old tool" > "$base/usr/bin/newtool"
tar --numeric-owner -C "$base" -cf "$WORK/base.tar" .

# new_image NAME: FIX/oci/NAME:latest holding the base layer.
new_image() {
    local name=$1
    rm -rf "$FIX/oci/$name"
    umoci init --layout "$FIX/oci/$name"
    umoci new --image "$FIX/oci/$name:latest"
    umoci config --image "$FIX/oci/$name:latest" \
        --config.env "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" \
        --config.cmd /bin/sh
    umoci raw add-layer --image "$FIX/oci/$name:latest" "$WORK/base.tar"
}

content=$WORK/content
install -d -m 0755 "$content" "$content/etc" "$content/opt" "$content/opt/app"
echo "inserted" > "$content/etc/inserted.txt"
printf 'x%.0s' $(seq 1 700) > "$content/opt/app/data"   # not a multiple of 512
ln -s /opt/app/data "$content/opt/app/abs-link"

new_image producer-umoci-insert
umoci insert --image "$FIX/oci/producer-umoci-insert:latest" "$content" /
publish producer-umoci-insert

new_image producer-tar-dot
tar --numeric-owner -C "$content" -cf "$WORK/dot.tar" .
umoci raw add-layer --image "$FIX/oci/producer-tar-dot:latest" "$WORK/dot.tar"
publish producer-tar-dot

new_image producer-tar-abs
tar --numeric-owner -C "$content" -cPf "$WORK/abs.tar" --transform 's,^\./,/,;s,^\.$,/,' .
# grep without -q reads the whole listing: with -q it may leave while tar
# still writes, and pipefail turns tar's SIGPIPE into a failure.
tar -tPf "$WORK/abs.tar" | grep -x /etc/inserted.txt > /dev/null || die "tar -P did not write absolute names"
umoci raw add-layer --image "$FIX/oci/producer-tar-abs:latest" "$WORK/abs.tar"
publish producer-tar-abs

upper=$WORK/upper
install -d -m 0755 "$upper" "$upper/lib" "$upper/bin"
echo "written through /lib" > "$upper/lib/newfile"
echo "new tool" > "$upper/bin/newtool"
new_image producer-merged-usr
tar --numeric-owner -C "$upper" -cf "$WORK/merged.tar" lib/newfile bin/newtool
[[ $(tar -tf "$WORK/merged.tar" | sort | tr '\n' ' ') == "bin/newtool lib/newfile " ]] \
    || die "the merged-/usr layer lists parents"
umoci raw add-layer --image "$FIX/oci/producer-merged-usr:latest" "$WORK/merged.tar"
publish producer-merged-usr
# umoci puts them below the symlinks, as podman does.
[[ -f $FIX/oracle/producer-merged-usr/usr/lib/newfile && -L $FIX/oracle/producer-merged-usr/lib ]] \
    || die "umoci did not write lib/newfile through the lib symlink"

# --------------------------------------------------------------------------
# buildah and podman, from Dockerfiles on the Debian test image
# --------------------------------------------------------------------------
ctx=$WORK/context
mkdir -p "$ctx"
cat > "$ctx/Dockerfile.buildah" <<EOF
FROM $REG/berth-test/debian-python:latest
RUN apt-get update && apt-get install -y --no-install-recommends hello \\
 && rm -rf /var/lib/apt/lists/* \\
 && echo "written through /lib" > /lib/through-lib \\
 && mkdir -p /lib/made-through-lib && echo deep > /lib/made-through-lib/file \\
 && ln -s /usr/bin/hello /bin/hello-link
CMD ["hello"]
EOF
cat > "$ctx/Dockerfile.podman" <<EOF
FROM $REG/berth-test/debian-python:latest
RUN echo "written through /lib" > /lib/podman-through-lib && mkdir -p /opt/podman \\
 && echo hi > /opt/podman/file && rm -f /etc/motd
CMD ["cat", "/lib/podman-through-lib"]
EOF
# Their own storage (vfs: nothing mounted), under WORK, removed afterwards.
STORE=(--root "$WORK/storage" --runroot "$WORK/runroot" --storage-driver vfs)
export REGISTRIES_CONFIG_PATH=$WORK/registries.conf
cat > "$REGISTRIES_CONFIG_PATH" <<EOF
unqualified-search-registries = []
[[registry]]
location = "$REG"
insecure = true
EOF

buildah "${STORE[@]}" bud --quiet --isolation chroot --network host \
    -f "$ctx/Dockerfile.buildah" -t localhost/producer-buildah "$ctx" > "$WORK/buildah.log" 2>&1 \
    || { tail -20 "$WORK/buildah.log" >&2; die "buildah bud failed"; }
rm -rf "$FIX/oci/producer-buildah"
buildah "${STORE[@]}" push --quiet localhost/producer-buildah \
    "oci:$FIX/oci/producer-buildah:latest" || die "buildah push failed"
publish producer-buildah
[[ -f $FIX/oracle/producer-buildah/usr/lib/through-lib && -x $FIX/oracle/producer-buildah/usr/bin/hello ]] \
    || die "the buildah image lacks /usr/lib/through-lib or hello"

podman "${STORE[@]}" --cgroup-manager cgroupfs --events-backend file build --quiet \
    --network host -f "$ctx/Dockerfile.podman" -t localhost/producer-podman "$ctx" \
    > "$WORK/podman.log" 2>&1 || { tail -20 "$WORK/podman.log" >&2; die "podman build failed"; }
archive=$FIX/producer-podman.docker-archive.tar
rm -f "$archive"
podman "${STORE[@]}" save --quiet --format docker-archive -o "$archive" localhost/producer-podman \
    || die "podman save failed"
rm -rf "$FIX/oci/producer-podman"
"${SKOPEO[@]}" copy --quiet "docker-archive:$archive" "oci:$FIX/oci/producer-podman:latest" \
    || die "copying the podman archive into an OCI layout failed"
oracle producer-podman
log "producer-podman (docker-archive)"

buildah "${STORE[@]}" rm --all > /dev/null 2>&1 || true
buildah "${STORE[@]}" rmi --all --force > /dev/null 2>&1 || true
rm -rf "$WORK"
# The oracles keep their modes (the tests read them as root); berth, as the
# test user, reads the layouts and the archive.
chmod -R a+rX "$FIX/oci" "$archive"
mv "$FIX/producers.txt.tmp" "$FIX/producers.txt"
