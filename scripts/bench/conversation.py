#!/usr/bin/env python3
"""An 8-turn conversation, the whole history resent every turn and streamed,
as every chat client does, through OpenAI-compatible servers (and through
`headroom chat`, one process per turn); prints each turn's TTFT and how many
prompt tokens the server said it had cached.

Used by scripts/bench/conversation.sh, which starts the servers. Standard
library only, so it runs with any Python 3.

  conversation.py serve  --name NAME --url URL --model ID [--turns 8] [--words 40] [--max-tokens 24] --out FILE
  conversation.py chat   --headroom BIN --model DIR --data DIR [...] --out FILE
  conversation.py report FILE...
"""

import argparse
import http.client
import json
import os
import statistics
import subprocess
import sys
import time
import urllib.parse

# A fixed, varied vocabulary: each turn's message is new text of about the
# same length (the demo tokenizer makes ~1.4 tokens of a word here).
WORDS = (
    "memory bandwidth cache prefill decode token model layer weight budget swap pressure window state "
    "expert router context prompt answer session restart disk tier buffer quantized float kernel matrix "
    "apple silicon laptop unified metal compute shader graph lazy array evaluation stream thread engine"
).split()


def message(turn, words):
    # Deterministic but different every turn (a stride through WORDS).
    picked = [WORDS[(turn * 7 + i * (turn + 3)) % len(WORDS)] for i in range(words)]
    return f"Question {turn + 1}: " + " ".join(picked) + "?"


def stream_turn(base, model, messages, max_tokens):
    """One streamed request: (ttft seconds, text, usage)."""
    url = urllib.parse.urlparse(base)
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=900)
    body = json.dumps(
        {
            "model": model,
            "messages": messages,
            "stream": True,
            "stream_options": {"include_usage": True},
            "max_tokens": max_tokens,
            "temperature": 0,
        }
    )
    started = time.perf_counter()
    conn.request("POST", url.path.rstrip("/") + "/chat/completions", body, {"Content-Type": "application/json"})
    resp = conn.getresponse()
    if resp.status != 200:
        raise SystemExit(f"{base}: HTTP {resp.status}: {resp.read()[:500]!r}")
    ttft, text, usage = None, [], None
    for raw in resp:
        line = raw.decode("utf-8", "replace").strip()
        if not line.startswith("data: "):
            continue
        data = line[len("data: ") :]
        if data == "[DONE]":
            break
        chunk = json.loads(data)
        if chunk.get("usage"):
            usage = chunk["usage"]
        for choice in chunk.get("choices") or []:
            piece = (choice.get("delta") or {}).get("content")
            if piece:
                if ttft is None:
                    ttft = time.perf_counter() - started
                text.append(piece)
    conn.close()
    return ttft, "".join(text), usage or {}


def serve(args):
    messages, rows = [], []
    for turn in range(args.turns):
        messages.append({"role": "user", "content": message(turn, args.words)})
        ttft, text, usage = stream_turn(args.url, args.model, messages, args.max_tokens)
        cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens")
        rows.append({"turn": turn + 1, "ttft_ms": None if ttft is None else ttft * 1000,
                     "prompt_tokens": usage.get("prompt_tokens"), "cached_tokens": cached})
        print(f"{args.name}: turn {turn + 1}: ttft {rows[-1]['ttft_ms']:.0f} ms, "
              f"prompt {usage.get('prompt_tokens')}, cached {cached}", file=sys.stderr)
        messages.append({"role": "assistant", "content": text})
    json.dump({"name": args.name, "rows": rows}, open(args.out, "w"))


def chat(args):
    rows = []
    for turn in range(args.turns):
        cmd = [args.headroom, "chat", args.model, "--session", "bench", "--message", message(turn, args.words),
               "--max-tokens", str(args.max_tokens), "--temp", "0", "--route", "local", "--json"]
        if args.kernel:
            cmd += ["--kernel", args.kernel]
        out = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "HEADROOM_DATA_DIR": args.data})
        if out.returncode != 0:
            raise SystemExit(f"headroom chat failed: {out.stderr}")
        stats = json.loads(out.stdout.strip().splitlines()[-1])["stats"]
        rows.append({"turn": turn + 1, "ttft_ms": stats.get("ttftMs"), "prompt_tokens": stats.get("promptTokens"),
                     "cached_tokens": stats.get("reusedTokens")})
        print(f"{args.name}: turn {turn + 1}: ttft {stats.get('ttftMs'):.0f} ms, prompt {stats.get('promptTokens')}, "
              f"reused {stats.get('reusedTokens')}", file=sys.stderr)
    json.dump({"name": args.name, "rows": rows}, open(args.out, "w"))


