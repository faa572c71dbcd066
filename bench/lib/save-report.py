#!/usr/bin/env python3
"""Summarise bench/save.sh measurements.

    save-report.py ROUNDS.tsv META.json OUT.json

ROUNDS.tsv rows (tab-separated, written by save.sh):
    round  tool  ms  bytes      (ms may be "failed")
META.json: time_utc, smoke, runs, loadavg_before, package_bytes,
tree_bytes, berth {version, git}, versions {podman, mksquashfs}.

Writes OUT.json (META's facts, the median time and size per tool, and the
medians of the per-round ratios berth/tool) and prints a markdown table.
Exits 1 if a save failed.
"""

import json
import statistics
import sys

from stats import host_facts, per_round_ratios, read_json, read_rows

TOOLS = ["berth", "podman", "mksquashfs"]


def main():
    raw, meta_path, out = sys.argv[1:4]
    meta = read_json(meta_path)
    times, sizes = {}, {}
    failed = 0
    for r, t, ms, size in read_rows(raw):
        if ms == "failed":
            failed += 1
            continue
        times.setdefault(t, {})[r] = int(ms)
        sizes.setdefault(t, {})[r] = int(size)
    tools = [t for t in TOOLS if t in times]
    summary = {t: {"n": len(times[t]), "median_ms": statistics.median(times[t].values()),
                   "min_ms": min(times[t].values()),
                   "median_bytes": statistics.median(sizes[t].values())} for t in tools}
    ratios = {}
    for peer in [t for t in tools if t != "berth"]:
        rr = [x for _, x in per_round_ratios(times.get("berth", {}), times[peer])]
        if rr:
            ratios[peer] = round(statistics.median(rr), 3)
    doc = {"benchmark": "save", "time_utc": meta["time_utc"], "smoke": meta["smoke"],
           "runs": meta["runs"],
           "how": {"package_bytes": meta["package_bytes"], "tree_bytes": meta["tree_bytes"],
                   "berth": "berth run --overlay DIR --save OUT.sqsh IMAGE true",
                   "podman": "podman commit CONTAINER NAME",
                   "mksquashfs": "mksquashfs TREE OUT -comp zstd -Xcompression-level 3 -b 131072"},
           "host": host_facts(meta["loadavg_before"]),
           "berth": meta["berth"], "versions": meta["versions"],
           "failed": failed, "summary": summary, "ratios": ratios}
    with open(out, "w") as f:
        json.dump(doc, f, indent=1)

    print("| tool | save ms | output MB | berth / tool |")
    print("|---|---:|---:|---:|")
    for t in tools:
        s = summary[t]
        r = f"{ratios[t]:.2f}" if t in ratios else ""
        print(f"| {t} | {s['median_ms']:.0f} | {s['median_bytes'] / 1e6:.1f} | {r} |")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
