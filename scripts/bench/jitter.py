"""The machine's own run-to-run jitter: one fixed single-threaded loop, timed
N times (default 15). Printed next to the benchmark's spread, because no
program's figures can be steadier than the machine it runs on.

Usage: jitter.py [N]
"""

import statistics
import sys
import time


def loop():
    s = 0
    for i in range(2_000_000):
        s += i * i
    return s


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 15
    times = []
    for _ in range(n):
        t = time.perf_counter()
        loop()
        times.append(time.perf_counter() - t)
    mean = statistics.fmean(times)
    print(f"machine jitter: a fixed single-threaded loop timed {n} times: "
          f"{mean * 1e3:.0f} ms ± {100 * statistics.stdev(times) / mean:.1f} % (min {min(times) * 1e3:.0f}, max {max(times) * 1e3:.0f})")


if __name__ == "__main__":
    main()
