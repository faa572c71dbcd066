#!/bin/bash
# Image files for the tests of SIF and squashfs files run in place and
# imported (berth run ./app.sif, berth import sif:FILE), made by the tools
# that make them in the wild: SIF files by the reference SIF library
# (Debian's golang-github-sylabs-sif-dev, through sif/mksif.go built here
# with golang-go), squashfs files by mksquashfs. Run by setup.sh:
#
#   sif_images.sh DIR
#
# DIR/app.sqfs       a busybox root with Apptainer's /.singularity.d: env
#                    scripts (01-base, 10-docker2singularity, 90-environment,
#                    99-base), a runscript, labels.json, the /singularity
#                    and /environment links
# DIR/app.sif        app.sqfs as the primary system partition, and an ext3
#                    overlay partition after it
# DIR/encrypted.sif  the same bytes as an encrypted squashfs partition
# DIR/ext3.sif       an ext3 primary partition
# DIR/overlay.sif    an overlay partition and no primary one
# DIR/enroot.sqsh    a busybox root as `enroot import` leaves it: /etc/rc
#                    running the entrypoint, /etc/environment, a WORKDIR
# DIR/mksif          the SIF writer
set -Eeuo pipefail
DIR=${1:?usage: sif_images.sh DIR}
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
log() { echo "sif_images: $*"; }
die() { echo "sif_images: ERROR: $*" >&2; exit 1; }

rm -rf "$DIR"
install -d -m 0755 "$DIR"
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

# The SIF writer, built offline in GOPATH mode from Debian's packaged
# library (it installs without a go.mod, as github.com/sylabs/sif).
install -d "$WORK/gopath/src/mksif"
cp "$HERE/sif/mksif.go" "$WORK/gopath/src/mksif/main.go"
(cd "$WORK/gopath/src/mksif" &&
    GOPATH="$WORK/gopath:/usr/share/gocode" GO111MODULE=off CGO_ENABLED=0 \
    GOCACHE="$WORK/gocache" go build -o "$DIR/mksif" .) || die "building mksif failed"

# A busybox root: the shell and the tools the tests call.
busybox_root() {
    local root=$1 t
    install -d "$root/bin" "$root/etc" "$root/tmp" "$root/dev" "$root/proc" "$root/sys" "$root/home"
    cp /bin/busybox "$root/bin/busybox"
    for t in sh cat echo env ls pwd true false sleep id; do
        ln -s busybox "$root/bin/$t"
    done
    echo "root:x:0:0:root:/root:/bin/sh" > "$root/etc/passwd"
    echo "root:x:0:" > "$root/etc/group"
}

# Apptainer's layout, as its builder writes it (env scripts sourced in
# name order; a Docker-built image's 10-docker2singularity.sh keeps a
# value set from outside, ${VAR:-default}).
R=$WORK/app
busybox_root "$R"
install -d "$R/.singularity.d/env" "$R/.singularity.d/actions" "$R/.singularity.d/libs"
printf '#!/bin/sh\n# base\n' > "$R/.singularity.d/env/01-base.sh"
cat > "$R/.singularity.d/env/10-docker2singularity.sh" <<'SH'
#!/bin/sh
export PATH="/opt/app/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
export FROM_DOCKER="${FROM_DOCKER:-docker-default}"
SH
cat > "$R/.singularity.d/env/90-environment.sh" <<'SH'
#!/bin/sh
# Custom environment shell code should follow
export GREETING="hello from the sif"
export ORDER="${ORDER:+$ORDER,}90"
SH
cat > "$R/.singularity.d/env/99-base.sh" <<'SH'
#!/bin/sh
export ORDER="${ORDER:+$ORDER,}99"
export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}/.singularity.d/libs"
SH
cat > "$R/.singularity.d/runscript" <<'SH'
#!/bin/sh
echo "runscript: $*"
echo "GREETING=$GREETING ORDER=$ORDER"
SH
chmod 0755 "$R"/.singularity.d/env/*.sh "$R/.singularity.d/runscript"
printf '{\n\t"org.label-schema.schema-version": "1.0",\n\t"maintainer": "berth tests"\n}\n' \
    > "$R/.singularity.d/labels.json"
ln -s .singularity.d/runscript "$R/singularity"
ln -s .singularity.d/env/90-environment.sh "$R/environment"
install -d "$R/opt/app/bin"
printf '#!/bin/sh\necho app-tool\n' > "$R/opt/app/bin/app-tool"
chmod 0755 "$R/opt/app/bin/app-tool"
echo "made by sif_images.sh" > "$R/etc/sif-marker"
mksquashfs "$R" "$DIR/app.sqfs" -comp gzip -noappend -all-root -quiet > /dev/null

# An overlay partition's content (its bytes only: berth never opens it).
head -c 65536 /dev/zero > "$WORK/overlay.img"
"$DIR/mksif" -overlay "$WORK/overlay.img" "$DIR/app.sif" "$DIR/app.sqfs"
"$DIR/mksif" -primary-fs encrypted "$DIR/encrypted.sif" "$DIR/app.sqfs"
"$DIR/mksif" -primary-fs ext3 "$DIR/ext3.sif" "$WORK/overlay.img"
"$DIR/mksif" -primary-fs none -overlay "$WORK/overlay.img" "$DIR/overlay.sif" -

# enroot's layout: what `enroot import docker://` writes into the root
# (/etc/rc runs ENTRYPOINT and CMD from WORKDIR; /etc/environment holds
# the Docker Env).
E=$WORK/enroot
busybox_root "$E"
install -d "$E/workspace" "$E/usr/local/bin"
cat > "$E/usr/local/bin/entry" <<'SH'
#!/bin/sh
echo "entrypoint in $(pwd): $*"
echo "IMAGE_VAR=$IMAGE_VAR"
SH
chmod 0755 "$E/usr/local/bin/entry"
printf 'PATH=/usr/local/bin:/usr/bin:/bin\nIMAGE_VAR=from-etc-environment\n' > "$E/etc/environment"
cat > "$E/etc/rc" <<'SH'
# maintainer berth tests

mkdir -p "/workspace" 2> /dev/null
cd "/workspace" && unset OLDPWD || exit 1

if [ -s /etc/rc.local ]; then
    . /etc/rc.local
fi

if [ $# -gt 0 ]; then
    exec '/usr/local/bin/entry' "$@"
else
    exec '/usr/local/bin/entry' 'default-cmd'
fi
SH
printf '# This file is sourced by /etc/rc when the container starts.\n# It can be used to manipulate the entrypoint or command of the container.\n' > "$E/etc/rc.local"
mksquashfs "$E" "$DIR/enroot.sqsh" -comp zstd -noappend -all-root -quiet > /dev/null

chmod 0644 "$DIR"/*.sif "$DIR"/*.sqfs "$DIR"/*.sqsh
log "made: $(cd "$DIR" && echo *)"
