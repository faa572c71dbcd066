#!/usr/bin/env python3
"""Summarise bench/ranks.sh measurements.

    ranks-report.py RAW.tsv META.json OUT_PREFIX

RAW.tsv rows (tab-separated, written by ranks.sh):
    phase  rep  position  ranks  case  tool  status  burst_json
    keeper_before  keeper_after  keepers_after  keeper_restarted
keepers_after: berth keeper processes for the image after the burst.
burst_json is burst.py's output (wall_ms: from the first spawn until the
last rank ended).

Writes OUT_PREFIX.csv (one row per burst, warm-up rows flagged),
OUT_PREFIX.json (META plus summary and every burst) and prints a markdown
report. Exits 1 if a measured berth burst failed (a peer's failed bursts
are reported, and left out of its statistics).

Each (case, ranks, tool) is summarised by the median, min and max of its
bursts' wall time over the repetitions. Ratios berth/ch-run are taken per
repetition (the bursts ran seconds apart), then summarised by their median.
"""

import json
import statistics
import sys

from stats import per_round_ratios, read_json, read_rows, stats, write_csv, write_json

CASES = {"true": "`true`", "python": "`python3 -c pass`"}
TOOLS = ["berth-warm", "berth-cold", "ch-run-sqfs", "ch-run-dir", "ch-run-sqfs-join"]
RATIOS = [("berth-warm", "ch-run-sqfs"), ("berth-warm", "ch-run-dir"),
          ("berth-cold", "ch-run-sqfs"), ("berth-cold", "ch-run-dir"),
          ("berth-warm", "ch-run-sqfs-join")]


def read_raw(path):
    rows = []
    for (phase, rep, pos, ranks, case, tool, status, burst, before, after,
         servers, restarted) in read_rows(path):
        b = json.loads(burst)
        rows.append({
            "warmup": phase == "warmup", "rep": int(rep), "position": int(pos),
            "ranks": int(ranks), "case": case, "tool": tool, "status": status,
            "wall_ms": b.get("wall_ms"), "spawn_ms": b.get("spawn_ms"),
            "first_ms": b.get("first_ms"),
            "rank_median_ms": b.get("rank_ms", {}).get("median"),
            "rank_max_ms": b.get("rank_ms", {}).get("max"),
            "failed_ranks": b.get("failed"), "statuses": b.get("statuses", {}),
            "keeper_before": before, "keeper_after": after,
            "keepers_after": int(servers or 0), "keeper_restarted": restarted == "1",
        })
    return rows


def ms(x):
    return f"{x / 1000:.2f} s" if x >= 1000 else f"{x:.0f} ms" if x >= 10 else f"{x:.1f} ms"


