#!/usr/bin/env python3
"""Summarise bench/build.sh measurements.

    build-report.py ROUNDS.tsv META.json OUT.json

ROUNDS.tsv rows (tab-separated, written by build.sh):
    round  tool  cold_ms  cached_ms      (a time may be "failed")
META.json: time_utc, smoke, runs, dockerfile, loadavg_before,
berth {version, git}, versions {podman, ch-image}.

Writes OUT.json (META's facts, median and minimum per tool and kind, the
medians of the per-round ratios berth/tool, and under "emulation" those of
berth-seccomp/berth and berth-seccomp/ch-image) and prints a markdown
table. Exits 1 if a build failed.
"""

import json
import statistics
import sys

from stats import host_facts, per_round_ratios, read_json

KINDS = ("cold", "cached")


def main():
    raw, meta_path, out = sys.argv[1:4]
    meta = read_json(meta_path)
    times = {}   # (tool, kind) -> {round: ms}
    failed = 0
    with open(raw) as f:
        for line in f:
            r, t, c, h = line.rstrip("\n").split("\t")
            if "failed" in (c, h):
                failed += 1
                continue
            times.setdefault((t, "cold"), {})[r] = int(c)
            times.setdefault((t, "cached"), {})[r] = int(h)
    tools = [t for t in ["berth", "berth-seccomp", "podman", "ch-image"] if (t, "cold") in times]

    summary, ratios = {}, {}
    for t in tools:
        for kind in KINDS:
            ms = list(times[(t, kind)].values())
            summary.setdefault(t, {})[kind] = {"n": len(ms), "median_ms": statistics.median(ms),
                                               "min_ms": min(ms)}
    for peer in [t for t in tools if not t.startswith("berth")]:
        for kind in KINDS:
            rr = [x for _, x in per_round_ratios(times.get(("berth", kind), {}), times[(peer, kind)])]
            if rr:
                ratios.setdefault(peer, {})[kind] = round(statistics.median(rr), 3)
    # Root emulation against the subuid path and ch-image: berth-seccomp / X.
    emulation = {}
    for other in [t for t in ("berth", "ch-image") if t in tools and "berth-seccomp" in tools]:
        for kind in KINDS:
            rr = [x for _, x in per_round_ratios(times[("berth-seccomp", kind)], times[(other, kind)])]
            if rr:
                emulation.setdefault(other, {})[kind] = round(statistics.median(rr), 3)
    doc = {"benchmark": "build", "time_utc": meta["time_utc"], "smoke": meta["smoke"],
           "runs": meta["runs"],
           "how": {"dockerfile": meta["dockerfile"],
                   "cold": "build --no-cache (ch-image: --rebuild), base image already stored",
                   "cached": "the same build again"},
           "host": host_facts(meta["loadavg_before"]),
           "berth": meta["berth"], "versions": meta["versions"],
           "failed": failed, "summary": summary, "ratios": ratios, "emulation": emulation}
    with open(out, "w") as f:
        json.dump(doc, f, indent=1)

    print("| tool | cold ms | cached ms | berth / tool, cold | berth / tool, cached |")
    print("|---|---:|---:|---:|---:|")
    for t in tools:
        s = summary[t]
        r = ratios.get(t, {})

        def g(k):
            return f"{r[k]:.2f}" if k in r else ""

        print(f"| {t} | {s['cold']['median_ms']:.0f} | {s['cached']['median_ms']:.0f} | {g('cold')} | "
              f"{g('cached')} |")
    for other, r in emulation.items():
        print(f"\nberth-seccomp / {other}: cold {r.get('cold', 0):.2f}, cached {r.get('cached', 0):.2f}")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
