#!/usr/bin/env bash
#! One command for the first Mac: builds Headroom.app and its .dmg, runs
#! `make test`, and writes one Markdown report with every figure that so far
#! exists only for Linux's CPU backend, now on the Mac's backend (Metal):
#! token parity with mlx-lm, the fit's predicted peak against MLX's measured
#! peak and the process's footprint, decode and TTFT against mlx-lm in the
#! same run, prompt lookup's speed-up and acceptance, the idle CPU, and
#! screenshots of the popover, the model list and the swap warning.
#!
#!   scripts/mac/acceptance.sh [--out FILE] [--tokens N]    on an Apple-silicon Mac
#!   scripts/mac/acceptance.sh --linux-dry-run [--out FILE]  here: every step that can
#!       run on Linux runs on MLX's CPU backend and the same report is written;
#!       the steps that need a Mac say "skipped: needs macOS". `make test` runs
#!       it (scripts/test-all.sh), so the script cannot rot.
#!
#! Each step reuses the project's own measurement: the parity tests
#! (tests/gguf.rs, scripts/parity/mlx_lm_reference.py), `headroom fit` and
#! `headroom generate --json`, scripts/bench/compare-mlx-lm.sh,
#! scripts/bench/lookup.py, scripts/measure-idle.sh. Every figure carries the
#! backend that made it (`headroom backend`). The models: the default model
#! (.deps/models, scripts/setup.sh) and every mlx-community model in the
#! Hugging Face cache. Runs against a fresh data folder, so the fit is the
#! formula's, not a calibration this Mac learned before.
#!
#! Exit status: 0 when every step that ran passed, 1 otherwise (the report
#! is written either way), 2 on bad arguments.
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT"

mode=mac out="" tokens=32
while [ $# -gt 0 ]; do
  case "$1" in
    --linux-dry-run) mode=dry; shift ;;
    --out) out=$2; shift 2 ;;
    --tokens) tokens=$2; shift 2 ;;
    -h | --help) sed -n 's/^#! \{0,1\}//p' "$0"; exit 0 ;;
    *) echo "acceptance: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
if [ $mode = mac ] && [ "$(uname -s)" != Darwin ]; then
  echo "acceptance: this is the Mac's run; here use --linux-dry-run" >&2
  exit 2
fi
# The dry run keeps to what `make test` can afford (under 2 minutes here).
[ $mode = dry ] && tokens=8

results="${HEADROOM_TEST_OUTPUT:-$ROOT/target/acceptance}"
mkdir -p "$results"
report=${out:-$results/acceptance-$([ $mode = dry ] && echo linux-dry-run || echo mac).md}
scratch=$(mktemp -d "${TMPDIR:-/tmp}/headroom-acceptance.XXXXXX")
trap 'rm -rf "$scratch"' EXIT
export HEADROOM_DATA_DIR="$scratch/data"
PY=$ROOT/.deps/venv/bin/python
DEFAULT_MODEL=$ROOT/.deps/models/SmolLM2-135M-Instruct/SmolLM2-135M-Instruct.Q4_1.gguf
PROMPT="Write one sentence about the sea."
SYSTEM="You are a terse assistant."
failed=0

md() { printf '%s\n' "$@" >>"$report"; }
section() { md "" "## $1" ""; }
skipped() { md "skipped: needs macOS ($1)"; }
# step NAME COMMAND...: runs it with its output in $results/acceptance-NAME.log.
step() {
  local name=$1
  shift
  echo "acceptance: $name" >&2
  if "$@" >"$results/acceptance-$name.log" 2>&1; then return 0; fi
  failed=1
  md "**failed**: \`$*\` (log: \`$results/acceptance-$name.log\`)"
  return 1
}
# A field of a JSON object: json FILE python-expression-over-d
json() { "$PY" -c "import json,sys; d=json.load(open(sys.argv[1])); print($2)" "$1"; }

for need in "$PY"; do
  [ -x "$need" ] || { echo "acceptance: $need is missing: run scripts/setup.sh" >&2; exit 1; }
