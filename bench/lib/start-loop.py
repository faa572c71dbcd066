#!/usr/bin/env python3
"""Time container starts, all tools interleaved (run by bench/start.sh as
the unprivileged user).

    start-loop.py SPEC.json OUT.tsv

SPEC.json:
    {"runs": N, "warmup": W, "cwd": DIR, "log_dir": DIR,
     "commands": [{"tool": T, "case": C, "argv": [...], "env": {...}}, ...]}

Each round runs every command once. The order rotates by one from round to
round, so slow drift in the neighbours' load hits every command alike, and
no command always follows the same one. W warm-up rounds come first and are
flagged as such.

A start is timed from just before posix_spawn to the return of waitpid, with
a monotonic clock; stdin and stdout are /dev/null, stderr is appended to
LOG_DIR/TOOL-CASE.log. argv[0] is resolved on PATH before the first round
(timed_starts.py, installed beside this script).

OUT.tsv rows: round  position  tool  case  status  milliseconds
where round is a number or "warmup-N" and status is "ok", "exit-N" or
"signal-N".

With "watch": PATH in SPEC, OUT.tsv.watch gets "round<TAB>content of PATH"
after every round (start.sh watches berth's keeper pid file, to tell
whether one keeper served every start).
"""

import json
import os
import sys

from timed_starts import prepare, timed_start


def main():
    spec_path, out_path = sys.argv[1:3]
    with open(spec_path, encoding="utf-8") as f:
        spec = json.load(f)
    os.chdir(spec.get("cwd", "/"))
    devnull = os.open(os.devnull, os.O_RDWR)

    commands = []
    for c in spec["commands"]:
        log = os.path.join(spec["log_dir"], f"{c['tool']}-{c['case']}.log")
        commands.append((c, *prepare(c, log, devnull, "start-loop.py")))

    n = len(commands)
    total = spec["warmup"] + spec["runs"]
    watch = spec.get("watch")
    with open(out_path, "w", encoding="utf-8") as out, \
            open(out_path + ".watch", "w", encoding="utf-8") as watched:
        for r in range(total):
            warm = r < spec["warmup"]
            label = f"warmup-{r + 1}" if warm else str(r - spec["warmup"] + 1)
            failed = 0
            for k in range(n):
                c, exe, env, actions = commands[(r + k) % n]
                status, ms = timed_start(exe, c["argv"], env, actions)
                failed += status != "ok"
                out.write(f"{label}\t{k}\t{c['tool']}\t{c['case']}\t{status}\t{ms:.3f}\n")
            out.flush()
            if watch:
                try:
                    with open(watch, encoding="utf-8") as f:
                        seen = f.read().strip()
                except OSError:
                    seen = ""
                watched.write(f"{label}\t{seen}\n")
            print(f"start-loop.py: round {label}: {n} starts"
                  + (f", {failed} failed" if failed else ""), file=sys.stderr)


if __name__ == "__main__":
    main()
