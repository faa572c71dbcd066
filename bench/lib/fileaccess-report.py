#!/usr/bin/env python3
"""Summarise bench/fileaccess.sh measurements.

    fileaccess-report.py RAW.tsv META.json OUT_PREFIX

RAW.tsv rows (tab-separated, written by fileaccess.sh):
    round  position  method  workload  state  status  inside_s  outer_s  count
inside_s is timed inside the container or shell (the workload alone),
outer_s is the whole command (for berth: with the container's start);
count is bytes read (read) or entries seen (find, stat).

Writes OUT_PREFIX.csv (one row per command), OUT_PREFIX.json (META plus the
summary and every row) and prints a markdown report. Exits 1 if a command
failed or the methods disagree on what they saw.

Ratios berth/kernel and berth/host are taken per round (the commands ran
seconds apart, under the same load), then summarised by their median.
Where the host directory has no cold run (no --drop-caches), berth cold is
compared with host warm, and the table says so.
"""

import json
import statistics
import sys

from stats import per_round_ratios, read_json, read_rows, stats, write_csv, write_json

METHODS = ["berth", "kernel", "host"]
WORKLOADS = {
    "read": "sequential read",
    "find": "`find /usr -printf '%s\\n'`",
    "stat": "`stat` of every /usr entry",
}
TARGET = 0.8  # berth at least 0.8x the kernel mount's speed


def read_raw(path):
    rows = []
    for rnd, pos, method, wl, state, status, inside, outer, count in read_rows(path):
        rows.append({
            "round": int(rnd), "position": int(pos), "method": method,
            "workload": wl, "state": state, "status": status,
            "seconds": float(inside), "command_seconds": float(outer),
            "count": int(count),
        })
    return rows


def fmt_s(x):
    if x is None:
        return "–"
    return f"{x:.3f} s" if x >= 0.1 else f"{x * 1000:.1f} ms"