done

# 1. The app and the bundle (on a Mac), and the CLI binary every later step drives.
: >"$report"
if [ $mode = mac ]; then
  BIN=$ROOT/target/release/headroom
else
  BIN=${HEADROOM_BIN:-$ROOT/target/debug/headroom}
fi
md "# Headroom acceptance report ($([ $mode = dry ] && echo "Linux dry run" || echo Mac))" ""
md "Written by \`scripts/mac/acceptance.sh$([ $mode = dry ] && echo " --linux-dry-run")\` on $(date -u '+%Y-%m-%d %H:%M UTC'), $(uname -sm), commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)."

section "Build: Headroom.app and the .dmg"
if [ $mode = mac ]; then
  # docs/macos.md: the UI first, then the Tauri CLI pinned in ui/package.json.
  if step build bash -c 'make ui && ui/node_modules/.bin/tauri build --bundles app,dmg'; then
    app=target/release/bundle/macos/Headroom.app
    dmg=$(ls target/release/bundle/dmg/*.dmg 2>/dev/null | head -1)
    md "- \`$app\`: $(du -sh "$app" | cut -f1)" "- \`${dmg:-no .dmg}\`: $( [ -n "$dmg" ] && du -sh "$dmg" | cut -f1)"
  fi
else
  skipped "Tauri's macOS bundler makes Headroom.app and the .dmg"
  [ -x "$BIN" ] || step build cargo build -p headroom
fi
[ -x "$BIN" ] || { md "no headroom binary at $BIN: nothing else can run"; echo "acceptance: report in $report" >&2; exit 1; }
"$BIN" backend --json >"$scratch/backend.json" || failed=1
BACKEND=$(json "$scratch/backend.json" "'MLX %s, %s backend' % (d['mlx_version'], d['device'].replace('gpu', 'Metal'))" 2>/dev/null || echo "unknown backend")
md "" "Backend of every figure below unless a row says otherwise: **$BACKEND**."

section "make test"
if [ $mode = mac ]; then
  if step make-test make test; then :; fi
  md "\`make test\`: $(grep -E '^total: ' "$results/acceptance-make-test.log" | tail -1)"
else
  md "not run in the dry run: \`make test\` is what runs the dry run; on a Mac this step runs it first."
fi

# The models: the default one and every mlx-community folder in the HF cache.
hub=${HF_HUB_CACHE:-${HF_HOME:-$HOME/.cache/huggingface}/hub}
community=()
for snap in "$hub"/models--mlx-community--*/snapshots/*; do
  [ -f "$snap/config.json" ] && community+=("$snap")
done
name_of() { case $1 in "$DEFAULT_MODEL") echo "SmolLM2-135M-Instruct Q4_1 (default)" ;; *) basename "$(dirname "$(dirname "$1")")" | sed 's/^models--//; s/--/\//g' ;; esac; }

section "Token parity with mlx-lm"
md "| model | backend | check | result |" "|---|---|---|---|"
# The default model (GGUF, which mlx-lm cannot read): the project's own test
# builds mlx-lm's model from the file's tensors and compares greedy tokens.
if step parity-default cargo test -p headroom-tests --test integration -- --exact gguf::the_real_model_answers_paris_token_for_token_like_mlx_lm; then
  md "| $(name_of "$DEFAULT_MODEL") | $BACKEND | tests/gguf.rs: greedy tokens and last logits vs mlx-lm | same tokens |"
else
  md "| $(name_of "$DEFAULT_MODEL") | $BACKEND | tests/gguf.rs | **differs** (see the log) |"
fi
for dir in "${community[@]}"; do
  n=$(name_of "$dir")
  "$PY" scripts/parity/mlx_lm_reference.py --prompt "$PROMPT" --system "$SYSTEM" --max-tokens "$tokens" "$dir" >"$scratch/ref.json" 2>>"$results/acceptance-parity.log" || failed=1
  "$BIN" generate "$dir" --prompt "$PROMPT" --system "$SYSTEM" --temp 0 --ignore-eos --max-tokens "$tokens" --kernel fused --json >"$scratch/ours.json" 2>>"$results/acceptance-parity.log" || failed=1
  verdict=$("$PY" - "$scratch/ref.json" "$scratch/ours.json" "$dir" <<'PY' 2>>"$results/acceptance-parity.log" || echo "not compared (see the log)"
import json, sys
ref = json.load(open(sys.argv[1]))["models"][sys.argv[3]]["token_ids"]
ours = json.load(open(sys.argv[2]))["token_ids"]
same = next((i for i, (a, b) in enumerate(zip(ref, ours)) if a != b), None)
print(f"same {len(ours)} tokens" if same is None and len(ref) == len(ours) else f"**differs** from token {same}")
PY
)
  case $verdict in same*) ;; *) failed=1 ;; esac
  md "| $n | $BACKEND | $tokens greedy tokens vs mlx_lm_reference.py | $verdict |"
done
[ ${#community[@]} -eq 0 ] && md "" "No mlx-community model in $hub: only the default model was compared."

section "Fit: predicted peak against MLX's peak and the footprint"
md "The formula's predicted peak (\`headroom fit --json\`, a fresh data folder: no calibration) against MLX's peak (\`peak_memory_bytes\` of \`headroom generate --json\`: MLX's \`get_peak_memory\`) and the process's peak footprint (max RSS of the child; on macOS the footprint \`ru_maxrss\` reports), at the turn's context." ""
md "| model | backend | context | predicted MB | MLX peak MB | error vs MLX | footprint MB |" "|---|---|---:|---:|---:|---:|---:|"
for m in "$DEFAULT_MODEL" "${community[@]}"; do
  # Run once, reading the child's peak RSS (KiB on Linux, bytes on macOS).
  "$PY" - "$BIN" "$m" "$PROMPT" "$tokens" >"$scratch/gen.json" 2>>"$results/acceptance-fit.log" <<'PY' || { failed=1; continue; }
import json, resource, subprocess, sys
binary, model, prompt, tokens = sys.argv[1:5]
out = subprocess.run([binary, "generate", model, "--prompt", prompt, "--temp", "0", "--ignore-eos",
                      "--max-tokens", tokens, "--json"], capture_output=True, text=True, check=True).stdout
turn = json.loads(out)
rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
turn["footprint_bytes"] = rss if sys.platform == "darwin" else rss * 1024
print(json.dumps(turn))
PY
  ctx=$(json "$scratch/gen.json" "d['stats']['context_tokens']")
  "$BIN" fit "$m" --context "$ctx" --json >"$scratch/fit.json" 2>>"$results/acceptance-fit.log" || { failed=1; continue; }
  row=$("$PY" - "$scratch/fit.json" "$scratch/gen.json" <<'PY'
import json, sys
fit, gen = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
pred, peak, foot = fit["formula_peak_bytes"], gen["stats"]["peak_memory_bytes"], gen["footprint_bytes"]
print(f"{fit['footprint']['backend']} | {gen['stats']['context_tokens']} | {pred / 1e6:.1f} | {peak / 1e6:.1f} | {(pred - peak) / peak * 100:+.1f} % | {foot / 1e6:.1f}")
PY
)
  md "| $(name_of "$m") | $row |"
done
md "" "(The fit's backend column is the footprint's \`backend\`: the terms of \`headroom_core::fit::{CPU, METAL}\`, docs/fit.md. The footprint includes the binary, libmlx and the tokenizer, which the fit leaves out.)"

section "Decode and TTFT against mlx-lm, same run"
p=64 n=$tokens
bench_models=()
if [ $mode = dry ]; then
  md "A tiny random demo model (mlx-lm cannot read the default GGUF): \`compare-mlx-lm.sh --preset tiny -p $p -n $n -k 1 -t 1\`."
  TMPDIR=$scratch step compare-tiny scripts/bench/compare-mlx-lm.sh --preset tiny -p "$p" -n "$n" -k 1 -t 1 && bench_models+=(compare-tiny)
else
  md "Each mlx-community model: \`compare-mlx-lm.sh --model DIR -p 512 -n 128 -k 3 -t 3\` (headroom's \`--kernel fused\` is mlx-lm's kernel)."
  i=0
  for dir in "${community[@]}"; do
    i=$((i + 1))
    TMPDIR=$scratch step "compare-$i" scripts/bench/compare-mlx-lm.sh --model "$dir" -p 512 -n 128 -k 3 -t 3 && bench_models+=("compare-$i")
  done
  [ ${#community[@]} -eq 0 ] && md "No mlx-community model installed: \`headroom pull mlx-community/Qwen2.5-0.5B-Instruct-4bit\` and run again."
fi
for b in "${bench_models[@]}"; do
  md "" "Backend: $BACKEND." '```' "$(grep -vE '^(round|took) ' "$results/acceptance-$b.log")" '```'
done

section "Prompt lookup: speed-up and acceptance"
# The dry run: one copying prompt, one round; the Mac: every copying prompt, three rounds.
if [ $mode = dry ]; then lookup=(--rounds 1 --max-tokens 16 --only copy-code); else lookup=(--rounds 3 --max-tokens 256 --only copy-); fi
if step lookup "$PY" scripts/bench/lookup.py "${lookup[@]}" "$DEFAULT_MODEL"; then
  md "Backend: $BACKEND; \`lookup.py ${lookup[*]}\` on the default model." '```' "$(cat "$results/acceptance-lookup.log")" '```'
fi

section "Idle CPU"
if [ $mode = mac ]; then
  # The app as a user has it: started, popover hidden, then 120 s of nothing.
  "$BIN" >"$scratch/app.log" 2>&1 &
  app=$!
  sleep 30
  cpu0=$(ps -o cputime= -p $app)
  sleep 120
  cpu1=$(ps -o cputime= -p $app)
  kill $app 2>/dev/null
  md "Backend: $BACKEND. The app's CPU time over 120 s idle (popover hidden, 30 s after start): $cpu0 -> $cpu1 (\`ps -o cputime\`)."
elif command -v Xvfb >/dev/null; then
  if SETTLE=5 step idle scripts/measure-idle.sh 10; then
    md "Backend: $BACKEND; \`SETTLE=5 scripts/measure-idle.sh 10\` (short, for the dry run; the figure to quote is its 120 s default)." '```' "$(grep -A20 '^idle for' "$results/acceptance-idle.log")" '```'
  fi
else
  md "not measured: Xvfb is not installed here (scripts/measure-idle.sh needs it)."
fi

section "Screenshots: the popover, the model list, the swap warning"
if [ $mode = mac ]; then
  shots=$(dirname "$report")/screenshots
  mkdir -p "$shots"
  for view in popover model-list swap-warning; do
    echo "acceptance: open the $view in Headroom, then click its window (screencapture -W)" >&2
    if screencapture -o -W "$shots/$view.png"; then
      md "![${view}](screenshots/$view.png)"
    else
      md "$view: not captured"
    fi
  done
  md "" "What to check by eye beside these: docs/mac-checklist.md."
else
  skipped "\`screencapture\` of the real menu-bar popover"
fi

md "" "---" "" "$([ $failed = 0 ] && echo "Every step that ran passed." || echo "**Some step failed**: see the logs named above.")"

# The report itself: every section present, and every figure's backend said.
for s in "Build: Headroom.app" "make test" "Token parity" "Fit: predicted peak" "Decode and TTFT" "Prompt lookup" "Idle CPU" "Screenshots"; do
  grep -q "^## $s" "$report" || { echo "acceptance: the report lacks its section \"$s\"" >&2; failed=1; }
done
if grep -q "unknown backend" "$report"; then
  echo "acceptance: \`headroom backend\` did not say the backend: figures unlabelled" >&2
  failed=1
fi
echo "acceptance: report in $report" >&2
exit $failed
