#!/usr/bin/env python3
"""Time berth's first starts on a node: no keeper runs (run by
bench/start.sh as the unprivileged user, after the warm rounds).

    start-cold.py SPEC.json KEEPER_DIR PROFILE ROUNDS OUT.tsv [IMAGE_FILE]

Each round, for each berth command of SPEC (one per case) and each of two
variants, the image's keeper is stopped (SIGTERM to its processes; its
squashfs server then writes the image's read profile and leaves; both are
waited for), IMAGE_FILE (the image's squashfs file) is read whole, so
that each start finds it in the page cache as the warm rounds do (this
machine's kernel reclaims pages idle for a while), 0.3 s pass, and one
start is timed as start-loop.py times them (timed_starts.py, installed
beside this script):

    no-profile  the image's read profile (PROFILE) removed first: no
                profile, as on a node that never ran the image (but with
                the image file in the page cache)
    profile     the profile the no-profile start just before left

The keeper of the last start is left running (start.sh's --timing starts
come next and are warm ones).

OUT.tsv rows: round  case  variant  status  milliseconds
"""

import json
import os
import signal
import sys
import time

from timed_starts import prepare, timed_start


def scan(name, keep):
    """The processes whose /proc/PID/NAME, read whole, KEEP accepts
    (processes gone or unreadable are skipped)."""
    out = []
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            with open(f"/proc/{p}/{name}", "rb") as f:
                data = f.read()
        except OSError:
            continue
        if keep(data):
            out.append(int(p))
    return out


def keeper_pids(keeper_dir):
    """The keeper's processes (its forked helpers share its command line)."""
    prefix = b"berth\0__keeper\0" + os.fsencode(keeper_dir) + b"\0"
    return scan("cmdline", lambda cmdline: cmdline.startswith(prefix))


def parent(stat):
    """The parent pid in a /proc/PID/stat line; None if it cannot be read."""
    try:
        return int(stat.rsplit(b")", 1)[1].split()[1])
    except (ValueError, IndexError):
        return None


def children(pids):
    """The processes whose parent is one of PIDS (the keeper's squashfs
    server runs as other ids, but its stat is readable)."""
    return scan("stat", lambda stat: parent(stat) in pids)


def alive(pid):
    return os.path.exists(f"/proc/{pid}")


def stop_keeper(keeper_dir):
    """Stops the keeper and waits until it and its children (the squashfs
    server, which writes the read profile as it leaves) are gone."""
    pids = keeper_pids(keeper_dir)
    waited = pids + children(pids)
    for p in pids:
        try:
            os.kill(p, signal.SIGTERM)
        except OSError:
            pass
    deadline = time.monotonic() + 10
    while any(alive(p) for p in waited) or keeper_pids(keeper_dir):
        if time.monotonic() > deadline:
            sys.exit(f"start-cold.py: the keeper of {keeper_dir} did not stop")
        time.sleep(0.02)


def main():
    spec_path, keeper_dir, profile, rounds, out_path = sys.argv[1:6]
    image_file = sys.argv[6] if len(sys.argv) > 6 else None
    with open(spec_path, encoding="utf-8") as f:
        spec = json.load(f)
    os.chdir(spec.get("cwd", "/"))
    devnull = os.open(os.devnull, os.O_RDWR)
    commands = [(c, *prepare(c, os.path.join(spec["log_dir"], f"berth-cold-{c['case']}.log"),
                             devnull, "start-cold.py"))
                for c in spec["commands"] if c["tool"] == "berth"]
    with open(out_path, "w", encoding="utf-8") as out:
        for rnd in range(1, int(rounds) + 1):
            for c, exe, env, actions in commands:
                for variant in ("no-profile", "profile"):
                    stop_keeper(keeper_dir)
                    if image_file:
                        with open(image_file, "rb") as f:
                            while f.read(1 << 20):
                                pass
                    time.sleep(0.3)
                    if variant == "no-profile":
                        try:
                            os.unlink(profile)
                        except FileNotFoundError:
                            pass
                    status, ms = timed_start(exe, c["argv"], env, actions)
                    out.write(f"{rnd}\t{c['case']}\t{variant}\t{status}\t{ms:.3f}\n")
                    out.flush()


if __name__ == "__main__":
    main()