def main():
    raw_path, meta_path, prefix = sys.argv[1:4]
    rows = read_raw(raw_path)
    meta = read_json(meta_path)

    measured = [r for r in rows if not r["warmup"]]
    failed = [r for r in measured if r["status"] != "ok"]
    ok = [r for r in measured if r["status"] == "ok"]
    cell = {}
    for r in ok:
        cell.setdefault((r["case"], r["ranks"], r["tool"]), {})[r["rep"]] = r
    tools = [t for t in TOOLS if t in meta["tools"]]

    summary = []
    for case in meta["cases"]:
        for n in meta["ranks"]:
            entry = {"case": case, "ranks": n, "tools": {}, "ratios": {}}
            for t in tools:
                c = cell.get((case, n, t))
                nfail = sum(1 for r in failed if (r["case"], r["ranks"], r["tool"]) == (case, n, t))
                if not c:
                    if nfail:
                        entry["tools"][t] = {"n": 0, "failed_bursts": nfail}
                    continue
                s = stats([r["wall_ms"] for r in c.values()])
                s["failed_bursts"] = nfail
                s["rank_median_ms"] = statistics.median(r["rank_median_ms"] for r in c.values())
                s["per_rank_ms"] = s["median"] / n
                entry["tools"][t] = s
            for a, b in RATIOS:
                ca, cb = cell.get((case, n, a), {}), cell.get((case, n, b), {})
                per_rep = [ratio for _, ratio in per_round_ratios(
                    {k: r["wall_ms"] for k, r in ca.items()}, {k: r["wall_ms"] for k, r in cb.items()})]
                if per_rep and entry["tools"][a]["n"] and entry["tools"][b]["n"]:
                    rs = stats(per_rep)
                    rs["of_medians"] = entry["tools"][a]["median"] / entry["tools"][b]["median"]
                    entry["ratios"][f"{a}/{b}"] = rs
            summary.append(entry)

    # Checks on berth's keeper.
    warm = [r for r in measured if r["tool"] == "berth-warm" and r["status"] == "ok"]
    cold = [r for r in measured if r["tool"] == "berth-cold" and r["status"] == "ok"]
    checks = {
        "warm_bursts": len(warm),
        "warm_bursts_keeper_restarted_before": sum(r["keeper_restarted"] for r in warm),
        "warm_bursts_keeper_changed_during": sum(
            1 for r in warm if r["keeper_before"] != r["keeper_after"]),
        "cold_bursts": len(cold),
        "cold_bursts_without_keeper_after": sum(1 for r in cold if not r["keeper_after"]),
        "keepers_after_berth_bursts": sorted({r["keepers_after"] for r in warm + cold}),
    }

    result = dict(meta)
    result["summary"] = summary
    result["keeper_checks"] = checks
    result["failed_bursts"] = len(failed)
    result["bursts"] = rows
    write_json(prefix + ".json", result)
    cols = ["warmup", "rep", "position", "ranks", "case", "tool", "status", "wall_ms",
            "spawn_ms", "first_ms", "rank_median_ms", "rank_max_ms", "failed_ranks",
            "keeper_before", "keeper_after", "keepers_after", "keeper_restarted"]
    write_csv(prefix + ".csv", cols, ([r[c] for c in cols] for r in rows))

    out = ["## Many ranks on one node: N starts at once, until the last one ends\n"]
    out.append(
        f"Image: Debian bookworm minbase + python3 (berth {meta['image']['berth_squashfs']}; "
        f"ch-run squashfs {meta['image']['ch_run_squashfs']}). {meta['reps']} repetition(s)"
        f"{' (smoke)' if meta.get('smoke') else ''}; median [min–max] of the burst's wall time "
        "(first spawn to last exit), and per rank (median / N).\n")
    ratio_keys = [f"{a}/{b}" for a, b in RATIOS if a in tools and b in tools]
    for case in meta["cases"]:
        out.append(f"### {CASES[case]}\n")
        out.append("| ranks | " + " | ".join(tools) + " |")
        out.append("|---:|" + "---|" * len(tools))
        for e in summary:
            if e["case"] != case:
                continue
            cells = []
            for t in tools:
                s = e["tools"].get(t)
                if not s or not s["n"]:
                    c = "–"
                else:
                    c = (f"{ms(s['median'])} [{ms(s['min'])}–{ms(s['max'])}], "
                         f"{ms(s['per_rank_ms'])}/rank")
                if s and s["failed_bursts"]:
                    c += f" ({s['failed_bursts']} burst(s) failed)"
                cells.append(c)
            out.append(f"| {e['ranks']} | " + " | ".join(cells) + " |")
        out.append("")
        if ratio_keys:
            out.append("| ranks | " + " | ".join(ratio_keys) + " |")
            out.append("|---:|" + "---|" * len(ratio_keys))
            for e in summary:
                if e["case"] != case:
                    continue
                cells = []
                for k in ratio_keys:
                    r = e["ratios"].get(k)
                    cells.append(f"{r['median']:.2f} [{r['min']:.2f}–{r['max']:.2f}]" if r else "–")
                out.append(f"| {e['ranks']} | " + " | ".join(cells) + " |")
            out.append("")
    if warm or cold:
        out.append(
            f"- berth's keeper: {checks['warm_bursts']} warm bursts, "
            f"{checks['warm_bursts_keeper_restarted_before']} needed a keeper started before them, "
            f"{checks['warm_bursts_keeper_changed_during']} saw it change during the burst; "
            f"{checks['cold_bursts']} cold bursts, {checks['cold_bursts_without_keeper_after']} left no "
            f"keeper; keeper processes for the image after a berth burst: "
            f"{checks['keepers_after_berth_bursts']} (1 expected)")
    for t, why in meta.get("unavailable", {}).items():
        out.append(f"- {t} could not run: {why}")
    if failed:
        out.append(f"- **{len(failed)} burst(s) failed**: " + ", ".join(
            f"rep {r['rep']} {r['ranks']} x {r['tool']} {r['case']} ({r['status']}: {r['statuses']})"
            for r in failed))
    h = meta["host"]
    out.append(f"- host: {h['cpus']} CPUs ({h['cpu_model']}), kernel {h['kernel']}, "
               f"load {h['loadavg_before']} before, {h['loadavg_after']} after")
    out.append(f"- berth {meta['berth']['version']} ({meta['berth']['git']}), "
               f"ch-run {meta['versions']['ch_run']}, squashfuse {meta['versions']['squashfuse']}")
    print("\n".join(out))
    sys.exit(1 if any(r["tool"].startswith("berth") for r in failed) else 0)


if __name__ == "__main__":
    main()
