#!/usr/bin/env python3
"""Import cycles between the modules of each crate under crates/.

A module is a file or folder directly under a crate's src/ (with
main.rs and lib.rs the crate root, left out). Module A depends on B when
a file of A names `crate::B` or `super::B` where `super` is the crate
root; `#[cfg(test)]` code counts too, as tests are code. Exits 1 and
prints each cycle when there is one.
"""

import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
USE = re.compile(r"\bcrate::([a-z_][a-z0-9_]*)")


def top_module(src: pathlib.Path, f: pathlib.Path) -> str:
    rel = f.relative_to(src)
    return rel.parts[0].removesuffix(".rs")


def graph(src: pathlib.Path) -> dict:
    edges: dict = {}
    for f in sorted(src.rglob("*.rs")):
        mod = top_module(src, f)
        if mod in ("lib", "main"):
            continue
        deps = edges.setdefault(mod, set())
        for m in USE.findall(f.read_text()):
            is_module = (src / f"{m}.rs").exists() or (src / m).is_dir()
            if m != mod and is_module:
                deps.add(m)
    return edges


def cycles(edges: dict) -> list:
    """Strongly connected components with more than one module."""
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def main() -> int:
    bad = 0
    for src in sorted(ROOT.glob("crates/*/src")):
        for comp in cycles(graph(src)):
            print(f"{src.parent.name}: import cycle between modules {' <-> '.join(comp)}")
            bad = 1
    if not bad:
        print("module cycles: none")
    return bad


if __name__ == "__main__":
    sys.exit(main())
