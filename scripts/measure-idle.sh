#!/usr/bin/env bash
# What the menu-bar app costs while nobody looks: runs the real app under a
# private Xvfb with the popover hidden (as after login) and the bundled demo
# model loaded, lets it settle, then measures for a fixed time the CPU time
# and resident memory of every process of the app (the app, WebKit's web
# and network processes) and how much its database grew.
#
#   scripts/measure-idle.sh [SECONDS]        (default 120; SETTLE=30 before)
#
# Env: HEADROOM_BIN (default target/debug/headroom), SETTLE (seconds after the
# demo model is loaded before measuring). Needs Xvfb and python3. Leaves
# nothing running and removes its data folder.
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
BIN=${HEADROOM_BIN:-$here/target/debug/headroom}
DURATION=${1:-120}
SETTLE=${SETTLE:-30}
[[ -x $BIN ]] || { echo "measure-idle: no app binary at $BIN (cargo build -p headroom)" >&2; exit 1; }
command -v Xvfb >/dev/null || { echo "measure-idle: Xvfb is not installed" >&2; exit 1; }

scratch=$(mktemp -d "${TMPDIR:-/tmp}/headroom-idle-XXXXXX")
data=$scratch/data
log=$scratch/app.log
xvfb_pid=
app_pid=

cleanup() {
  if [[ -n $app_pid ]]; then
    # The app leads its own process group (setsid): WebKit's processes go with it.
    kill -TERM -- "-$app_pid" 2>/dev/null || true
    for _ in 1 2 3 4 5 6 7 8 9 10; do kill -0 "$app_pid" 2>/dev/null || break; sleep 0.3; done
    kill -KILL -- "-$app_pid" 2>/dev/null || true
  fi
  [[ -n $xvfb_pid ]] && kill "$xvfb_pid" 2>/dev/null || true
  rm -rf "$scratch"
}
trap cleanup EXIT INT TERM

n=120
while [[ -e /tmp/.X11-unix/X$n || -e /tmp/.X$n-lock ]]; do n=$((n + 1)); done
Xvfb ":$n" -screen 0 1280x800x24 -nolisten tcp >/dev/null 2>&1 &
xvfb_pid=$!
for _ in $(seq 50); do [[ -e /tmp/.X11-unix/X$n ]] && break; sleep 0.1; done

# No HEADROOM_SHOW_WINDOW: the popover stays hidden, as after login.
DISPLAY=:$n HEADROOM_DATA_DIR=$data HF_HUB_CACHE=$scratch/hf RUST_LOG=headroom=info,headroom::commands::live=debug \
  setsid "$BIN" >"$log" 2>&1 &
app_pid=$!

echo "measure-idle: waiting for the demo model to load…"
for _ in $(seq 240); do
  grep -qE "loaded the (bundled demo|default) model" "$log" 2>/dev/null && break
  kill -0 "$app_pid" 2>/dev/null || { echo "measure-idle: the app exited:" >&2; tail -20 "$log" >&2; exit 1; }
  sleep 0.5
done
grep -qE "loaded the (bundled demo|default) model" "$log" || { echo "measure-idle: the demo model did not load in 120 s" >&2; tail -20 "$log" >&2; exit 1; }
echo "measure-idle: loaded; settling for ${SETTLE} s, then measuring for ${DURATION} s"
sleep "$SETTLE"

# Every process of the app: the app and everything under it.
tree() {
  local all=("$app_pid") queue=("$app_pid") p c
  while ((${#queue[@]})); do
    p=${queue[0]}; queue=("${queue[@]:1}")
    for c in $(cat /proc/"$p"/task/*/children 2>/dev/null); do all+=("$c"); queue+=("$c"); done
  done
  echo "${all[@]}"
}

# pid name ticks(utime+stime) rss_kb, one line each.
snapshot() {
  local pid
  for pid in $(tree); do
    [[ -r /proc/$pid/stat ]] || continue
    python3 - "$pid" <<'PY'
import sys
pid = sys.argv[1]
try:
    stat = open(f"/proc/{pid}/stat").read()
    comm = stat[stat.index("(") + 1 : stat.rindex(")")]
    fields = stat[stat.rindex(")") + 2 :].split()
    ticks = int(fields[11]) + int(fields[12])  # utime + stime
    rss = next(l.split()[1] for l in open(f"/proc/{pid}/status") if l.startswith("VmRSS:"))
    print(pid, comm.replace(" ", "_"), ticks, rss)
except (FileNotFoundError, ProcessLookupError, StopIteration):
    pass
PY
  done
}

db_state() {
  python3 - "$data/headroom.db" <<'PY'
import os, sqlite3, sys
db = sys.argv[1]
size = lambda p: os.path.getsize(p) if os.path.exists(p) else 0
con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=10)
tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
rows = {t: con.execute(f"SELECT count(*) FROM {t}").fetchone()[0] if t in tables else "-" for t in ("memory_timeline", "rate_timeline")}
con.close()
print(size(db), size(db + "-wal"), rows["memory_timeline"], rows["rate_timeline"])
PY
}

before=$(snapshot)
read -r db0 wal0 mem0 rate0 < <(db_state)
start=$(date +%s.%N)
sleep "$DURATION"
after=$(snapshot)
end=$(date +%s.%N)
read -r db1 wal1 mem1 rate1 < <(db_state)

python3 - "$(getconf CLK_TCK)" "$start" "$end" <<PY
import sys
hz, start, end = int(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3])
wall = end - start
parse = lambda text: {l.split()[0]: l.split()[1:] for l in text.strip().splitlines() if l.strip()}
before, after = parse("""$before"""), parse("""$after""")
print(f"\nidle for {wall:.0f} s, popover hidden, demo model loaded (CPU % of one core)")
print(f"{'process':<22}{'pid':>8}{'CPU %':>9}{'RSS MB':>10}")
total = 0.0
for pid, (name, ticks, rss) in after.items():
    t0 = int(before[pid][1]) if pid in before else 0
    cpu = (int(ticks) - t0) / hz / wall * 100
    total += cpu
    print(f"{name:<22}{pid:>8}{cpu:>9.2f}{int(rss) / 1024:>10.1f}")
print(f"{'all together':<22}{'':>8}{total:>9.2f}{sum(int(v[2]) for v in after.values()) / 1024:>10.1f}")
PY
echo
echo "the webview said: $(grep -o 'live view: the popover is [a-z]*' "$log" | tr '\n' ';' || true)"
echo "database: headroom.db $db0 -> $db1 bytes, WAL $wal0 -> $wal1 bytes"
echo "rows written while idle: memory_timeline $mem0 -> $mem1, rate_timeline $rate0 -> $rate1"
