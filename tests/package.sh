#!/bin/bash
# berth's Debian package, built, installed and used as a site would
# (issue 21): run as root by tests/run.sh after the cargo build, with the
# fixtures of tests/setup/setup.sh up.
#
#   tests/package.sh [BIN_DIR]      (default target/debug)
#
#  1. packaging/deb/build.sh makes the .deb from BIN_DIR; apt-get installs
#     it (and its dependencies) like any package
#  2. as the unprivileged test user, with only the installed files:
#     berth doctor, a pull and a run, the manual page, the completions
#  3. the test Slurm cluster restarted with the plugin from its installed
#     path (/usr/lib/berth, berth=/usr/bin/berth): srun --container-image
#  4. the .rpm built from the same files (packaging/rpm/build.sh) and
#     compared with the .deb; its berth runs
#  5. the package purged (its conffile with it), the cluster given back
#     berth's plugin from BIN_DIR
set -Eeuo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BIN=${1:-$ROOT/target/debug}
BERTH_IT_DIR=${BERTH_IT_DIR:-/tmp/berth-it}
# shellcheck disable=SC1090   # written by tests/setup/setup.sh
source <(sed 's/^/export /' "$BERTH_IT_DIR/env")
TUID=$(id -u "$BERTH_IT_USER")
TGID=$(id -g "$BERTH_IT_USER")
trap 'echo "package.sh: FAILED at line $LINENO: $BASH_COMMAND" >&2' ERR
log() { echo "package.sh: $*"; }
[[ $(id -u) == 0 ]] || { echo "package.sh: run as root" >&2; exit 1; }
dpkg -s berth > /dev/null 2>&1 && { echo "package.sh: a berth package is installed already; not touching it" >&2; exit 1; }

DEB=$(bash "$ROOT/packaging/deb/build.sh" --fast "$BIN" "$BERTH_IT_DIR/deb")
log "built $DEB ($(du -h "$DEB" | cut -f1))"
restore() {
    apt-get purge -y -q berth > /dev/null 2>&1 || true
    bash "$ROOT/tests/setup/slurm_plugin.sh" "$BIN" > /dev/null 2>&1 || true
}
trap restore EXIT
DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "$DEB" > /dev/null
dpkg -s berth | grep -q '^Status: install ok installed'
log "installed: $(dpkg -s berth | sed -n 's/^Version: //p')"

# The test user, with a home of its own and nothing from the checkout.
H=$(mktemp -d "$BERTH_IT_DIR/package-home.XXXX")
chmod 0755 "$H"
install -d -o "$TUID" -g "$TGID" "$H/home" "$H/home/.config" "$H/home/.config/berth"
printf 'insecure_registries = ["%s"]\n' "$BERTH_IT_REG_ANON" > "$H/home/.config/berth/berth.toml"
chown "$TUID:$TGID" "$H/home/.config/berth/berth.toml"
as_user() {
    (cd "$H/home" && setpriv --reuid="$TUID" --regid="$TGID" --init-groups \
        env -i HOME="$H/home" USER="$BERTH_IT_USER" PATH=/usr/bin:/bin LANG=C.UTF-8 \
        SLURM_CONF="$BERTH_IT_SLURM_CONF" "$@")
}
[[ $(as_user sh -c 'command -v berth') == /usr/bin/berth ]]
as_user berth --version
as_user berth doctor > "$H/doctor.txt" || { cat "$H/doctor.txt"; exit 1; }
log "berth doctor: $(grep -c '^ *ok' "$H/doctor.txt" || true) ok, $(grep -ci 'warn' "$H/doctor.txt" || true) warnings"
grep -q '/etc/berth/berth.toml' "$H/doctor.txt"
IMAGE=$BERTH_IT_REG_ANON/berth-test/docker-v2s2:latest
as_user berth pull -q "$IMAGE" > /dev/null
# shellcheck disable=SC2016   # expanded in the container
[[ $(as_user berth run "$IMAGE" sh -c 'echo $FOO $(id -u)') == "bar $TUID" ]]
log "pull and run as the test user: ok"
MANWIDTH=200 man -l /usr/share/man/man1/berth-pull.1.gz 2> /dev/null | grep -q -- '--no-layer-cache'
bash -c 'source /usr/share/bash-completion/completions/berth && complete -p berth' > /dev/null
log "manual pages and completions: ok"

# The shipped ssh module, from the package's paths, as an admin enables it.
install -m 0644 /usr/share/doc/berth/examples/modules/ssh.toml /etc/berth/modules.d/ssh.toml
# shellcheck disable=SC2016   # expanded in the container
got=$(as_user berth run --module ssh -e BERTH_SSH_PORT=15299 "$IMAGE" \
    sh -c 'ssh localhost "test -x /.berth/ssh/start && echo \$FOO"' 2> "$H/ssh.err") \
    || { cat "$H/ssh.err"; rm -f /etc/berth/modules.d/ssh.toml; exit 1; }
rm -f /etc/berth/modules.d/ssh.toml
[[ $got == bar ]] || { echo "package.sh: ssh module: got '$got'" >&2; cat "$H/ssh.err"; exit 1; }
log "the ssh module from the package: ok"

# Slurm with the plugin where the package put it.
bash "$ROOT/tests/setup/slurm_cluster.sh" down "$BERTH_IT_DIR/slurm" > /dev/null 2>&1 || true
BERTH_SPANK_PLUGIN=/usr/lib/berth/libberth_spank.so BERTH_SPANK_BERTH=/usr/bin/berth BERTH_SPANK_IN_PLACE=1 \
    bash "$ROOT/tests/setup/slurm_cluster.sh" up "$BERTH_IT_DIR/slurm" 3 > /dev/null
grep -q '^required /usr/lib/berth/libberth_spank.so berth=/usr/bin/berth' "$BERTH_IT_DIR/slurm/plugstack.conf"
# shellcheck disable=SC2016   # expanded in the container
out=$(as_user timeout 120 srun -N1 -n2 --container-image="$IMAGE" sh -c 'echo in-container $SLURM_PROCID')
[[ $(sort <<< "$out") == $'in-container 0\nin-container 1' ]] || { echo "srun said: $out" >&2; exit 1; }
log "srun --container-image with the installed plugin: ok"

# The .rpm: the same files as the .deb (packaging/stage.sh makes both),
# the config a conffile, the dependencies named, and its berth runs.
RPM=$(bash "$ROOT/packaging/rpm/build.sh" "$BIN" "$BERTH_IT_DIR/rpm")
log "built $RPM ($(du -h "$RPM" | cut -f1))"
diff <(rpm -qp --qf '[%{FILEMODES:perms} %{FILENAMES}\n]' "$RPM" | awk '$1 ~ /^-/ { print $2 }' | sort) \
    <(dpkg-deb -c "$DEB" | awk '$1 ~ /^-/ { print substr($6, 2) }' | sort)
[[ $(rpm -qp --configfiles "$RPM") == /etc/berth/berth.toml ]]
for dep in squashfs-tools-ng fuse3 shadow-utils; do
    rpm -qp --requires "$RPM" | grep -qx "$dep"
done
mkdir "$H/rpm"
rpm2archive - < "$RPM" | tar -xz -C "$H/rpm"
[[ $("$H/rpm/usr/bin/berth" --version) == "berth $(dpkg -s berth | sed -n 's/^Version: //p')" ]]
log "rpm: same files as the .deb, conffile, dependencies, its berth runs: ok"
rm -rf "$H"
log "ok"
