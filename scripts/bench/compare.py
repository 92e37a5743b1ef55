"""Side by side: mlx_lm.benchmark's trials vs `headroom bench --json` runs.

Usage: compare.py DIR P N KERNEL  (DIR holds mlx-*.log and
headroom-KERNEL-*.json from compare-mlx-lm.sh). Figures are put on mlx-lm's definitions so the ratio
compares like with like:

- TTFT: mlx-lm's prompt_time = P / prompt_tps (request to first token, the
  prefill and the first sample); headroom's ttft_ms is the same span.
- decode tok/s: mlx-lm's generation_tps = N / (last token - first token)
  (it counts the first token in the numerator but not in the time);
  headroom's own decode_tps is (N - 1) / (same span), so here headroom's is
  recomputed as N / (last_token_ms - first_token_ms). Its own figure is
  printed too.
- end to end: mlx-lm's total_time of a trial vs headroom's last_token_ms.
"""

import glob
import json
import re
import statistics
import sys

TRIAL = re.compile(
    r"Trial \d+:\s+prompt_tps=([\d.]+), generation_tps=([\d.]+), peak_memory=([\d.]+), total_time=([\d.]+)"
)


def mean_sd(values):
    if not values:
        return float("nan"), float("nan")
    sd = statistics.stdev(values) if len(values) > 1 else 0.0
    return statistics.fmean(values), sd


def main():
    folder, p, n, kernel = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    mlx = {"ttft_ms": [], "decode_tps": [], "e2e_s": []}
    for log in sorted(glob.glob(f"{folder}/mlx-*.log")):
        for m in TRIAL.finditer(open(log).read()):
            prompt_tps, gen_tps, _peak, total = map(float, m.groups())
            mlx["ttft_ms"].append(1e3 * p / prompt_tps)
            mlx["decode_tps"].append(gen_tps)
            mlx["e2e_s"].append(total)
    hr = {"ttft_ms": [], "decode_tps": [], "e2e_s": [], "own_decode_tps": []}
    for path in sorted(glob.glob(f"{folder}/headroom-{kernel}-*.json")):
        report = json.load(open(path))
        for depth in report["depths"]:
            for run in depth["runs"]:
                span_s = (run["last_token_ms"] - run["first_token_ms"]) / 1e3
                hr["ttft_ms"].append(run["ttft_ms"])
                hr["decode_tps"].append(run["generated_tokens"] / span_s)
                hr["own_decode_tps"].append(run["decode_tps"])
                hr["e2e_s"].append(run["last_token_ms"] / 1e3)
    if not mlx["decode_tps"] or not hr["decode_tps"]:
        sys.exit(f"compare.py: no trials found in {folder} (mlx-lm: {len(mlx['decode_tps'])}, headroom: {len(hr['decode_tps'])})")

    print(f"p={p} n={n} batch 1; mlx-lm trials: {len(mlx['decode_tps'])}, headroom runs: {len(hr['decode_tps'])}")
    print(f"{'figure':<30}{'mlx-lm mean ± sd':>20}{'headroom mean ± sd':>22}{'ratio':>8}{'median ratio':>14}")
    rows = [
        ("TTFT ms (lower is better)", "ttft_ms", 1),
        ("decode tok/s, N/(last-first)", "decode_tps", 2),
        ("end to end s (lower better)", "e2e_s", 3),
    ]
    # The median ratio resists the outliers a busy machine produces.
    for label, key, digits in rows:
        (m, msd), (h, hsd) = mean_sd(mlx[key]), mean_sd(hr[key])
        med = statistics.median(hr[key]) / statistics.median(mlx[key])
        print(f"{label:<30}{m:>12.{digits}f} ± {msd:<7.{digits}f}{h:>12.{digits}f} ± {hsd:<9.{digits}f}{h / m:>6.3f}{med:>14.3f}")
    own, own_sd = mean_sd(hr["own_decode_tps"])
    d_m, d_sd = mean_sd(hr["decode_tps"])
    m_m, m_sd = mean_sd(mlx["decode_tps"])
    print(f"headroom decode tok/s on its own definition ((N-1)/(last-first)): {own:.2f} ± {own_sd:.2f}")
    print(f"spread of decode tok/s (sd/mean): headroom {100 * d_sd / d_m:.1f} %, mlx-lm {100 * m_sd / m_m:.1f} %")


if __name__ == "__main__":
    main()
