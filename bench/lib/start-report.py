#!/usr/bin/env python3
"""Summarise bench/start.sh measurements.

    start-report.py RAW.tsv META.json PHASES.txt OUT_PREFIX [COLD.tsv]

RAW.tsv rows (tab-separated, written by start-loop.py):
    round  position  tool  case  status  milliseconds
RAW.tsv.watch rows: round  content of berth's keeper pid file after it.
PHASES.txt rows: "CASE name=NNus name=NNus ... total=NNus" (berth --timing).
COLD.tsv rows (start-cold.py: berth's first starts, no keeper running):
    round  case  variant  status  milliseconds

Writes OUT_PREFIX.csv (one row per start, warm-up rows flagged),
OUT_PREFIX.json (META plus summary and every start) and prints a markdown
report. Exits 1 if any timed start failed.

Spread is given as the interquartile range (25th to 75th percentile) and
min/max. Ratios berth/peer are taken round by round (the two starts were
at most a second or two apart, under the same load), then summarised by
their median; the ratio of the two medians is shown beside it.
"""

import os
import sys

from stats import parse_round, per_round_ratios, read_json, read_rows, stats, write_csv, write_json

CASES = {"true": "`true`", "python": "`python3 -c pass`"}

# Targets: (case, peer, most berth/peer may be, in words).
TARGETS = [
    ("true", "ch-run-sqfs", 0.35, "berth `true` (squashfs store) vs ch-run squashfs"),
    ("python", "ch-run-dir", 1.3, "berth `python3 -c pass` vs ch-run directory"),
]


def read_raw(path):
    runs = []
    for rnd, pos, tool, case, status, ms in read_rows(path):
        rnd, warm = parse_round(rnd)
        runs.append({
            "round": rnd,
            "warmup": warm,
            "position": int(pos),
            "tool": tool,
            "case": case,
            "status": status,
            "ms": float(ms),
        })
    return runs


def read_watch(path):
    rows = []
    if os.path.exists(path):
        with open(path, encoding="utf-8") as f:
            for line in f:
                rnd, _, seen = line.rstrip("\n").partition("\t")
                rows.append((rnd, seen))
    return rows


def read_phases(path):
    """{case: {phase: [microseconds, ...]}}"""
    out = {}
    if os.path.exists(path):
        with open(path, encoding="utf-8") as f:
            for line in f:
                words = line.split()
                if not words:
                    continue
                phases = out.setdefault(words[0], {})
                for w in words[1:]:
                    name, _, val = w.partition("=")
                    if val.endswith("us") and val[:-2].isdigit():
                        phases.setdefault(name, []).append(int(val[:-2]))
    return out


def summarise(runs, meta, watch, phases):
    tools, cases = meta["tools"], meta["cases"]
    timed = [r for r in runs if not r["warmup"]]
    summary = {"starts": {}, "ratios": {}, "targets": [], "failures": 0}

    for case in cases:
        for tool in tools:
            mine = [r for r in timed if r["tool"] == tool and r["case"] == case]
            ok = [r["ms"] for r in mine if r["status"] == "ok"]
            s = stats(ok, 2, spread=True) or {"n": 0}
            s["failed"] = len(mine) - len(ok)
            summary["failures"] += s["failed"]
            summary["starts"].setdefault(case, {})[tool] = s

    # Ratios round by round: berth and a peer from the same round.
    by_round = {}   # (case, tool) -> {round: ms}
    for r in timed:
        if r["status"] == "ok":
            by_round.setdefault((r["case"], r["tool"]), {})[r["round"]] = r["ms"]
    if "berth" in tools:
        for case in cases:
            for peer in (t for t in tools if t != "berth"):
                per_round = [ratio for _, ratio in per_round_ratios(
                    by_round.get((case, "berth"), {}), by_round.get((case, peer), {}))]
                s = stats(per_round, 4, spread=True) or {"n": 0}
                med = summary["starts"][case]
                if med["berth"].get("median") and med[peer].get("median"):
                    s["of_medians"] = round(med["berth"]["median"] / med[peer]["median"], 4)
                summary["ratios"].setdefault(case, {})[peer] = s

    def why_missing(case, peer):
        if case not in cases:
            return f"case {case} not run"
        for t in ("berth", peer):
            if t not in tools:
                return meta["unavailable"].get(t) and f"{t}: {meta['unavailable'][t]}" \
                    or f"{t} not selected"
        return "no start of both succeeded in the same round"

    for case, peer, limit, words in TARGETS:
        r = summary["ratios"].get(case, {}).get(peer, {})
        got = r.get("median")
        summary["targets"].append({
            "target": f"{words}: berth/{peer} <= {limit}",
            "case": case, "peer": peer, "limit": limit,
            "per_round_median": got, "of_medians": r.get("of_medians"),
            "met": None if got is None else got <= limit,
            "why_missing": None if got is not None else why_missing(case, peer),
        })

    # berth's first start, with no keeper running yet (start.sh stops it,
    # and berth comes first in the first warm-up round).
    first = next((r for r in runs if r["round"] == "warmup-1" and r["position"] == 0
                  and r["tool"] == "berth"), None)
    summary["berth_first_start"] = (
        {"case": first["case"], "ms": first["ms"], "status": first["status"]} if first else None)

    measured = [seen for rnd, seen in watch if not rnd.startswith("warmup")]
    summary["keeper"] = {
        "pids_seen": sorted(set(measured)),
        "one_keeper_throughout": bool(measured) and len(set(measured)) == 1 and measured[0] != "",
    }

    summary["berth_phases_us"] = {
        case: {name: stats(vals, 0, spread=True) for name, vals in p.items()}
        for case, p in phases.items()}
    return summary


