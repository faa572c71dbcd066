#!/bin/bash
# The "by hand" peer of berth pull, run as the unprivileged user by
# bench/pull.sh: registry -> OCI layout -> rootless bundle -> squashfs.
#
#   peer-pull.sh REF DIR COMPRESSOR BLOCK_SIZE
#
# Leaves DIR/oci (layout), DIR/bundle (umoci bundle), DIR/image.sqfs, and
# DIR/steps: "skopeo=S;umoci=S;mksquashfs=S" (seconds per step).
#
# mksquashfs: -all-root because umoci --rootless unpacks everything as the
# calling user, and a container image wants root-owned files; -noappend so
# a leftover file is never extended. It uses every CPU, as tar2sqfs in
# berth does.
set -euo pipefail

ref=$1 dir=$2 comp=$3 block=$4

t0=$EPOCHREALTIME
skopeo --insecure-policy copy --quiet --src-tls-verify=false \
    "docker://$ref" "oci:$dir/oci:bench"
t1=$EPOCHREALTIME
umoci unpack --rootless --image "$dir/oci:bench" "$dir/bundle" > /dev/null
t2=$EPOCHREALTIME
mksquashfs "$dir/bundle/rootfs" "$dir/image.sqfs" -comp "$comp" -b "$block" \
    -all-root -noappend -no-progress > /dev/null
t3=$EPOCHREALTIME

awk -v a="$t0" -v b="$t1" -v c="$t2" -v d="$t3" \
    'BEGIN { printf "skopeo=%.3f;umoci=%.3f;mksquashfs=%.3f\n", b - a, c - b, d - c }' \
    > "$dir/steps"
