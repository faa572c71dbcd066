"""What the benchmark reports share: reading the raw rows, summarising
samples, pairing them round by round, and writing the results.

Imported by the bench/lib/*-report.py scripts (each run from this
directory, so `import stats` finds this file).

A benchmark runs its tools one after another in every round (or repetition)
and rotates their order from round to round. A ratio berth/peer is taken
within each round, where the two were measured close together under the
same load, and the per-round ratios are then summarised like any sample:
per_round_ratios() pairs them, stats() summarises them.
"""

import csv
import json
import os
import platform
import statistics


def read_rows(path):
    """The non-empty lines of the tab-separated file PATH, each a list of
    its fields."""
    rows = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.rstrip("\n")
            if line:
                rows.append(line.split("\t"))
    return rows


def parse_round(word):
    """A round column as written by the benchmarks: (round, warm-up?), the
    round a number, or the word itself ("warmup-N") for a warm-up round."""
    warm = word.startswith("warmup")
    return (word if warm else int(word)), warm


def stats(values, digits=None, spread=False):
    """n, median, min and max of VALUES (None when there are none).

    digits: round every figure to that many digits (None: as computed).
    spread: also the interquartile range (p25, p75: quartiles by the
    "inclusive" method, both the value itself for a single one) and the
    mean.
    """
    if not values:
        return None
    v = sorted(values)

    def r(x):
        return x if digits is None else round(x, digits)

    out = {"n": len(v), "median": r(statistics.median(v))}
    if spread:
        q1, q3 = (statistics.quantiles(v, n=4, method="inclusive")[::2]
                  if len(v) > 1 else (v[0], v[0]))
        out["p25"] = r(q1)
        out["p75"] = r(q3)
    out["min"] = r(v[0])
    out["max"] = r(v[-1])
    if spread:
        out["mean"] = r(statistics.fmean(v))
    return out


def nearest_rank(values, p):
    """The P-quantile of VALUES (0 <= P < 1) by the nearest-rank method: the
    value at index int(P * n) of the sorted values (bench/inject.sh's
    quartiles)."""
    v = sorted(values)
    return v[min(len(v) - 1, int(p * len(v)))]


def per_round_pairs(a, b):
    """[(round, a, b)] for the rounds that A and B ({round: value}) both
    have, in round order."""
    return [(k, a[k], b[k]) for k in sorted(set(a) & set(b))]


def per_round_ratios(num, den):
    """[(round, num/den)] for the rounds that NUM and DEN ({round: value})
    both have, in round order; a round whose DEN is not positive is left
    out."""
    return [(k, n / d) for k, n, d in per_round_pairs(num, den) if d > 0]


def host_facts(loadavg_before):
    """The machine, for a report: kernel, CPUs, and the load average before
    (as the benchmark read it) and now."""
    with open("/proc/loadavg") as f:
        now = " ".join(f.read().split()[:3])
    return {"kernel": platform.release(), "cpus": os.cpu_count(),
            "loadavg_before": loadavg_before, "loadavg_after": now}


def read_json(path):
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def write_json(path, doc):
    """DOC as indented JSON, with a final newline."""
    with open(path, "w", encoding="utf-8") as f:
        json.dump(doc, f, indent=2)
        f.write("\n")


def write_csv(path, header, rows):
    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(header)
        w.writerows(rows)
