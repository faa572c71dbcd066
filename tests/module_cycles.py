#!/usr/bin/env python3
"""Import cycles between the modules of each crate under crates/.

A module is a file under a crate's src/ (`a.rs` and `a/mod.rs` are
`a`, `a/b.rs` is `a/b`; main.rs and lib.rs, the crate root, are left
out). Module A depends on B when a file of A names `crate::B...` (the
longest path of modules it names); `#[cfg(test)]` code counts too, as
tests are code. A parent's `mod` of its children and their `super::` are
the tree, not dependencies. Exits 1 and prints each cycle when there is
one.
"""

import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
USE = re.compile(r"\bcrate((?:::[a-z_][a-z0-9_]*)+)")


def module_of(src: pathlib.Path, f: pathlib.Path) -> str:
    parts = list(f.relative_to(src).with_suffix("").parts)
    if parts[-1] == "mod":
        parts.pop()
    return "/".join(parts)


def exists(src: pathlib.Path, module: str) -> bool:
    return (src / f"{module}.rs").exists() or (src / module / "mod.rs").exists()


def named(src: pathlib.Path, path: str) -> str:
    """The longest module path a `crate::a::b::c` names ('' if none)."""
    parts = [p for p in path.split("::") if p]
    found = ""
    for i in range(1, len(parts) + 1):
        candidate = "/".join(parts[:i])
        if exists(src, candidate):
            found = candidate
    return found


def graph(src: pathlib.Path) -> dict:
    edges: dict = {}
    for f in sorted(src.rglob("*.rs")):
        mod = module_of(src, f)
        if mod in ("lib", "main"):
            continue
        deps = edges.setdefault(mod, set())
        for path in USE.findall(f.read_text()):
            m = named(src, path)
            # Not itself, and not one of its ancestors (its own tree).
            if m and m != mod and not mod.startswith(m + "/"):
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
