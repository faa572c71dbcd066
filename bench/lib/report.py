#!/usr/bin/env python3
"""Summarise bench/pull.sh measurements.

    report.py RAW.tsv META.json OUT_PREFIX

RAW.tsv rows (tab-separated, written by pull.sh):
    round  position  tool  status  seconds  result_bytes  steps
where round is a number or "warmup-N" and steps is "name=s;name=s" (peer).

Writes OUT_PREFIX.csv (one row per timed command, warm-up rows flagged),
OUT_PREFIX.json (META plus runs and summary) and prints a markdown table.
Ratios berth/X are taken per round (the two were measured minutes apart at
most, under the same load), then summarised by their median.
"""

import sys

from stats import parse_round, per_round_ratios, read_json, read_rows, stats, write_csv, write_json

WHAT = {
    "berth": "berth pull -> squashfs",
    "podman": "podman pull (rootless, overlay)",
    "peer": "skopeo copy + umoci unpack --rootless + mksquashfs",
}


def read_raw(path):
    runs = []
    for fields in read_rows(path):
        rnd, pos, tool, status, secs, nbytes, steps = (fields + [""] * 7)[:7]
        rnd, warm = parse_round(rnd)
        runs.append({
            "round": rnd,
            "warmup": warm,
            "position": int(pos),
            "tool": tool,
            "status": status,
            "seconds": float(secs) if secs else None,
            "result_bytes": int(nbytes) if nbytes.strip().isdigit() else None,
            "steps": {k: float(v) for k, v in
                      (kv.split("=", 1) for kv in steps.split(";") if "=" in kv)},
        })
    return runs


def summarise(runs, tools):
    timed = [r for r in runs if not r["warmup"]]
    summary = {"tools": {}, "peer_steps": {}, "ratios": {}}
    for tool in tools:
        mine = [r for r in timed if r["tool"] == tool]
        ok = [r["seconds"] for r in mine if r["status"] == "ok"]
        s = stats(ok, 3) or {"n": 0}
        s["failures"] = len(mine) - len(ok)
        sizes = [r["result_bytes"] for r in mine if r["result_bytes"]]
        s["result_bytes"] = sizes[-1] if sizes else None
        summary["tools"][tool] = s
    peer_ok = [r for r in timed if r["tool"] == "peer" and r["status"] == "ok"]
    for step in ("skopeo", "umoci", "mksquashfs"):
        summary["peer_steps"][step] = stats([r["steps"][step] for r in peer_ok if step in r["steps"]], 3)

    # Ratios pair by pair: berth and a peer from the same round.
    by_round = {}
    for r in timed:
        if r["status"] == "ok":
            by_round.setdefault(r["round"], {})[r["tool"]] = r["seconds"]
    if "berth" in tools:
        for peer in (t for t in tools if t != "berth"):
            per_round = [
                {"round": rnd, "ratio": round(ratio, 4)}
                for rnd, ratio in per_round_ratios(
                    {rnd: t["berth"] for rnd, t in by_round.items() if "berth" in t},
                    {rnd: t[peer] for rnd, t in by_round.items() if peer in t})
            ]
            s = stats([p["ratio"] for p in per_round], 3) or {"n": 0}
            s["per_round"] = per_round
            summary["ratios"][f"berth/{peer}"] = s
    return summary


def fmt(x, digits=2):
    return "n/a" if x is None else f"{x:.{digits}f}"


def markdown(meta, summary, tools):
    img = meta["image"]
    out = []
    out.append(f"### Pull to runnable: `{img['ref']}`")
    out.append("")
    out.append(
        f"{img['layers']} gzip layer(s), {img['compressed_bytes'] / 1e6:.1f} MB compressed, "
        f"{img['rootfs_bytes'] / 1e6:.1f} MB / {img['rootfs_entries']} entries unpacked; "
        f"{meta['runs']} round(s) after {meta['warmup']} warm-up, tools rotated each round; "
        f"{meta['host']['cpus']} CPUs, load {meta['host']['loadavg_before']} -> "
        f"{meta['host']['loadavg_after']}."
    )
    out.append("")
    out.append("| tool | result | median s | min s | max s | ok/runs | result MB |")
    out.append("|---|---|---:|---:|---:|---:|---:|")
    for tool in tools:
        s = summary["tools"][tool]
        n_ok = s.get("n", 0)
        size = s.get("result_bytes")
        out.append(
            f"| {tool} | {WHAT[tool]} | {fmt(s.get('median'))} | {fmt(s.get('min'))} | "
            f"{fmt(s.get('max'))} | {n_ok}/{n_ok + s['failures']} | "
            f"{'n/a' if not size else f'{size / 1e6:.1f}'} |"
        )
    if summary["ratios"]:
        out.append("")
        out.append("| ratio (per round, then median) | median | min | max | rounds |")
        out.append("|---|---:|---:|---:|---:|")
        for name, s in summary["ratios"].items():
            out.append(f"| {name} | {fmt(s.get('median'), 3)} | {fmt(s.get('min'), 3)} | "
                       f"{fmt(s.get('max'), 3)} | {s['n']} |")
    steps = summary["peer_steps"]
    if any(steps.values()):
        out.append("")
        out.append("peer steps, median s: " + ", ".join(
            f"{k} {fmt(v['median'])}" for k, v in steps.items() if v))
    out.append("")
    out.append(
        f"squashfs written: berth {meta['berth']['squashfs_written']} "
        f"({meta['berth']['squashfs_setting']}); peer {meta['peer']['squashfs_written']} "
        f"(mksquashfs {meta['peer']['mksquashfs_args']}). podman storage: {meta['podman_storage']}."
    )
    out.append(f"berth {meta['berth']['version']} (git {meta['berth']['git']}); "
               f"{meta['versions']['podman']}; {meta['versions']['skopeo']}; "
               f"{meta['versions']['umoci']}; {meta['versions']['mksquashfs']}.")
    return "\n".join(out)


def main():
    raw, meta_path, prefix = sys.argv[1:4]
    runs = read_raw(raw)
    meta = read_json(meta_path)
    tools = meta["tools"]
    summary = summarise(runs, tools)

    write_csv(prefix + ".csv",
              ["time_utc", "round", "warmup", "position", "tool", "status", "seconds",
               "result_bytes", "skopeo_s", "umoci_s", "mksquashfs_s"],
              ([meta["time_utc"], r["round"], int(r["warmup"]), r["position"], r["tool"],
                r["status"], r["seconds"], r["result_bytes"] or "",
                *(r["steps"].get(k, "") for k in ("skopeo", "umoci", "mksquashfs"))]
               for r in runs))

    doc = dict(meta)
    doc["summary"] = summary
    doc["runs_detail"] = runs
    write_json(prefix + ".json", doc)

    print(markdown(meta, summary, tools))


if __name__ == "__main__":
    main()
