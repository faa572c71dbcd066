"""One timed container start, shared by start-loop.py and start-cold.py
(installed beside them): the command made ready once, then each start
timed from just before posix_spawn to the return of waitpid, with a
monotonic clock; stdin and stdout /dev/null, stderr appended to a log."""

import os
import shutil
import sys
import time


def prepare(command, log_path, devnull, who):
    """(exe, env, file actions) for COMMAND ({"argv": [...], "env": {...}}):
    argv[0] resolved on PATH (WHO exits saying so where it is not), the
    caller's environment with COMMAND's over it, stderr to LOG_PATH."""
    exe = shutil.which(command["argv"][0])
    if exe is None:
        sys.exit(f"{who}: {command['argv'][0]}: not found on PATH")
    env = dict(os.environ)
    env.update(command.get("env", {}))
    log = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    actions = [(os.POSIX_SPAWN_DUP2, devnull, 0),
               (os.POSIX_SPAWN_DUP2, devnull, 1),
               (os.POSIX_SPAWN_DUP2, log, 2)]
    return exe, env, actions


def timed_start(exe, argv, env, actions):
    """Runs one start; ("ok" | "exit-N" | "signal-N", milliseconds)."""
    t0 = time.perf_counter_ns()
    pid = os.posix_spawn(exe, argv, env, file_actions=actions)
    _, wstatus = os.waitpid(pid, 0)
    ms = (time.perf_counter_ns() - t0) / 1e6
    code = os.waitstatus_to_exitcode(wstatus)
    status = "ok" if code == 0 else (f"exit-{code}" if code > 0 else f"signal-{-code}")
    return status, ms