def fmt(x, digits=1):
    return "n/a" if x is None else f"{x:.{digits}f}"


def markdown(meta, summary):
    tools, cases = meta["tools"], meta["cases"]
    img = meta["image"]
    h = meta["host"]
    out = [f"### Start latency: `{img['ref']}`", ""]
    out.append(
        f"Debian bookworm minbase + python3, {img['rootfs_bytes'] / 1e6:.0f} MB / "
        f"{img['rootfs_entries']} entries unpacked. {meta['runs']} measured round(s) after "
        f"{meta['warmup']} warm-up; every round starts each tool and case once, order rotated "
        f"each round; run as `{meta['user']}`. {h['cpus']} CPUs, load {h['loadavg_before']} -> "
        f"{h['loadavg_after']}. Milliseconds, wall clock from spawn to exit.")
    out.append("")
    head = "| tool | what is timed |"
    rule = "|---|---|"
    for c in cases:
        head += f" {CASES[c]} median | p25-p75 | min-max |"
        rule += "---:|---:|---:|"
    out += [head + " failed |", rule + "---:|"]
    for tool in tools:
        row = f"| {tool} | {meta['how'].get(tool, '')} |"
        failed = 0
        for c in cases:
            s = summary["starts"][c][tool]
            failed += s["failed"]
            if s["n"]:
                row += (f" **{fmt(s['median'])}** | {fmt(s['p25'])}-{fmt(s['p75'])} | "
                        f"{fmt(s['min'])}-{fmt(s['max'])} |")
            else:
                row += " n/a | | |"
        out.append(row + f" {failed} |")

    if summary["ratios"]:
        out += ["", "berth / peer, per round (median [p25-p75]), and the ratio of the medians:", ""]
        head = "| berth / peer |" + "".join(f" {CASES[c]} per round | of medians |" for c in cases)
        out += [head, "|---|" + "---:|---:|" * len(cases)]
        for peer in (t for t in tools if t != "berth"):
            row = f"| berth / {peer} |"
            for c in cases:
                r = summary["ratios"][c][peer]
                if r["n"]:
                    row += (f" {fmt(r['median'], 3)} [{fmt(r['p25'], 3)}-{fmt(r['p75'], 3)}] |"
                            f" {fmt(r.get('of_medians'), 3)} |")
                else:
                    row += " n/a | n/a |"
            out.append(row)

    out += ["", "| target | berth/peer per round | of medians | verdict |", "|---|---:|---:|---|"]
    for t in summary["targets"]:
        verdict = ("met" if t["met"] else "**missed**") if t["met"] is not None \
            else f"not measured ({t['why_missing']})"
        out.append(f"| {t['target']} | {fmt(t['per_round_median'], 3)} | "
                   f"{fmt(t['of_medians'], 3)} | {verdict} |")

    if meta["unavailable"]:
        out += ["", "Could not run here:"]
        for tool, why in sorted(meta["unavailable"].items()):
            out.append(f"- {tool}: {why}")

    out.append("")
    notes = []
    first = summary["berth_first_start"]
    if first:
        notes.append(f"berth's first start with no keeper running ({CASES[first['case']]}, "
                     f"one sample): {fmt(first['ms'])} ms ({first['status']})")
    k = summary["keeper"]
    if "berth" in tools:
        notes.append("one berth keeper served every measured start" if k["one_keeper_throughout"]
                     else f"berth's keeper changed or was absent between rounds "
                          f"(pids seen: {', '.join(p or 'none' for p in k['pids_seen'])})")
    for case, phases in summary["berth_phases_us"].items():
        parts = ", ".join(f"{name} {s['median']:.0f}" for name, s in phases.items() if s)
        n = max((s["n"] for s in phases.values() if s), default=0)
        notes.append(f"berth --timing, {CASES.get(case, case)}, median us over {n} starts: {parts}")
    if h["fixes_applied"]:
        notes.append("host set-up applied by this run: " + "; ".join(h["fixes_applied"]))
    notes.append(f"host: /dev/fuse mode {h['dev_fuse_mode']}; hugetlb cgroup v1 mount: "
                 f"{h['hugetlb_v1_mount'] or 'none'}")
    sq = [f"{name} {meta[key]['squashfs'] if key == 'berth' else meta[key]}"
          for name, key in (("berth", "berth"), ("ch-run-sqfs", "ch_run_squashfs")) if name in tools]
    if sq:
        notes.append("squashfs (compressor, block size): " + ", ".join(sq))
    v = meta["versions"]
    notes.append(f"{meta['berth']['version']} (git {meta['berth']['git']}; sha256 "
                 f"{meta['berth']['sha256'][:12]}); "
                 f"ch-run {v['ch_run']}; {v['crun']}; {v['runc']}; {v['podman']}; "
                 f"squashfuse {v['squashfuse']}")
    out += [f"- {n}" for n in notes]
    return "\n".join(out)


