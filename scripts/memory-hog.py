#!/usr/bin/env python3
# The one bounded memory hog of Headroom's end-to-end checks
# (scripts/slowdown-hog.sh, scripts/away-hog.sh): allocates resident memory
# in steps until PSI reaches the warning level (`some avg10 >= 10`, the
# threshold of headroom-memory's psi module) or a fixed ceiling, holds it
# HOLD seconds, and exits.
#
#   memory-hog.py CEILING_MB FLOOR_MB STEP_MB [HOLD_S]    (HOLD_S default 6)
#
# Safety: at most CEILING_MB; MemAvailable is checked before every step and
# a step that would leave less than FLOOR_MB is not taken; the OOM killer
# takes it first (oom_score_adj 1000); it lives at most 90 s plus HOLD_S.
# The calling script adds `ulimit -v` and kills it when it exits.
import sys, time

ceiling, floor, step = (int(a) << 20 for a in sys.argv[1:4])
hold = int(sys.argv[4]) if len(sys.argv) > 4 else 6
deadline = time.time() + 90

def mem_available():
    for line in open("/proc/meminfo"):
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) << 10
    return 0

def psi():
    try:
        some = open("/proc/pressure/memory").readline()
        return float(some.split("avg10=")[1].split()[0])
    except (OSError, IndexError, ValueError):
        return -1.0

with open("/proc/self/oom_score_adj", "w") as f:
    f.write("1000")  # if anything must die, it is this
blocks, total, t0 = [], 0, time.time()
log = lambda msg: print(f"hog {time.time() - t0:5.1f} s  {msg}", flush=True)
log(f"start: MemAvailable {mem_available() >> 20} MB, PSI some avg10 {psi():.2f}")
while total + step <= ceiling and time.time() < deadline:
    avail = mem_available()
    if avail - step < floor:
        log(f"stop: another step would leave MemAvailable under {floor >> 20} MB ({avail >> 20} MB now)")
        break
    block = bytearray(step)
    block[::4096] = b"\x01" * len(range(0, step, 4096))  # touch every page: resident
    blocks.append(block)
    total += step
    level = psi()
    log(f"holding {total >> 20} MB, MemAvailable {mem_available() >> 20} MB, PSI some avg10 {level:.2f}")
    if level >= 10:
        log("stop: PSI reached the warning level")
        break
    time.sleep(0.2)
else:
    log(f"stop: ceiling {ceiling >> 20} MB reached" if total + step > ceiling else "stop: time limit")
for _ in range(hold):
    time.sleep(1)
    log(f"holding {total >> 20} MB, MemAvailable {mem_available() >> 20} MB, PSI some avg10 {psi():.2f}")
log("exit: memory returned")
