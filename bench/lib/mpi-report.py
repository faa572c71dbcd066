#!/usr/bin/env python3
"""Summarise bench/mpi.sh measurements.

    mpi-report.py ROUNDS.tsv META.json OUT.json

ROUNDS.tsv rows (tab-separated, written by mpi.sh): round  variant  and
rank 0's line "latency_us L bandwidth_MBps B", or "failed".
META.json: time_utc, smoke, runs, iterations, loadavg_before,
berth {version, git}, versions {mpich}, host_libmpi.

Writes OUT.json (META's facts, the medians per variant and the medians of
the per-round ratios to native) and prints a markdown table. Exits 1 if a
run failed.
"""

import json
import statistics
import sys

from stats import host_facts, per_round_ratios, read_json

VARIANTS = ["native", "image", "host"]
HOW = {"native": "mpiexec.hydra -n 2 pingpong (host MPICH)",
       "image": "mpiexec.hydra -n 2 berth run IMAGE pingpong (the image's MPICH)",
       "host": "mpiexec.hydra -n 2 berth run --mpi IMAGE pingpong (host MPICH injected)"}


def main():
    raw, meta_path, out = sys.argv[1:4]
    meta = read_json(meta_path)
    lat, bw = {}, {}   # variant -> {round: value}
    failed = 0
    with open(raw) as f:
        for line in f:
            r, v, rest = line.rstrip("\n").split("\t", 2)
            words = rest.split()
            if len(words) != 4:
                failed += 1
                continue
            lat.setdefault(v, {})[r] = float(words[1])
            bw.setdefault(v, {})[r] = float(words[3])

    summary, ratios = {}, {}
    for v in VARIANTS:
        if lat.get(v):
            summary[v] = {"n": len(lat[v]), "latency_us": round(statistics.median(lat[v].values()), 3),
                          "bandwidth_MBps": round(statistics.median(bw[v].values()), 1)}
        if v != "native":
            rl = [x for _, x in per_round_ratios(lat.get(v, {}), lat.get("native", {}))]
            rb = [x for _, x in per_round_ratios(bw.get(v, {}), bw.get("native", {}))]
            if rl:
                ratios[v] = {"latency": round(statistics.median(rl), 4),
                             "bandwidth": round(statistics.median(rb), 4)}
    doc = {"benchmark": "mpi-pingpong", "time_utc": meta["time_utc"], "smoke": meta["smoke"],
           "runs": meta["runs"], "iterations": meta["iterations"], "how": HOW,
           "host": host_facts(meta["loadavg_before"]),
           "berth": meta["berth"], "versions": meta["versions"], "host_libmpi": meta["host_libmpi"],
           "failed": failed, "summary": summary, "ratios": ratios}
    with open(out, "w") as f:
        json.dump(doc, f, indent=1)

    print("| variant | latency µs (8 B) | bandwidth MB/s (1 MiB) | latency / native | bandwidth / native |")
    print("|---|---:|---:|---:|---:|")
    for v in VARIANTS:
        s = summary.get(v)
        if not s:
            continue
        r = ratios.get(v, {})
        print(f"| {v} | {s['latency_us']:.2f} | {s['bandwidth_MBps']:.0f} | {r.get('latency', 1):.3f} | "
              f"{r.get('bandwidth', 1):.3f} |")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
