#!/usr/bin/env bash
# Predicted vs measured peak memory of `headroom generate` (issue #4): the
# fit estimate (`headroom fit --json`) next to the process's peak RSS, with
# the error in percent, for a Qwen2.5-7B-shaped 4-bit demo model (short
# prompt: weights and runtime at the user's size) and a ~100M-parameter demo
# model at ~256 and ~2048 prompt tokens (the KV cache and activations).
# Everything is written to a temp folder and removed at the end.
#
#   scripts/measure-fit.sh             # all cases: ~11 min on 2 cores (the 7B
#                                      # shape: 8 min to write 4.3 GB, 2 min to run)
#   scripts/measure-fit.sh --skip-7b   # the ~100M cases only: ~1 min
#   scripts/measure-fit.sh --models-dir DIR   # keep the models in DIR and reuse them
#   scripts/measure-fit.sh --archs-only       # qwen3_moe, gemma3_text, qwen3_5(_moe) small demos at ~256 and ~4000 tokens
#   scripts/measure-fit.sh --calibration      # estimates that learn (issue #29): one recorded turn at c0 (960
#                                             # positions; --calibration-tokens N), then the formula alone, the
#                                             # calibrated prediction and a fresh process's recorded peak from
#                                             # c0/4 to 4 x c0, for three demo shapes and the default model
#                                             # (SmolLM2 GGUF, when scripts/setup.sh has put it in .deps/models)
#   scripts/measure-fit.sh --calibration --calibration-unseen  # the same on two shapes the formula was
#                                             # not fitted on (Qwen2.5-0.5B's, 4-bit; the medium qwen2, 8-bit)
#   scripts/measure-fit.sh --calibration --calibration-pairs   # fresh runs at 128 x √2^k positions (to
#                                             # 4,096); every pair at most 4 times apart is one learned run
#                                             # and one prediction, counted by distance, and the
#                                             # ladder: the formula alone at every rung (~15 min)
#
# Decode is 2 tokens: the peak is the prefill's.
# Needs `cargo build -p headroom` and scripts/setup.sh (the venv's
# `tokenizers` cuts the prompts to exact token counts). Exit code 2 when a
# case is more than 5 % under or 25 % over (the bounds core::fit's test holds);
# with --calibration, when a calibrated prediction is more than 5 % off or
# further off than the formula alone (with --calibration-pairs: further off).
set -euo pipefail
cd "$(dirname "$0")/.."

BIN="${HEADROOM_BIN:-target/debug/headroom}"
PY=.deps/venv/bin/python
[[ -x "$BIN" ]] || { echo "measure-fit: $BIN is missing: run cargo build -p headroom" >&2; exit 1; }
[[ -x "$PY" ]] || { echo "measure-fit: $PY is missing: run scripts/setup.sh" >&2; exit 1; }
[[ "$(uname -s)" == Linux ]] || { echo "measure-fit: reads ru_maxrss in KiB as Linux reports it; run it on Linux" >&2; exit 1; }

GGUF=.deps/models/SmolLM2-135M-Instruct/SmolLM2-135M-Instruct.Q4_1.gguf
exec "$PY" scripts/measure-fit/measure.py --bin "$BIN" --text assets/demo/english.txt --gguf "$GGUF" "$@"
