# debian_mirror: prints the first URI of the host's apt sources that serves
# bookworm itself (deb822 .sources first, then one-line sources.list).
# Sourced by tests/setup/debian_image.sh and bench/lib/common.sh.
# shellcheck shell=bash
debian_mirror() {
    local f uri
    for f in /etc/apt/sources.list.d/*.sources; do
        [[ -e $f ]] || continue
        uri=$(awk '
            /^[[:space:]]*$/ { if (ok && uri != "") exit; ok = 0; uri = ""; next }
            tolower($1) == "uris:"   { uri = $2 }
            tolower($1) == "suites:" { for (i = 2; i <= NF; i++) if ($i == "bookworm") ok = 1 }
            END { if (ok && uri != "") print uri }' "$f")
        if [[ -n $uri ]]; then echo "$uri"; return 0; fi
    done
    cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null | awk '
        $1 == "deb" && / bookworm / && !found {
            for (i = 2; i <= NF; i++) if ($i ~ /^[a-z]+:\/\//) { print $i; found = 1; break } }'
}
