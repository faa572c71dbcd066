#!/bin/bash
# Lint the shell and Python code that is not Rust (tests/run.sh runs this;
# it needs no root):
#
#   bash tests/lint.sh
#
# Runs shellcheck (every severity, following `source`) over the shell
# scripts of bench/, tests/, examples/ and .ci/: the tracked *.sh files, and
# tracked files without an extension whose first line is a #! of sh or
# bash; flake8 over every tracked *.py file (settings in .flake8); and two
# checks of the Rust code's structure (module cycles, file sizes).
# Exits non-zero on any finding. A finding that is not a bug is disabled on
# its own line, with a comment that says why. tests/setup/setup.sh installs
# both tools (Debian's shellcheck and flake8 packages).
set -Eeuo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

for t in shellcheck flake8; do
    command -v "$t" > /dev/null \
        || { echo "lint.sh: $t not found (apt-get install shellcheck flake8)" >&2; exit 1; }
done

# tracked PATHSPEC...: the tracked files, one a line. As root in a checkout
# of another user, git wants the directory named safe.directory, in global
# or system configuration (GIT_CONFIG_GLOBAL: a file of our own, so that
# nothing is written to root's).
git_conf=$(mktemp)
trap 'rm -f "$git_conf"' EXIT
printf '[safe]\n\tdirectory = %s\n' "$PWD" > "$git_conf"
tracked() { GIT_CONFIG_GLOBAL=$git_conf git ls-files -- "$@"; }

shell_re='^#!(/usr)?/bin/(env +)?(ba)?sh([[:space:]]|$)'
shell_scripts=()
files=$(tracked bench tests examples .ci)
while IFS= read -r f; do
    if [[ $f == *.sh ]]; then
        shell_scripts+=("$f")
    elif [[ ${f##*/} != *.* && -f $f && $(head -n 1 -- "$f") =~ $shell_re ]]; then
        shell_scripts+=("$f")
    fi
done <<< "$files"
python_files=()
files=$(tracked '*.py')
while IFS= read -r f; do
    if [[ -n $f ]]; then python_files+=("$f"); fi
done <<< "$files"

status=0
echo "shellcheck: ${#shell_scripts[@]} scripts"
shellcheck --external-sources "${shell_scripts[@]}" || status=1
echo "flake8: ${#python_files[@]} files"
flake8 "${python_files[@]}" || status=1
# The structure the code keeps (issue 15): no import cycle between the
# modules of a crate, no Rust file over 600 lines.
echo "module cycles: tests/module_cycles.py"
python3 tests/module_cycles.py || status=1
long=0
while read -r n f; do
    if [[ $f != total && $n -gt 600 ]]; then
        echo "$f: $n lines (more than 600: split it by job)"
        long=1
    fi
done < <(tracked 'crates/*.rs' | xargs wc -l)
if ((long)); then status=1; else echo "file sizes: every Rust file under crates/ has 600 lines or fewer"; fi
if ((status == 0)); then echo "lint: clean"; fi
exit "$status"
