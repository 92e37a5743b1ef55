#!/usr/bin/env bash
# Getting out of the way, end to end on this machine: the real app runs
# under Xvfb with its popover shown and the bundled demo model loaded, and
#
#   1. idle unload: with the idle time set to IDLE_S seconds
#      (HEADROOM_AWAY_IDLE_SECONDS; the setting counts minutes), the model is
#      unloaded after that long without use;
#   2. memory pressure: the bounded hog (scripts/memory-hog.py) allocates in
#      512 MiB steps until PSI reaches the warning level, and holds it
#      HOLD_S seconds; Headroom drops its chat caches, then unloads the model.
#
# Each phase ends with the app's log lines and a screenshot of the popover
# showing its notice (OUT/idle.png, OUT/pressure.png).
#
# The threshold, explicitly: the app acts at `warning` here
# (HEADROOM_AWAY_ACT_AT=warning, i.e. PSI `some avg10 >= 10` or `full avg10
# >= 1`), not at its default `critical` (PSI `full avg10 >= 10`, macOS's
# critical level): on this swapless machine a bounded hog raises PSI by
# page-cache reclaim to warning, never to a full stall, and a hog that went
# further would be a hog that risks the machine.
#
#   scripts/away-hog.sh [CEILING_MB] [FLOOR_MB]    (defaults 14336, 4096)
#
# Safety: the hog allocates at most CEILING_MB (14 GiB of this machine's
# 24), checks MemAvailable before every step and stops before it would leave
# less than FLOOR_MB, runs under `ulimit -v` (ceiling + 1 GiB), is the OOM
# killer's first choice, lives at most 90 s + HOLD_S, and is killed, with the
# app and Xvfb, when this script exits for any reason.
#
# Env: HEADROOM_BIN (default target/debug/headroom), OUT (default
# test-output/away), IDLE_S (default 20), HOLD_S (default 40).
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
BIN=${HEADROOM_BIN:-$here/target/debug/headroom}
CEILING_MB=${1:-14336}
FLOOR_MB=${2:-4096}
IDLE_S=${IDLE_S:-20}
HOLD_S=${HOLD_S:-40}
OUT=${OUT:-$here/test-output/away}
[[ -x $BIN ]] || { echo "away-hog: no app binary at $BIN (cargo build -p headroom)" >&2; exit 1; }
mkdir -p "$OUT"

scratch=$(mktemp -d "${TMPDIR:-/tmp}/headroom-away-XXXXXX")
xvfb_pid=
app_pid=
hog_pid=
stop_app() {
  [[ -n $app_pid ]] && kill -TERM "$app_pid" 2>/dev/null && wait "$app_pid" 2>/dev/null || true
  app_pid=
}
cleanup() {
  [[ -n $hog_pid ]] && kill -KILL "$hog_pid" 2>/dev/null || true
  stop_app
  [[ -n $xvfb_pid ]] && kill -TERM "$xvfb_pid" 2>/dev/null || true
  rm -rf "$scratch"
}
trap cleanup EXIT INT TERM

display=
for n in $(seq 140 180); do
  [[ -e /tmp/.X11-unix/X$n || -e /tmp/.X$n-lock ]] || { display=$n; break; }
done
[[ -n $display ]] || { echo "away-hog: no free X display" >&2; exit 1; }
Xvfb ":$display" -screen 0 1280x800x24 >/dev/null 2>&1 &
xvfb_pid=$!
export DISPLAY=":$display"
sleep 1

# wait_for FILE PATTERN SECONDS: until a line of FILE matches.
wait_for() {
  local i
  for i in $(seq $(($3 * 5))); do
    grep -q -- "$2" "$1" 2>/dev/null && return 0
    [[ -n $app_pid ]] && ! kill -0 "$app_pid" 2>/dev/null && { echo "away-hog: the app exited" >&2; return 1; }
    sleep 0.2
  done
  echo "away-hog: no '$2' in $1 within $3 s" >&2
  return 1
}

# start_app PHASE ENV...: the app with its popover shown, on a fresh data folder.
start_app() {
  local phase=$1
  shift
  env HEADROOM_SHOW_WINDOW=1 HEADROOM_DATA_DIR="$scratch/$phase" RUST_LOG=headroom=info "$@" "$BIN" \
    >"$OUT/$phase.log" 2>&1 &
  app_pid=$!
  wait_for "$OUT/$phase.log" "loaded the bundled demo model" 180
}

# The app's away lines, without the log's colour codes.
away_lines() {
  sed 's/\x1b\[[0-9;]*m//g' "$OUT/$1.log" | grep -E "headroom::away|loaded the bundled demo model" || true
}

echo "away-hog: phase 1, idle unload after $IDLE_S s (pressure reaction off)"
t0=$(date +%s)
start_app idle HEADROOM_AWAY_IDLE_SECONDS="$IDLE_S" HEADROOM_AWAY_ACT_AT=off
wait_for "$OUT/idle.log" "Headroom unloaded" $((IDLE_S + 60))
sleep 2
import -window root "$OUT/idle.png"
echo "  model loaded, then unloaded $(($(date +%s) - t0)) s after start:"
away_lines idle | sed 's/^/  /'
stop_app

echo "away-hog: phase 2, memory pressure (acting at: warning)"
echo "  memory before: $(grep -E 'MemAvailable|SwapTotal' /proc/meminfo | tr -s ' ' | tr '\n' ' ')"
echo "  PSI before: $(head -1 /proc/pressure/memory)"
start_app pressure HEADROOM_AWAY_ACT_AT=warning
(
  ulimit -v $(((CEILING_MB + 1024) * 1024))
  exec python3 "$here/scripts/memory-hog.py" "$CEILING_MB" "$FLOOR_MB" 512 "$HOLD_S"
) >"$OUT/hog.log" 2>&1 &
hog_pid=$!
status=0
wait_for "$OUT/pressure.log" "Headroom unloaded" $((90 + HOLD_S)) || status=1
sleep 2
import -window root "$OUT/pressure.png"
kill -KILL "$hog_pid" 2>/dev/null || true
wait "$hog_pid" 2>/dev/null || true
hog_pid=
away_lines pressure | sed 's/^/  /'
echo "--- the hog ---"
cat "$OUT/hog.log"
echo "  memory after: $(grep -E 'MemAvailable' /proc/meminfo | tr -s ' ')"
echo "away-hog: screenshots in $OUT (idle.png, pressure.png)"
exit $status
