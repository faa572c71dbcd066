#!/bin/bash
# Stages the files of berth's packages (the .deb and the .rpm share them):
#
#   packaging/stage.sh BIN_DIR STAGE_DIR
#       BIN_DIR    holds berth and libberth_spank.so
#       STAGE_DIR  an empty directory: the package's root
#
#   /usr/bin/berth                       (debug info stripped)
#   /usr/lib/berth/libberth_spank.so     the SPANK plugin (not enabled:
#                                        /usr/share/doc/berth/examples/plugstack.conf)
#   /usr/share/man/man1/berth*.1.gz      from `berth man`
#   bash, zsh and fish completions       from `berth completion`
#   /etc/berth/berth.toml                the commented site config (a conffile)
#   /etc/berth/modules.d/                empty: the site's modules
#   /usr/share/berth/ssh/                the ssh module's scripts and hook
#                                        (examples/modules/ssh/)
#   /usr/share/doc/berth/                README, the documentation (docs/, as
#                                        Markdown), examples/modules/*.toml
set -Eeuo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BIN=${1:?usage: stage.sh BIN_DIR STAGE_DIR}
STAGE=${2:?usage: stage.sh BIN_DIR STAGE_DIR}
for f in "$BIN/berth" "$BIN/libberth_spank.so"; do
    [[ -x $f ]] || { echo "stage.sh: no $f (cargo build --release -p berth -p berth-slurm)" >&2; exit 1; }
done
umask 022
DOC=$STAGE/usr/share/doc/berth
install -d "$STAGE/usr/bin" "$STAGE/usr/lib/berth" \
    "$STAGE/usr/share/man/man1" "$STAGE/usr/share/bash-completion/completions" \
    "$STAGE/usr/share/zsh/vendor-completions" "$STAGE/usr/share/fish/vendor_completions.d" \
    "$STAGE/etc/berth/modules.d" "$DOC/examples/modules" "$STAGE/usr/share/berth/ssh"
objcopy --strip-debug "$BIN/berth" "$STAGE/usr/bin/berth"
objcopy --strip-debug "$BIN/libberth_spank.so" "$STAGE/usr/lib/berth/libberth_spank.so"
chmod 0755 "$STAGE/usr/bin/berth" "$STAGE/usr/lib/berth/libberth_spank.so"
"$BIN/berth" man --dir "$STAGE/usr/share/man/man1" 2> /dev/null
gzip -9n "$STAGE"/usr/share/man/man1/*.1
"$BIN/berth" completion bash > "$STAGE/usr/share/bash-completion/completions/berth"
"$BIN/berth" completion zsh > "$STAGE/usr/share/zsh/vendor-completions/_berth"
"$BIN/berth" completion fish > "$STAGE/usr/share/fish/vendor_completions.d/berth.fish"
install -m 0644 "$ROOT/packaging/berth.toml" "$STAGE/etc/berth/berth.toml"
install -m 0644 "$ROOT/README.md" "$DOC/"
# The documentation's Markdown and charts, as the book's source reads
# (docs/SUMMARY.md is its table of contents).
(cd "$ROOT/docs" && find . \( -name '*.md' -o -name '*.svg' \) -print0 \
    | xargs -0 -I{} install -D -m 0644 {} "$DOC/docs/{}")
install -m 0644 "$ROOT"/examples/modules/*.toml "$DOC/examples/modules/"
install -m 0755 "$ROOT"/examples/modules/ssh/{start,ssh,session,dropbear} "$STAGE/usr/share/berth/ssh/"
install -m 0644 "$ROOT/examples/modules/ssh/hook.json" "$STAGE/usr/share/berth/ssh/"
cat > "$DOC/examples/plugstack.conf" <<CONF
# Slurm's plugstack.conf line for berth's SPANK plugin (srun --container-image=...):
required /usr/lib/berth/libberth_spank.so berth=/usr/bin/berth
CONF
cat > "$DOC/copyright" <<CONF
Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/
Upstream-Name: berth
Files: *
License: Apache-2.0
 On Debian systems the full text is in /usr/share/common-licenses/Apache-2.0.
CONF
