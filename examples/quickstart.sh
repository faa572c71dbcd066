#!/bin/bash
# From a fresh Debian 12 clone to berth and a stored example image:
#
#   sudo bash examples/quickstart.sh     (root installs packages; then as you: bash examples/quickstart.sh)
#
# Installs what is missing (as root), builds berth, builds the bundled
# example image (examples/hello) as an OCI layout, imports it into a store,
# shows what berth stored and runs it. No network beyond Debian's package
# mirrors.
set -Eeuo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

PACKAGES=(squashfs-tools-ng squashfs-tools squashfuse fuse3 umoci busybox-static file)
missing=()
for p in "${PACKAGES[@]}"; do
    dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null | grep -q '^installed$' || missing+=("$p")
done
if ((${#missing[@]})); then
    if [[ $(id -u) == 0 ]]; then
        apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}"
    else
        echo "quickstart: missing packages: ${missing[*]}; run: sudo apt-get install ${missing[*]}" >&2
        exit 1
    fi
fi

cargo build --release -p berth
BERTH=$PWD/target/release/berth
WORK=${BERTH_QUICKSTART_DIR:-${TMPDIR:-/tmp}/berth-quickstart-$(id -u)}
mkdir -p "$WORK"
export BERTH_STORE=$WORK/store

bash examples/hello/build.sh "$WORK/hello-oci"
"$BERTH" import oci:"$WORK/hello-oci":latest hello
"$BERTH" images
"$BERTH" inspect hello
echo
echo "The image is one squashfs file; its contents:"
rdsquashfs -l / "$("$BERTH" inspect hello | sed -n 's/.*"path": "\(.*\.sqfs\)".*/\1/p')" | head -20
echo
echo "Running it:"
"$BERTH" run hello
# shellcheck disable=SC2016   # $GREETING is the container's, expanded by its shell
"$BERTH" run hello /bin/sh -c 'echo "args work too: $GREETING"'
