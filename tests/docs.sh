#!/bin/bash
# The documentation, checked (issue 21): run as root by tests/run.sh after
# the end-to-end tests, with the fixtures of tests/setup/setup.sh up.
#
#   tests/docs.sh [BIN_DIR]      (default target/debug)
#
#  1. the book (docs/book.toml) builds with mdBook into target/book, and a
#     warning fails it; mdbook is installed with cargo when missing
#  2. every example marked ```sh tested in docs/ and README.md runs as the
#     unprivileged test user, with a copy of BIN_DIR's berth on PATH, a store of
#     its own, and the test Slurm cluster. The loopback registry stands in
#     for Docker Hub: a registries.conf alias makes "debian" its
#     berth-test/debian (tests/setup/debian_image.sh: Debian 12 with Docker
#     Hub's config) and "mpi-app" its berth-test/mpich (MPICH and
#     mpi-probe). The site's modules are the blocks marked ```toml tested
#     that start with # /etc/berth/modules.d/NAME.toml, in a site
#     configuration of the check's own (BERTH_SYSTEM_CONFIG). A page's
#     blocks run in order in one directory, each with bash -Eeuo
#     pipefail; any failing command fails the check.
#
# Exit status: 0 all good, 1 a failure, 3 skipped (no fixtures: fails
# under CI=true, as a missing fixture must).
set -Eeuo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BIN=$(cd "${1:-$ROOT/target/debug}" && pwd)
BERTH_IT_DIR=${BERTH_IT_DIR:-/tmp/berth-it}
MDBOOK_VERSION=0.5.4
log() { echo "docs.sh: $*"; }
[[ $(id -u) == 0 ]] || { echo "docs.sh: run as root (it runs the examples as the test user)" >&2; exit 1; }
if [[ ! -e $BERTH_IT_DIR/env ]]; then
    log "SKIPPED: no fixtures ($BERTH_IT_DIR/env; run tests/setup/setup.sh)"
    [[ ${CI:-} == true ]] && exit 1
    exit 3
fi
# shellcheck disable=SC1090   # written by tests/setup/setup.sh
source <(sed 's/^/export /' "$BERTH_IT_DIR/env")
status=0

# 1. The book.
export PATH=$PATH:${CARGO_HOME:-$HOME/.cargo}/bin
if [[ $(mdbook --version 2>/dev/null) != "mdbook v$MDBOOK_VERSION" ]]; then
    log "installing mdbook $MDBOOK_VERSION (cargo install)"
    cargo install --quiet --locked --no-default-features mdbook --version "$MDBOOK_VERSION"
fi
book_log=$(mktemp)
if mdbook build "$ROOT/docs" > "$book_log" 2>&1 && ! grep -Eq 'WARN|ERROR' "$book_log"; then
    log "book: built into target/book ($(find "$ROOT/target/book" -name '*.html' | wc -l) pages), no warnings"
else
    cat "$book_log"
    log "book: FAILED (an error or a warning above)"
    status=1
fi
rm -f "$book_log"

# 2. The tested examples.
WORK=$(mktemp -d "$BERTH_IT_DIR/docs.XXXX")
chmod 0755 "$WORK"
trap 'rm -rf "$WORK"' EXIT
mapfile -t pages < <(cd "$ROOT" && { echo README.md; find docs -name '*.md' | sort; })
n=$(cd "$ROOT" && python3 tests/docs_examples.py "$WORK/blocks" "${pages[@]}")
TUID=$(id -u "$BERTH_IT_USER")
TGID=$(id -g "$BERTH_IT_USER")
THOME=$(getent passwd "$BERTH_IT_USER" | cut -d: -f6)
install -d -o "$TUID" -g "$TGID" "$WORK/store" "$WORK/config" "$WORK/pages"
# berth where the test user can reach it (the checkout may be in a
# directory of root's only, as CI's is).
install -D -m 0755 "$BIN/berth" "$WORK/bin/berth"
cat > "$WORK/registries.conf" <<CONF
[aliases]
"debian" = "$BERTH_IT_REG_ANON/berth-test/debian"
"mpi-app" = "$BERTH_IT_REG_ANON/berth-test/mpich"

[[registry]]
location = "$BERTH_IT_REG_ANON"
insecure = true
CONF
install -d "$WORK/blocks/modules.d"
printf '[host]\nmodules_dir = "%s"\n' "$WORK/blocks/modules.d" > "$WORK/site.toml"
chmod 0644 "$WORK/registries.conf" "$WORK/site.toml"
chmod -R a+rX "$WORK/blocks"
passed=0
failed=0
while IFS=$'\t' read -r id page line; do
    dir=$WORK/pages/${page//\//_}
    [[ -d $dir ]] || install -d -o "$TUID" -g "$TGID" "$dir"
    out=$WORK/$id.out
    if (cd "$dir" && setpriv --reuid="$TUID" --regid="$TGID" --init-groups \
        env -i HOME="$THOME" USER="$BERTH_IT_USER" LOGNAME="$BERTH_IT_USER" LANG=C.UTF-8 \
        PATH="$WORK/bin:/usr/local/bin:/usr/bin:/bin" SLURM_CONF="$BERTH_IT_SLURM_CONF" \
        BERTH_STORE="$WORK/store" XDG_CONFIG_HOME="$WORK/config" \
        CONTAINERS_REGISTRIES_CONF="$WORK/registries.conf" BERTH_SYSTEM_CONFIG="$WORK/site.toml" \
        bash -Eeuo pipefail "$WORK/blocks/$id.sh") > "$out" 2>&1 < /dev/null; then
        passed=$((passed + 1))
    else
        failed=$((failed + 1))
        log "example FAILED: $page:$line"
        sed 's/^/    /' "$WORK/blocks/$id.sh"
        echo "  its output:"
        tail -n 30 "$out" | sed 's/^/    /'
    fi
done < "$WORK/blocks/list"
log "examples: $passed of $n passed"
((failed == 0)) || status=1
exit "$status"
