#!/usr/bin/env bash
# Never prefill the same tokens twice, measured: an 8-turn conversation
# (about 150 new tokens a turn, the whole history resent each time,
# streamed) through `headroom serve` and `mlx_lm.server` (mlx-lm 0.32.2, on
# the same libmlx) on the same demo model in the same run, then through
# `headroom chat`, one process per turn (its prompt cache starts empty every
# time; the chat's KV state on disk carries it). Prints TTFT per turn with
# the cached tokens each server reported, and the two goals.
#
#   scripts/bench/conversation.sh [--preset small] [--bits 4] [--turns 8] [--words 40] [--max-tokens 24] [--rounds 2]
#
# The comparison (headroom --kernel fused vs mlx_lm.server) runs --rounds
# times, the order swapped each round so drift in the machine's load hits
# both alike; each turn's TTFT is the mean over the rounds.
#
# `headroom serve --kernel fused` is compared with mlx_lm.server (the same
# quantized matmul); `--kernel auto` (on the CPU backend, prompt chunks
# through BLAS) runs too, for information. Needs scripts/setup.sh done and
# `cargo build -p headroom` (HEADROOM=path for another binary). Servers bind
# 127.0.0.1 on free ports and are stopped at the end, whatever happens.
set -euo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
preset=small bits=4 turns=8 words=40 max=24 rounds=2
while [ $# -gt 0 ]; do
  case "$1" in
    --preset) preset=$2; shift 2 ;;
    --bits) bits=$2; shift 2 ;;
    --turns) turns=$2; shift 2 ;;
    --words) words=$2; shift 2 ;;
    --max-tokens) max=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    *) echo "conversation.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
headroom=${HEADROOM:-$root/target/debug/headroom}
python=$root/.deps/venv/bin/python
[ -x "$headroom" ] || { echo "conversation.sh: no $headroom: run cargo build -p headroom" >&2; exit 1; }
[ -x "$python" ] || { echo "conversation.sh: no $python: run scripts/setup.sh" >&2; exit 1; }
drive() { python3 "$root/scripts/bench/conversation.py" "$@" --turns "$turns" --words "$words" --max-tokens "$max"; }

model=$root/target/bench-models/$preset-q$bits
[ -f "$model/config.json" ] || "$headroom" demo-model "$model" --preset "$preset" --bits "$bits" >&2
out=$(mktemp -d "${TMPDIR:-/tmp}/headroom-conversation.XXXXXX")
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

# $1: kernel, $2: result file.
run_headroom_serve() {
  local log=$out/serve-$1
  HEADROOM_DATA_DIR=$out/data-serve-$1 "$headroom" serve --port 0 --model "$model" --kernel "$1" >"$log.out" 2>"$log.err" &
  local pid=$!
  pids+=("$pid")
  for _ in $(seq 600); do [ -s "$log.out" ] && break; kill -0 "$pid" 2>/dev/null || { cat "$log.err" >&2; exit 1; }; sleep 0.1; done
  local url id
  url=$(head -n1 "$log.out")
  id=$(python3 -c 'import json, sys, urllib.request; print(json.load(urllib.request.urlopen(sys.argv[1] + "/models"))["data"][0]["id"])' "$url")
  drive serve --name "headroom serve ($1)" --url "$url" --model "$id" --out "$2"
  kill "$pid"; wait "$pid" 2>/dev/null || true
}

run_mlx_server() {
  local port
  port=$(free_port)
  "$python" -m mlx_lm.server --host 127.0.0.1 --port "$port" --model "$model" >"$out/mlx.log" 2>&1 &
  local pid=$!
  pids+=("$pid")
  for _ in $(seq 600); do
    python3 -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1])' "http://127.0.0.1:$port/health" 2>/dev/null && break
    kill -0 "$pid" 2>/dev/null || { cat "$out/mlx.log" >&2; exit 1; }
    sleep 0.2
  done
  drive serve --name "mlx_lm.server" --url "http://127.0.0.1:$port/v1" --model default_model --out "$1"
  kill "$pid"; wait "$pid" 2>/dev/null || true
}

started=$(date +%s)
echo "model: $model ($preset, $bits-bit); $turns turns of about $words words each, history resent, max $max new tokens" >&2
for r in $(seq 1 "$rounds"); do
  echo "round $r/$rounds" >&2
  if [ $((r % 2)) = 1 ]; then
    run_headroom_serve fused "$out/serve-fused-$r.json"; run_mlx_server "$out/mlx-$r.json"
  else
    run_mlx_server "$out/mlx-$r.json"; run_headroom_serve fused "$out/serve-fused-$r.json"
  fi
done
run_headroom_serve auto "$out/serve-auto.json"
drive chat --name "headroom chat (fused)" --headroom "$headroom" --model "$model" --data "$out/data-chat" --kernel fused --out "$out/chat.json"

echo
echo "model: $model ($preset, $bits-bit); $(date -u +%Y-%m-%dT%H:%MZ); $(nproc) cores"
python3 "$root/scripts/bench/conversation.py" report "$out"/serve-fused-*.json "$out"/mlx-*.json "$out/serve-auto.json" "$out/chat.json" \
  --goal-a "headroom serve (fused)" --goal-b "mlx_lm.server"
echo "took $(( $(date +%s) - started )) s; logs in $out"
