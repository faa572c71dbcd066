# Host provisioning shared by tests/setup/setup.sh and the benchmarks
# (bench/lib/common.sh): packages, and the unprivileged users with their
# subordinate ids. Sourced; the functions run as root.
#
# The sourcing script defines, before calling anything here:
#   log MSG...       prints a progress line
#   die MSG...       prints an error and exits
# and may set:
#   APT_OUTPUT_FD    where apt-get's output goes (default 1; the benchmarks
#                    use 2, their stdout is the report)
#
# Globals set here:
#   SUBID_RANGE      the subordinate uid and gid range test_user gives a
#                    user, START:COUNT
# shellcheck shell=bash

SUBID_RANGE=200000:65536

# install_packages PKG...: installs those of PKG that are missing, without
# recommends.
install_packages() {
    local missing=() p policy_rc='' rc=0
    for p in "$@"; do
        [[ $(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null) == installed ]] \
            || missing+=("$p")
    done
    ((${#missing[@]})) || return 0
    log "installing: ${missing[*]}"
    # Keep apt from starting the packaged docker-registry service (it would
    # take port 5000); policy-rc.d is the Debian way to say so.
    if [[ ! -e /usr/sbin/policy-rc.d ]]; then
        policy_rc=/usr/sbin/policy-rc.d
        printf '#!/bin/sh\nexit 101\n' > "$policy_rc"
        chmod 0755 "$policy_rc"
    fi
    { DEBIAN_FRONTEND=noninteractive apt-get update -q &&
      DEBIAN_FRONTEND=noninteractive apt-get install -y -q \
          --no-install-recommends "${missing[@]}"; } >&"${APT_OUTPUT_FD:-1}" || rc=$?
    if [[ -n $policy_rc ]]; then rm -f "$policy_rc"; fi
    ((rc == 0)) || die "apt-get install ${missing[*]} failed"
}

# add_user NAME: creates the user NAME (home directory, a group of its own,
# bash) unless it exists.
add_user() {
    id -u "$1" >/dev/null 2>&1 && return 0
    log "creating user $1"
    useradd --create-home --user-group --shell /bin/bash "$1"
}

# test_user NAME: the unprivileged user that runs the tests or the
# benchmarks: created when missing (add_user), with a home directory, and
# with the subordinate uid and gid range SUBID_RANGE unless it has one.
test_user() {
    local name=$1 f home
    if ! id -u "$name" >/dev/null 2>&1; then
        add_user "$name"
        # useradd may allocate subordinate ids itself; we want our fixed range.
        for f in /etc/subuid /etc/subgid; do
            if [[ -e $f ]]; then sed -i "/^$name:/d" "$f"; fi
        done
    fi
    home=$(getent passwd "$name" | cut -d: -f6)
    if [[ ! -d $home ]]; then
        install -d -m 0755 -o "$name" -g "$(id -g "$name")" "$home"
    fi
    for f in /etc/subuid /etc/subgid; do
        touch "$f"
        grep -q "^$name:" "$f" || echo "$name:$SUBID_RANGE" >> "$f"
    done
}
