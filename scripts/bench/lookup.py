"""Prompt lookup against plain decoding on the same model, same prompts.

Usage: python3 scripts/bench/lookup.py [--rounds R] [--max-tokens N] [--only PREFIX] [MODEL]

For each prompt in scripts/bench/lookup-prompts/ (copy-*: answers that copy
from the prompt; prose-*: free prose), runs `headroom generate --temp 0
--json` R times with `--speculative none` and R times with `lookup`,
alternating which goes first, and prints the median decode tok/s of each,
their ratio, the median of the per-round ratios (each lookup run over the
plain run beside it), the acceptance rate, the tokens per forward pass, and whether
the two answers are token-identical (greedy: they must be). Decode tok/s is
generated tokens over decode time in both modes (headroom_core::stats).
MODEL defaults to the app's default model. HEADROOM=path picks the binary.
"""

import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
PROMPTS = ROOT / "scripts" / "bench" / "lookup-prompts"


def run(binary, model, prompt, mode, max_tokens):
    cmd = [binary, "generate", "--prompt-file", str(prompt), "--max-tokens", str(max_tokens),
           "--temp", "0", "--speculative", mode, "--json"]
    if model:
        cmd.insert(2, model)
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    return json.loads(out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model", nargs="?")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--only", default="", help="only the prompts whose name starts with this (e.g. copy-)")
    args = ap.parse_args()
    binary = os.environ.get("HEADROOM", str(ROOT / "target" / "debug" / "headroom"))
    rows = []
    for prompt in sorted(PROMPTS.glob(f"{args.only}*.txt")):
        tps = {"none": [], "lookup": []}
        ids = {}
        spec = []
        for r in range(args.rounds):
            order = ["none", "lookup"] if r % 2 == 0 else ["lookup", "none"]
            for mode in order:
                d = run(binary, args.model, prompt, mode, args.max_tokens)
                tps[mode].append(d["stats"]["decode_tps"])
                ids.setdefault(mode, d["token_ids"])
                if ids[mode] != d["token_ids"]:
                    sys.exit(f"{prompt.name}: {mode} is not repeatable")
                if mode == "lookup":
                    spec.append(d["stats"]["speculative"])
                tokens = d["stats"]["generated_tokens"]
        plain, look = statistics.median(tps["none"]), statistics.median(tps["lookup"])
        acc = statistics.median(s["acceptance"] or 0.0 for s in spec)
        tpp = statistics.median(s["tokens_per_pass"] or 0.0 for s in spec)
        same = ids["none"] == ids["lookup"]
        # Each lookup run against the plain run beside it: steadier than
        # the ratio of the medians when the machine's speed drifts.
        paired = statistics.median(l / p for p, l in zip(tps["none"], tps["lookup"]))
        rows.append((prompt.stem, tokens, plain, look, look / plain, paired, acc, tpp, same))
        print(f"{prompt.stem}: plain {tps['none']} lookup {tps['lookup']}", file=sys.stderr)
    print(f"rounds {args.rounds}, up to {args.max_tokens} tokens, greedy, batch 1; median decode tok/s")
    print("| prompt | tokens | plain tok/s | lookup tok/s | ratio | per-round ratio | accepted | tok/pass | identical |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---|")
    for name, n, p, l, ratio, paired, acc, tpp, same in rows:
        print(f"| {name} | {n} | {p:.2f} | {l:.2f} | {ratio:.2f}× | {paired:.2f}× | {acc:.0%} | {tpp:.2f} | "
              f"{'yes' if same else 'NO'} |")
    if not all(r[-1] for r in rows):
        sys.exit("lookup changed a greedy answer")


if __name__ == "__main__":
    main()
