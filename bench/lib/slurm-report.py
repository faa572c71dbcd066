#!/usr/bin/env python3
"""Summarise bench/slurm.sh measurements.

    slurm-report.py ROUNDS.tsv META.json OUT.json

ROUNDS.tsv rows (tab-separated, written by slurm.sh):
    round  case  variant  microseconds (or "failed")
META.json: time_utc, smoke, runs, loadavg_before, berth {version, git},
versions {slurm, mpich}.

Writes OUT.json (META's facts, median and minimum per case and variant,
and the medians of the per-round ratios to native srun) and prints a
markdown table. Exits 1 if an srun failed.
"""

import json
import statistics
import sys

from stats import host_facts, per_round_ratios, read_json

CASES = ["true", "step", "mpi", "mpi3"]
VARIANTS = ["native", "shared", "per-task"]
HOW = {"true": "srun -N1 -n16 -O true",
       "step": "srun --jobid=ALLOC -N1 -n16 -O true (a step of a held allocation)",
       "mpi": "srun --mpi=pmi2 -N1 -n16 -O mpi-probe",
       "mpi3": "srun --mpi=pmi2 -N3 -n6 -O mpi-probe",
       "shared": "--container-image=REGISTRY/berth-test/mpich:latest (one container per node)",
       "per-task": "--container-image=... --container-mode=per-task"}


def main():
    raw, meta_path, out = sys.argv[1:4]
    meta = read_json(meta_path)
    ms = {}   # (case, variant) -> {round: milliseconds}
    failed = 0
    with open(raw) as f:
        for line in f:
            r, c, v, us = line.rstrip("\n").split("\t")
            if us == "failed":
                failed += 1
                continue
            ms.setdefault((c, v), {})[r] = int(us) / 1000.0

    summary, ratios = {}, {}
    for c in CASES:
        for v in VARIANTS:
            values = list(ms.get((c, v), {}).values())
            if values:
                summary.setdefault(c, {})[v] = {"n": len(values),
                                                "median_ms": round(statistics.median(values), 1),
                                                "min_ms": round(min(values), 1)}
            if v != "native":
                rr = [x for _, x in per_round_ratios(ms.get((c, v), {}), ms.get((c, "native"), {}))]
                if rr:
                    ratios.setdefault(c, {})[v] = round(statistics.median(rr), 3)
    doc = {"benchmark": "slurm-start", "time_utc": meta["time_utc"], "smoke": meta["smoke"],
           "runs": meta["runs"], "how": HOW,
           "host": host_facts(meta["loadavg_before"]),
           "berth": meta["berth"], "versions": meta["versions"],
           "failed": failed, "summary": summary, "ratios": ratios}
    with open(out, "w") as f:
        json.dump(doc, f, indent=1)

    print("| case | native ms | shared ms | per-task ms | shared / native | per-task / native |")
    print("|---|---:|---:|---:|---:|---:|")
    for c in CASES:
        s = summary.get(c, {})
        if "native" not in s:
            continue

        def g(v):
            return f"{s[v]['median_ms']:.0f}" if v in s else ""

        r = ratios.get(c, {})
        print(f"| {c} | {g('native')} | {g('shared')} | {g('per-task')} | {r.get('shared', 0):.2f} | "
              f"{r.get('per-task', 0):.2f} |")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
