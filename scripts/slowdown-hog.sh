#!/usr/bin/env bash
# The slowdown attribution end to end, against a real memory hog on this
# machine: `headroom live-probe` answers with a demo model three times (the
# first answers are the model's own reference rate); while the second one
# streams, a hog process allocates memory in steps until PSI reaches the
# warning level (or a fixed ceiling), holds it a few seconds and exits. The
# probe prints each answer's per-second decode rates beside swap and
# pressure, and whether a slowdown was blamed on memory.
#
#   scripts/slowdown-hog.sh [CEILING_MB] [FLOOR_MB]    (defaults 14336, 4096)
#
# Safety, so it can never take the machine down: the hog (scripts/memory-hog.py,
# shared with scripts/away-hog.sh) allocates at most
# CEILING_MB (default 14 GiB of this machine's 24), checks MemAvailable before
# every 512 MiB step and stops before it would leave less than FLOOR_MB,
# runs under `ulimit -v` (ceiling + 1 GiB), asks the kernel's OOM killer to
# take it first (oom_score_adj 1000), lives at most 90 s, and is killed when
# this script exits for any reason.
#
# Env: HEADROOM_BIN (default target/debug/headroom), PRESET (demo model,
# default small), TOKENS (per answer, default 700).
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
BIN=${HEADROOM_BIN:-$here/target/debug/headroom}
CEILING_MB=${1:-14336}
FLOOR_MB=${2:-4096}
PRESET=${PRESET:-small}
TOKENS=${TOKENS:-700}
[[ -x $BIN ]] || { echo "slowdown-hog: no app binary at $BIN (cargo build -p headroom)" >&2; exit 1; }

scratch=$(mktemp -d "${TMPDIR:-/tmp}/headroom-hog-XXXXXX")
probe_pid=
hog_pid=
cleanup() {
  [[ -n $hog_pid ]] && kill -KILL "$hog_pid" 2>/dev/null || true
  [[ -n $probe_pid ]] && kill -TERM "$probe_pid" 2>/dev/null || true
  rm -rf "$scratch"
}
trap cleanup EXIT INT TERM


echo "slowdown-hog: writing the demo model ($PRESET)…"
"$BIN" demo-model "$scratch/model" --preset "$PRESET" --arch qwen2 --bits 4 >/dev/null
echo "slowdown-hog: memory before: $(grep -E 'MemAvailable|SwapTotal|SwapFree' /proc/meminfo | tr -s ' ' | tr '\n' ' ')"
echo "slowdown-hog: PSI before: $(head -1 /proc/pressure/memory)"

"$BIN" live-probe "$scratch/model" --runs 3 --max-tokens "$TOKENS" --pause 2 >"$scratch/probe.log" 2>&1 &
probe_pid=$!
# The hog starts with the second answer.
for _ in $(seq 600); do
  grep -q "^run 2 started" "$scratch/probe.log" 2>/dev/null && break
  kill -0 "$probe_pid" 2>/dev/null || break
  sleep 0.2
done
if grep -q "^run 2 started" "$scratch/probe.log"; then
  (
    ulimit -v $(((CEILING_MB + 1024) * 1024))
    exec python3 "$here/scripts/memory-hog.py" "$CEILING_MB" "$FLOOR_MB" 512 6
  ) >"$scratch/hog.log" 2>&1 &
  hog_pid=$!
fi
wait "$probe_pid" || { echo "slowdown-hog: the probe failed:" >&2; cat "$scratch/probe.log" >&2; exit 1; }
probe_pid=
[[ -n $hog_pid ]] && wait "$hog_pid" 2>/dev/null || true
hog_pid=

echo
echo "--- headroom live-probe (per-second decode rates; the hog ran during run 2) ---"
cat "$scratch/probe.log"
echo
echo "--- the hog ---"
cat "$scratch/hog.log" 2>/dev/null || echo "(the hog did not start)"
echo
echo "slowdown-hog: memory after: $(grep -E 'MemAvailable|SwapTotal|SwapFree' /proc/meminfo | tr -s ' ' | tr '\n' ' ')"