def merged(files):
    """Runs by name, in first-seen order; rounds of one name averaged turn by turn."""
    by_name = {}
    for f in files:
        run = json.load(open(f))
        by_name.setdefault(run["name"], []).append(run["rows"])
    runs = []
    for name, rounds in by_name.items():
        rows = []
        for t in range(min(len(r) for r in rounds)):
            ttfts = [r[t]["ttft_ms"] for r in rounds if r[t]["ttft_ms"] is not None]
            rows.append({**rounds[0][t], "ttft_ms": statistics.mean(ttfts) if ttfts else None})
        label = name if len(rounds) == 1 else f"{name} x{len(rounds)}"
        runs.append({"name": name, "label": label, "rows": rows})
    return runs


def report(args):
    runs = merged(args.files)
    names = [r["name"] for r in runs]
    turns = max(len(r["rows"]) for r in runs)
    print("TTFT per turn in ms (cached / prompt tokens), the whole history resent each turn; xN: mean of N rounds:")
    print("turn  " + "".join(f"{r['label']:>34}" for r in runs))
    for t in range(turns):
        cells = []
        for r in runs:
            row = r["rows"][t] if t < len(r["rows"]) else None
            cells.append("" if row is None or row["ttft_ms"] is None
                         else f"{row['ttft_ms']:9.0f} ({row['cached_tokens']}/{row['prompt_tokens']})")
        print(f"{t + 1:>4}  " + "".join(f"{c:>34}" for c in cells))
    print()
    means = {}
    for r in runs:
        ttfts = [row["ttft_ms"] for row in r["rows"][1:] if row["ttft_ms"] is not None]
        means[r["name"]] = statistics.mean(ttfts) if ttfts else None
        first, last = r["rows"][1]["ttft_ms"], r["rows"][-1]["ttft_ms"]
        print(f"{r['name']}: mean TTFT over turns 2-{len(r['rows'])} {means[r['name']]:.0f} ms; "
              f"turn {len(r['rows'])} / turn 2 = {last / first:.2f}")
    if args.goal_a and args.goal_b:
        a, b = runs[names.index(args.goal_a)], runs[names.index(args.goal_b)]
        flat = a["rows"][-1]["ttft_ms"] / a["rows"][1]["ttft_ms"]
        ratio = means[args.goal_a] / means[args.goal_b]
        print()
        print(f"goal: {args.goal_a} turn 8 within 1.5x of turn 2: {flat:.2f}x -> {'met' if flat <= 1.5 else 'NOT met'}")
        print(f"goal: {args.goal_a} mean TTFT (turns 2-8) no slower than {args.goal_b}: "
              f"{ratio:.2f}x -> {'met' if ratio <= 1.0 else 'NOT met'}")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    for name in ("serve", "chat"):
        s = sub.add_parser(name)
        s.add_argument("--name", required=True)
        s.add_argument("--model", required=True)
        s.add_argument("--turns", type=int, default=8)
        s.add_argument("--words", type=int, default=40)
        s.add_argument("--max-tokens", type=int, default=24)
        s.add_argument("--out", required=True)
        if name == "serve":
            s.add_argument("--url", required=True)
        else:
            s.add_argument("--headroom", required=True)
            s.add_argument("--data", required=True)
            s.add_argument("--kernel")
    r = sub.add_parser("report")
    r.add_argument("files", nargs="+")
    r.add_argument("--goal-a")
    r.add_argument("--goal-b")
    args = p.parse_args()
    {"serve": serve, "chat": chat, "report": report}[args.cmd](args)


if __name__ == "__main__":
    main()
