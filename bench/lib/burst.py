#!/usr/bin/env python3
"""Start N copies of a command at once and time them until the last one
ends (run by bench/ranks.sh as the unprivileged user, like N MPI ranks
starting on one node).

    burst.py N LOG -- ARGV...

The N copies are spawned back to back with posix_spawn (stdin and stdout
/dev/null, stderr appended to LOG), then reaped as they end. Times are taken
with a monotonic clock from just before the first spawn. argv[0] is
resolved on PATH before the clock starts. Prints one JSON object:

    {"ranks": N, "wall_ms": until the last one ended,
     "spawn_ms": until the last one was spawned,
     "first_ms": until the first one ended,
     "rank_ms": {"median": .., "max": ..}   (each rank: its spawn to its end),
     "failed": how many exited non-zero, "statuses": {"ok": n, "exit-1": n}}

Exit status 1 if any copy failed.
"""

import json
import os
import shutil
import statistics
import sys
import time


def main():
    n = int(sys.argv[1])
    log_path = sys.argv[2]
    if sys.argv[3] != "--" or len(sys.argv) < 5:
        sys.exit("usage: burst.py N LOG -- ARGV...")
    argv = sys.argv[4:]
    exe = shutil.which(argv[0])
    if exe is None:
        sys.exit(f"burst.py: {argv[0]}: not found on PATH")
    devnull = os.open(os.devnull, os.O_RDWR)
    log = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    actions = [(os.POSIX_SPAWN_DUP2, devnull, 0),
               (os.POSIX_SPAWN_DUP2, devnull, 1),
               (os.POSIX_SPAWN_DUP2, log, 2)]
    env = dict(os.environ)

    started = {}
    t0 = time.perf_counter_ns()
    for _ in range(n):
        pid = os.posix_spawn(exe, argv, env, file_actions=actions)
        started[pid] = time.perf_counter_ns()
    t_spawned = time.perf_counter_ns()
    ends = []
    statuses = {}
    while started:
        pid, wstatus = os.wait()
        t = time.perf_counter_ns()
        if pid not in started:
            continue
        ends.append((t - t0, t - started.pop(pid)))
        code = os.waitstatus_to_exitcode(wstatus)
        key = "ok" if code == 0 else (f"exit-{code}" if code > 0 else f"signal-{-code}")
        statuses[key] = statuses.get(key, 0) + 1
    rank = [d / 1e6 for _, d in ends]
    failed = n - statuses.get("ok", 0)
    print(json.dumps({
        "ranks": n,
        "wall_ms": round(max(e for e, _ in ends) / 1e6, 3),
        "spawn_ms": round((t_spawned - t0) / 1e6, 3),
        "first_ms": round(min(e for e, _ in ends) / 1e6, 3),
        "rank_ms": {"median": round(statistics.median(rank), 3), "max": round(max(rank), 3)},
        "failed": failed,
        "statuses": statuses,
    }))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