def cold_starts(path):
    """berth's first starts per case and variant: stats of the successful
    ones, and how many failed."""
    out = {}
    rows = read_rows(path) if path and os.path.exists(path) else []
    for _, case, variant, status, ms in rows:
        c = out.setdefault(case, {}).setdefault(variant, {"ms": [], "failed": 0})
        if status == "ok":
            c["ms"].append(float(ms))
        else:
            c["failed"] += 1
    return {case: {v: dict(stats(c["ms"], 2, spread=True) or {"n": 0}, failed=c["failed"])
                   for v, c in variants.items()}
            for case, variants in out.items()}


def cold_markdown(cold):
    if not cold:
        return []
    out = ["", "berth's first start on the node (no keeper running; ms, median and IQR):", "",
           "| case | no read profile | with the image's read profile |", "|---|---:|---:|"]
    for case, v in cold.items():
        cells = []
        for variant in ("no-profile", "profile"):
            s = v.get(variant, {})
            failed = f", {s['failed']} failed" if s.get("failed") else ""
            cells.append(f"{fmt(s['median'])} ({fmt(s['p25'])}–{fmt(s['p75'])}), n={s['n']}{failed}"
                         if s.get("median") is not None
                         else f"none succeeded{failed}" if s else "not measured")
        out.append(f"| {CASES.get(case, case)} | {cells[0]} | {cells[1]} |")
    return out


def main():
    raw, meta_path, phases_path, prefix = sys.argv[1:5]
    cold_path = sys.argv[5] if len(sys.argv) > 5 else None
    runs = read_raw(raw)
    meta = read_json(meta_path)
    summary = summarise(runs, meta, read_watch(raw + ".watch"), read_phases(phases_path))
    summary["berth_cold_starts"] = cold_starts(cold_path)
    cold_failed = sum(v["failed"] for c in summary["berth_cold_starts"].values()
                      for v in c.values())

    write_csv(prefix + ".csv",
              ["time_utc", "round", "warmup", "position", "tool", "case", "status", "ms"],
              ([meta["time_utc"], r["round"], int(r["warmup"]), r["position"],
                r["tool"], r["case"], r["status"], r["ms"]] for r in runs))

    doc = dict(meta)
    doc["summary"] = summary
    doc["starts_detail"] = runs
    write_json(prefix + ".json", doc)

    print(markdown(meta, summary))
    print("\n".join(cold_markdown(summary["berth_cold_starts"])))
    sys.exit(1 if summary["failures"] or cold_failed else 0)


if __name__ == "__main__":
    main()