def main():
    raw_path, meta_path, prefix = sys.argv[1:4]
    rows = read_raw(raw_path)
    meta = read_json(meta_path)

    ok = [r for r in rows if r["status"] == "ok"]
    failed = [r for r in rows if r["status"] != "ok"]
    by = {}
    for r in ok:
        by.setdefault((r["workload"], r["state"], r["method"]), {})[r["round"]] = r

    # What each method saw, per workload: all must agree.
    counts = {}
    for r in ok:
        counts.setdefault(r["workload"], {}).setdefault(r["method"], set()).add(r["count"])
    disagree = {w: {m: sorted(c) for m, c in ms.items()} for w, ms in counts.items()
                if len(set().union(*ms.values())) > 1}

    summary = []
    for wl in WORKLOADS:
        for state in ("cold", "warm"):
            entry = {"workload": wl, "state": state, "methods": {}, "ratios": {}}
            for m in METHODS:
                cell = by.get((wl, state, m))
                if not cell:
                    continue
                secs = [r["seconds"] for r in cell.values()]
                s = stats(secs)
                s["command_seconds"] = stats([r["command_seconds"] for r in cell.values()])
                if wl == "read":
                    nbytes = next(iter(cell.values()))["count"]
                    s["bytes"] = nbytes
                    s["mb_per_s"] = nbytes / s["median"] / 1e6
                else:
                    s["entries"] = next(iter(cell.values()))["count"]
                entry["methods"][m] = s
            if not entry["methods"]:
                continue
            berth = by.get((wl, state, "berth"), {})
            for peer in ("kernel", "host"):
                pstate = state
                if not by.get((wl, state, peer)) and state == "cold":
                    pstate = "warm"  # host: no cold run without --drop-caches
                other = by.get((wl, pstate, peer), {})
                per_round = [ratio for _, ratio in per_round_ratios(
                    {k: r["seconds"] for k, r in berth.items()},
                    {k: r["seconds"] for k, r in other.items()})]
                if not per_round:
                    continue
                rs = stats(per_round)
                rs["peer_state"] = pstate
                rs["of_medians"] = (statistics.median(r["seconds"] for r in berth.values())
                                    / statistics.median(r["seconds"] for r in other.values()))
                entry["ratios"][f"berth/{peer}"] = rs
            k = entry["ratios"].get("berth/kernel")
            if k:
                entry["target"] = {
                    "rule": f"berth_time <= kernel_time / {TARGET}",
                    "berth_speed_vs_kernel": 1 / k["median"],
                    "met": k["median"] <= 1 / TARGET,
                }
            summary.append(entry)

    result = dict(meta)
    result["summary"] = summary
    result["count_disagreements"] = disagree
    result["failed"] = len(failed)
    result["runs_detail"] = rows
    write_json(prefix + ".json", result)

    def csv_row(r):
        mbs = (f"{r['count'] / r['seconds'] / 1e6:.1f}"
               if r["workload"] == "read" and r["status"] == "ok" and r["seconds"] > 0 else "")
        return [r["round"], r["position"], r["method"], r["workload"], r["state"],
                r["status"], f"{r['seconds']:.6f}", f"{r['command_seconds']:.6f}",
                r["count"], mbs]

    write_csv(prefix + ".csv",
              ["round", "position", "method", "workload", "state", "status",
               "seconds", "command_seconds", "count", "mb_per_s"],
              (csv_row(r) for r in rows))

    # Markdown.
    img = meta["image"]
    sq = img.get("squashfs", {})
    out = []
    out.append("## File access: berth vs a kernel squashfs mount vs the host directory\n")
    out.append(
        f"Image `{img['name']}`: the Debian bookworm minbase + python3 image plus "
        f"{img['data_files']} files of {img['data_file_mib']} MiB of random data in `/data`; "
        f"berth's image file {sq.get('size', 0) / 2**20:.0f} MiB, {sq.get('compressor')} "
        f"{sq.get('block_size', 0) // 1024} KiB blocks. `/usr` holds {img['usr_entries']} entries. "
        f"{meta['runs']} round(s){' (smoke)' if meta.get('smoke') else ''}; "
        f"median [min–max] of the time inside the container or shell.\n")
    out.append(f"Cold: {meta['cold']}. Warm: the same mount, right after.\n")
    out.append("| workload | state | berth | kernel mount | host dir | berth/kernel | berth/host "
               f"| target (berth ≥ {TARGET}x kernel speed) |")
    out.append("|---|---|---|---|---|---|---|---|")
    for e in summary:
        cells = []
        for m in METHODS:
            s = e["methods"].get(m)
            if not s:
                cells.append("–")
                continue
            c = f"{fmt_s(s['median'])} [{fmt_s(s['min'])}–{fmt_s(s['max'])}]"
            if "mb_per_s" in s:
                c += f", {s['mb_per_s']:.0f} MB/s"
            cells.append(c)
        ratios = []
        for key in ("berth/kernel", "berth/host"):
            r = e["ratios"].get(key)
            if not r:
                ratios.append("–")
                continue
            note = " (vs host warm)" if key == "berth/host" and r["peer_state"] != e["state"] else ""
            ratios.append(f"{r['median']:.2f} [{r['min']:.2f}–{r['max']:.2f}]{note}")
        t = e.get("target")
        tcell = (f"{'met' if t['met'] else 'missed'} ({t['berth_speed_vs_kernel']:.2f}x)"
                 if t else "–")
        name = WORKLOADS[e["workload"]]
        if e["workload"] == "read":
            name += f", {img['data_files']} x {img['data_file_mib']} MiB"
        out.append(f"| {name} | {e['state']} | {' | '.join(cells)} | {' | '.join(ratios)} | {tcell} |")
    out.append("")
    out.append("berth's whole command (container start, workload, exit), median:")
    for e in summary:
        s = e["methods"].get("berth")
        if s:
            out.append(f"- {e['workload']} {e['state']}: {fmt_s(s['command_seconds']['median'])}")
    out.append("")
    if meta.get("unavailable"):
        for m, why in meta["unavailable"].items():
            out.append(f"- {m} could not run: {why}")
    if disagree:
        out.append(f"- **the methods saw different things**: {json.dumps(disagree)}")
    if failed:
        out.append(f"- **{len(failed)} command(s) failed**: "
                   + ", ".join(f"round {r['round']} {r['method']} {r['workload']} {r['state']} "
                               f"({r['status']})" for r in failed))
    h = meta["host"]
    out.append(f"- host: {h['cpus']} CPUs ({h['cpu_model']}), kernel {h['kernel']}, "
               f"load {h['loadavg_before']} before, {h['loadavg_after']} after")
    out.append(f"- berth {meta['berth']['version']} ({meta['berth']['git']}), "
               f"squashfuse {meta['versions']['squashfuse']}")
    print("\n".join(out))
    sys.exit(1 if failed or disagree else 0)


if __name__ == "__main__":
    main()
