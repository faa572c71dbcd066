# Charliecloud's image forms for the benchmarks, sourced by start.sh and
# ranks.sh once they define prep_bundle (which unpacks the rootless bundle
# at $BUNDLE); $SW is their work directory, as_user comes from common.sh.
#
# What ch-convert (charliecloud-builders, which pulls in docker.io and
# buildah) does for dir -> dir and dir -> squash: the mount points ch-run
# may need, and mksquashfs -b 65536 -noappend -all-root (gzip).
# shellcheck shell=bash disable=SC2317   # called through the callers' tool tables
CH_MOUNT_DIRS=(bin dev etc mnt proc usr mnt/0 mnt/1 mnt/2 mnt/3 mnt/4 mnt/5 mnt/6 mnt/7 mnt/8 mnt/9)
CH_MOUNT_FILES=(etc/hosts etc/resolv.conf)
prep_ch_dir() {
    local d
    [[ -e $SW/ch-dir.done ]] && return 0
    prep_bundle || return 1
    rm -rf "$SW/ch-dir"
    as_user cp -a "$BUNDLE/rootfs" "$SW/ch-dir" || return 1
    for d in "${CH_MOUNT_DIRS[@]}"; do
        [[ -e $SW/ch-dir/$d || -L $SW/ch-dir/$d ]] || as_user mkdir "$SW/ch-dir/$d" || return 1
    done
    for d in "${CH_MOUNT_FILES[@]}"; do
        [[ -e $SW/ch-dir/$d || -L $SW/ch-dir/$d ]] || as_user touch "$SW/ch-dir/$d" || return 1
    done
    touch "$SW/ch-dir.done"
}
prep_ch_sqfs() {
    local d pf=$SW/ch-pseudo
    [[ -e $SW/ch.sqfs.done ]] && return 0
    prep_bundle || return 1
    : > "$pf"
    for d in "${CH_MOUNT_DIRS[@]}"; do
        [[ -e $BUNDLE/rootfs/$d || -L $BUNDLE/rootfs/$d ]] || echo "$d d 755 root root" >> "$pf"
    done
    for d in "${CH_MOUNT_FILES[@]}"; do
        [[ -e $BUNDLE/rootfs/$d || -L $BUNDLE/rootfs/$d ]] || echo "$d f 644 root root true" >> "$pf"
    done
    as_user mksquashfs "$BUNDLE/rootfs" "$SW/ch.sqfs" -b 65536 -noappend -all-root \
        -pf "$pf" -no-progress -quiet || return 1
    touch "$SW/ch.sqfs.done"
}
