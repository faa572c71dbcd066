#!/usr/bin/env python3
"""Summarise bench/inject.sh measurements.

    inject-report.py STARTS.tsv META.json OUT.json

STARTS.tsv rows (tab-separated, written by start-loop.py):
    round  position  tool  case  status  milliseconds
META.json: time_utc, smoke, runs, loadavg_before, berth {version, git}.

Writes OUT.json (META's facts, the summary per variant and the per-round
cost over a plain start) and prints a markdown table. Exits 1 if any
measured start failed. Quartiles by the nearest-rank method.
"""

import json
import statistics
import sys

from stats import host_facts, nearest_rank, per_round_pairs, read_json, read_rows

TOOLS = ["plain", "gpus-discovery", "gpus-cdi", "mpi-module"]
HOW = {"plain": "berth run IMAGE true",
       "gpus-discovery": "berth run --gpus all (no CDI spec: loader cache, /dev, programs)",
       "gpus-cdi": "berth run --gpus all (the fake tree's CDI spec)",
       "mpi-module": "berth run --mpi (a module: 2 libraries, 1 device, 3 variables)"}


def summary_of(values):
    return {"n": len(values), "median": round(statistics.median(values), 3),
            "p25": round(nearest_rank(values, .25), 3), "p75": round(nearest_rank(values, .75), 3)}


def main():
    raw, meta_path, out = sys.argv[1:4]
    meta = read_json(meta_path)
    by_tool = {}   # tool -> {round: ms}
    failed = 0
    for rnd, _pos, tool, _case, status, ms in read_rows(raw):
        if rnd.startswith("warmup"):
            continue
        if status != "ok":
            failed += 1
            continue
        by_tool.setdefault(tool, {})[rnd] = float(ms)

    summary, deltas = {}, {}
    for t in TOOLS:
        v = list(by_tool.get(t, {}).values())
        if v:
            summary[t] = summary_of(v)
        if t != "plain":
            d = [x - plain for _, x, plain in per_round_pairs(by_tool.get(t, {}), by_tool.get("plain", {}))]
            if d:
                deltas[t] = summary_of(d)
    doc = {"benchmark": "inject", "time_utc": meta["time_utc"], "smoke": meta["smoke"],
           "runs": meta["runs"], "how": HOW,
           "host": host_facts(meta["loadavg_before"]),
           "berth": meta["berth"],
           "failed": failed, "summary": summary, "deltas_ms": deltas}
    with open(out, "w") as f:
        json.dump(doc, f, indent=1)

    print("| variant | median ms | IQR | more than plain, ms (per round) |")
    print("|---|---:|---:|---:|")
    for t in TOOLS:
        s = summary.get(t)
        if not s:
            continue
        d = deltas.get(t)
        print(f"| {t} | {s['median']:.2f} | {s['p25']:.2f}–{s['p75']:.2f} | {d['median']:+.2f} |" if d else
              f"| {t} | {s['median']:.2f} | {s['p25']:.2f}–{s['p75']:.2f} | |")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
