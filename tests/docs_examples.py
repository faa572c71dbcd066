#!/usr/bin/env python3
"""Writes the documentation's tested examples out as scripts.

    docs_examples.py OUT_DIR FILE.md...

Every fenced block whose info string is ``sh tested`` becomes
OUT_DIR/NNN.sh; OUT_DIR/list holds one line per block, tab-separated:
NNN, the page (as given), the line of the opening fence. Blocks of one
page keep their order (tests/docs.sh runs them so, in one directory).

A ``toml tested`` block whose first line names a site module file,
``# /etc/berth/modules.d/NAME.toml``, is written to
OUT_DIR/modules.d/NAME.toml: the site modules the examples run with.
"""
import os
import re
import sys

MODULE = re.compile(r"# /etc/berth/modules\.d/([A-Za-z0-9_.-]+\.toml)$")


def blocks(path, lang="sh"):
    """Yields (line, text) for each tested block of the page at path."""
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    i = 0
    while i < len(lines):
        fence = lines[i].strip()
        if fence.startswith("```") and fence[3:].split() == [lang, "tested"]:
            start = i + 1
            i += 1
            body = []
            while i < len(lines) and lines[i].strip() != "```":
                body.append(lines[i])
                i += 1
            if i == len(lines):
                sys.exit(f"{path}:{start}: a tested block is not closed")
            yield start, "\n".join(body) + "\n"
        i += 1


def main():
    out, pages = sys.argv[1], sys.argv[2:]
    os.makedirs(out, exist_ok=True)
    n = 0
    with open(os.path.join(out, "list"), "w", encoding="utf-8") as index:
        for page in pages:
            for line, text in blocks(page):
                n += 1
                name = f"{n:03d}"
                with open(os.path.join(out, name + ".sh"), "w",
                          encoding="utf-8") as f:
                    f.write(text)
                index.write(f"{name}\t{page}\t{line}\n")
            for line, text in blocks(page, "toml"):
                match = MODULE.match(text.split("\n", 1)[0])
                if not match:
                    sys.exit(f"{page}:{line}: a tested toml block must start "
                             "with # /etc/berth/modules.d/NAME.toml")
                os.makedirs(os.path.join(out, "modules.d"), exist_ok=True)
                with open(os.path.join(out, "modules.d", match.group(1)), "w",
                          encoding="utf-8") as f:
                    f.write(text)
    print(n)


if __name__ == "__main__":
    main()
