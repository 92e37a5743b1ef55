#!/usr/bin/env bash
# Runs mlx_lm.benchmark (mlx-lm 0.32.2 on the same libmlx and BLAS) and
# `headroom bench` with two kernel choices on the same demo model with the
# same shapes (p prompt tokens, n generated, batch 1, depth 0), rotating which
# goes first, K rounds of T trials each, then prints each figure side by side
# with the ratios (scripts/bench/compare.py).
#
#   scripts/bench/compare-mlx-lm.sh [--preset tiny] [--bits 4] [--float bf16|f32] [-p 512] [-n 128] [-k 3] [-t 3]
#   scripts/bench/compare-mlx-lm.sh --model DIR [-p …]   an mlx-community model folder instead of a demo model
#
# --float f32 first widens the model's float tensors to f32 (widen.py): mlx-lm
# computes in the dtype of the weights, so both sides then run f32, where MLX's
# CPU kernels are fast and the per-token work around them shows most.
#
# Needs scripts/setup.sh done and `cargo build -p headroom` (HEADROOM=path to
# use another binary, e.g. a release build). The model is written once under
# target/bench-models/ and reused.
set -euo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
preset=tiny bits=4 float=bf16 p=512 n=128 k=3 t=3 given=""
while [ $# -gt 0 ]; do
  case "$1" in
    --preset) preset=$2; shift 2 ;;
    --model) given=$2; shift 2 ;;
    --bits) bits=$2; shift 2 ;;
    --float) float=$2; shift 2 ;;
    -p) p=$2; shift 2 ;;
    -n) n=$2; shift 2 ;;
    -k) k=$2; shift 2 ;;
    -t) t=$2; shift 2 ;;
    *) echo "compare-mlx-lm.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done

headroom=${HEADROOM:-$root/target/debug/headroom}
python=$root/.deps/venv/bin/python
[ -x "$headroom" ] || { echo "compare-mlx-lm.sh: no $headroom: run cargo build -p headroom" >&2; exit 1; }
[ -x "$python" ] || { echo "compare-mlx-lm.sh: no $python: run scripts/setup.sh" >&2; exit 1; }

started=$(date +%s)
model=$root/target/bench-models/$preset-q$bits
if [ -n "$given" ]; then
  [ -f "$given/config.json" ] || { echo "compare-mlx-lm.sh: no config.json in $given" >&2; exit 2; }
  model=$given
elif [ ! -f "$model/config.json" ]; then
  "$headroom" demo-model "$model" --preset "$preset" --bits "$bits" >&2
fi
case $float in
  bf16) ;;
  f32)
    if [ ! -f "$model-f32/config.json" ]; then "$python" "$root/scripts/bench/widen.py" "$model" "$model-f32"; fi
    model=$model-f32 ;;
  *) echo "compare-mlx-lm.sh: --float is bf16 or f32, not $float" >&2; exit 2 ;;
esac
out=$(mktemp -d "${TMPDIR:-/tmp}/headroom-compare.XXXXXX")

run_mlx() {
  "$python" -m mlx_lm.benchmark --model "$model" -p "$p" -g "$n" -b 1 -n "$t" >"$out/mlx-$1.log" 2>&1 \
    || { cat "$out/mlx-$1.log" >&2; exit 1; }
}
# $1: round, $2: headroom's --kernel. `fused` is MLX's quantized_matmul for
# every shape, the kernel mlx-lm uses: the difference left is the Rust side's.
# `auto` is headroom's default for the device (on the CPU backend, prompt
# chunks are dequantized and multiplied by BLAS).
run_headroom() {
  # --bandwidth: the roofline is not compared here, so skip its measurement.
  "$headroom" bench "$model" -p "$p" -n "$n" -r "$t" -d 0 --json --no-save --bandwidth 1 --kernel "$2" \
    >"$out/headroom-$2-$1.json" 2>"$out/headroom-$2-$1.log" || { cat "$out/headroom-$2-$1.log" >&2; exit 1; }
}

for i in $(seq 1 "$k"); do
  echo "round $i/$k" >&2
  # Rotate the order so that drift in the machine's load hits all alike.
  case $((i % 3)) in
    1) run_mlx "$i"; run_headroom "$i" fused; run_headroom "$i" auto ;;
    2) run_headroom "$i" fused; run_headroom "$i" auto; run_mlx "$i" ;;
    0) run_headroom "$i" auto; run_mlx "$i"; run_headroom "$i" fused ;;
  esac
done

what=$([ -n "$given" ] && echo "as it is on disk" || echo "$preset, $bits-bit, $float floats")
echo "model: $model ($what); $k rounds × $t trials each (one warm-up per round, not counted)"
for kernel in fused auto; do
  echo
  echo "headroom --kernel $kernel:"
  "$python" "$root/scripts/bench/compare.py" "$out" "$p" "$n" "$kernel"
done
echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || uptime)"
"$python" "$root/scripts/bench/jitter.py"
echo "took $(( $(date +%s) - started )) s; raw outputs in $out"
