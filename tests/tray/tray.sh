#!/usr/bin/env bash
# The menu-bar (tray) behaviour of the real app on an X display, driven the
# way a person would: trayer hosts the tray icon, xdotool clicks it and picks
# menu items, ImageMagick's `import` takes screenshots.
#
#   DISPLAY=:99 bash tests/tray/tray.sh
#
# Needs: trayer, xdotool, xwininfo (x11-utils), /usr/bin/import (imagemagick),
# dbus-daemon (a private session bus: the single-instance lock lives on it).
# Env: DISPLAY (unset: a private Xvfb is started), HEADROOM_BIN (default
# target/debug/headroom), HEADROOM_TEST_OUTPUT (default <repo>/test-output;
# screenshots and logs go to its tray/).
# Last line: "tray: N passed, M failed"; exits non-zero if any check failed.
# Bounded: every wait has a deadline (the whole run takes well under 2 min).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BIN="${HEADROOM_BIN:-$ROOT/target/debug/headroom}"
OUT="${HEADROOM_TEST_OUTPUT:-$ROOT/test-output}/tray"
IMPORT=/usr/bin/import # the real ImageMagick, not a stand-in earlier on PATH
TITLE='^Headroom$'

passed=0
failed=0
summary_printed=0
xvfb_pid="" trayer_pid="" app_pid="" watchdog_pid="" dbus_pid=""
# The app's data folder for this run (it writes its demo model there), not the user's.
DATA_DIR="$(mktemp -d "${TMPDIR:-/tmp}/headroom-tray-XXXXXX")"

pass() {
  echo "ok - $1"
  passed=$((passed + 1))
}
fail() {
  echo "not ok - $1${2:+ ($2)}"
  failed=$((failed + 1))
}
# check NAME COMMAND...: one check, counted.
check() {
  local name="$1"
  shift
  if "$@"; then pass "$name"; else fail "$name"; fi
}
log() { echo "# $*"; }

# X clients can block (xwininfo waits forever on a bad id, xdotool on a grab):
# every call is bounded.
X_TIMEOUT=5
xwininfo() { timeout "$X_TIMEOUT" /usr/bin/env xwininfo "$@"; }
xdotool() { timeout "$X_TIMEOUT" /usr/bin/env xdotool "$@"; }

summary() {
  summary_printed=1
  echo "tray: $passed passed, $failed failed"
}

# Ends a process we started: TERM, then KILL after ~3 s. The app leads a
# process group of its own (setsid), so its web processes go with it.
stop() {
  local pid="$1" targets
  [ -n "$pid" ] || return 0
  targets=("$pid")
  [ "$(ps -o pgid= -p "$pid" 2>/dev/null | tr -d ' ')" != "$pid" ] || targets+=("-$pid")
  kill -TERM -- "${targets[@]}" 2>/dev/null || true
  for _ in $(seq 30); do
    kill -0 -- "${targets[@]}" 2>/dev/null || break
    sleep 0.1
  done
  kill -KILL -- "${targets[@]}" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
}

cleanup() {
  [ -z "$watchdog_pid" ] || kill "$watchdog_pid" 2>/dev/null || true
  watchdog_pid=""
  stop "$app_pid"
  app_pid=""
  stop "$trayer_pid"
  trayer_pid=""
  stop "$xvfb_pid"
  xvfb_pid=""
  stop "$dbus_pid"
  dbus_pid=""
  [ -z "${PIDS:-}" ] || rm -f "$PIDS"
  [ -z "${DATA_DIR:-}" ] || rm -rf "$DATA_DIR"
}

on_exit() {
  local rc=$?
  set +e
  cleanup
  if [ "$summary_printed" -eq 0 ]; then
    fail "the script ran to its end" "stopped early with status $rc${abort_line:+ at line $abort_line}"
    summary
  fi
  [ "$failed" -eq 0 ] || exit 1
  exit "$rc"
}
abort_line=""
trap 'abort_line=$LINENO' ERR
trap on_exit EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
trap 'exit 129' HUP

# until_ok SECONDS COMMAND...: polls COMMAND every 0.1 s until it succeeds.
until_ok() {
  local deadline=$((SECONDS + $1))
  shift
  until "$@"; do
    [ "$SECONDS" -lt "$deadline" ] || return 1
    sleep 0.1
  done
}

app_alive() { [ -n "$app_pid" ] && kill -0 "$app_pid" 2>/dev/null; }

# until_app SECONDS COMMAND...: like until_ok, but gives up at once when the
# app has exited (a crashed app would otherwise use up every deadline).
until_app() {
  local deadline=$((SECONDS + $1))
  shift
  until "$@"; do
    if ! app_alive; then
      log "the app is not running (see $OUT/app.log: $(tail -n 1 "$OUT/app.log" 2>/dev/null))"
      return 1
    fi
    [ "$SECONDS" -lt "$deadline" ] || return 1
    sleep 0.1
  done
}

# Window ids (one a line) of the popover; --onlyvisible for mapped ones only.
# xdotool matches names case-insensitively, and the app's other X windows (the
# GDK leader, the tray icon's plug, the menu) are all named "headroom": keep
# only the window titled exactly "Headroom".
popover_windows() {
  local id
  for id in $(xdotool search --all "$@" --pid "$app_pid" --name "$TITLE" 2>/dev/null); do
    [ "$(xdotool getwindowname "$id" 2>/dev/null)" = Headroom ] && echo "$id"
  done
  return 0
}
popover_visible() { [ -n "$(popover_windows --onlyvisible)" ]; }
popover_not_visible() { app_alive && ! popover_visible; }
# The app is on the display: GDK's client-leader window (class "Headroom") exists.
app_on_display() { [ -n "$(xdotool search --all --pid "$app_pid" --class '^headroom$' 2>/dev/null)" ]; }

# "X Y W H" of a window, from xwininfo (absolute position).
geometry() {
  [[ "${1:-}" =~ ^(0x[0-9a-fA-F]+|[1-9][0-9]*)$ ]] || return 1
  xwininfo -id "$1" 2>/dev/null | awk '
    /Absolute upper-left X:/ { x = $NF }
    /Absolute upper-left Y:/ { y = $NF }
    /^ *Width:/ { w = $NF }
    /^ *Height:/ { h = $NF }
    END { if (w != "") print x, y, w, h }'
}

# The trayer panel window (the strip that hosts the icons).
# (WM_CLASS "panel", "trayer"; xdotool's --all would also demand a name match.)
panel_window() {
  local id
  for id in $(xdotool search --classname '^panel$' 2>/dev/null); do
    if xdotool search --class '^trayer$' 2>/dev/null | grep -qx "$id"; then
      echo "$id"
      return 0
    fi
  done
  return 0
}

# The docked icon: the largest mapped descendant of the panel at least 8 px
# square ("W H X Y id" sorted by area).
icon_window() {
  local panel
  panel="$(panel_window)"
  [ -n "$panel" ] || return 1
  xwininfo -children -id "$panel" 2>/dev/null | awk '/^ +0x[0-9a-f]+ /{print $1}' | while read -r id; do
    read -r x y w h < <(geometry "$id") || continue
    if [ "${w:-0}" -ge 8 ] && [ "${h:-0}" -ge 8 ] &&
      xwininfo -id "$id" 2>/dev/null | grep -q 'Map State: IsViewable'; then
      echo "$((w * h)) $id"
    fi
  done | sort -rn | awk 'NR == 1 { print $2 }'
}

# The open GTK menu: a mapped override-redirect window of the app that is not
# the popover (xdotool sees GTK popups with --pid through _NET_WM_PID).
menu_window() {
  local id popover
  popover=" $(popover_windows | tr '\n' ' ') "
  for id in $(xdotool search --all --onlyvisible --pid "$app_pid" --name '' 2>/dev/null); do
    case "$popover" in *" $id "*) continue ;; esac
    if xwininfo -id "$id" 2>/dev/null | grep -q 'Override Redirect State: yes'; then
      read -r _ _ w h < <(geometry "$id") || continue
      if [ "${w:-0}" -ge 40 ] && [ "${h:-0}" -ge 30 ]; then
        echo "$id"
        return 0
      fi
    fi
  done
  return 1
}
menu_open() { [ -n "$(menu_window)" ]; }
menu_closed() { ! menu_open; }

shot() {
  "$IMPORT" -window root "$OUT/$1.png" 2>>"$OUT/import.log" && log "screenshot: $OUT/$1.png"
}

# open_menu: clicks the middle of the tray icon; succeeds when the menu shows.
open_menu() {
  local icon x y w h
  icon="$(icon_window)" || true
  [ -n "$icon" ] || return 1
  read -r x y w h < <(geometry "$icon")
  xdotool mousemove --sync "$((x + w / 2))" "$((y + h / 2))" click 1
  until_app 5 menu_open
}

# pick_item first|last: clicks the first or last item of the open menu
# ("Open Headroom" / "Quit Headroom"; the separator is between them).
pick_item() {
  local menu x y w h ty
  menu="$(menu_window)" || return 1
  read -r x y w h < <(geometry "$menu")
  # GTK menus pad a few pixels; an item is ~20-30 px tall: aim 12 px inside the item.
  if [ "$1" = first ]; then ty=$((y + 14)); else ty=$((y + h - 14)); fi
  log "menu $menu at ${x},${y} ${w}x${h}: clicking the $1 item at $((x + w / 2)),$ty"
  xdotool mousemove --sync "$((x + w / 2))" "$ty"
  sleep 0.3 # let GTK highlight the item under the pointer
  xdotool click 1
}

# ---- preconditions ---------------------------------------------------------------

# A watchdog: whatever hangs, the run ends (and cleans up) within ~2 minutes.
# It also stops what we started if this shell dies without its traps (SIGKILL):
# every process started is listed in $PIDS.
mkdir -p "$OUT"
PIDS="$OUT/.pids"
: >"$PIDS"
(
  trap 'exit 0' TERM
  for _ in $(seq 220); do
    kill -0 $$ 2>/dev/null || break
    sleep 0.5 &
    wait $!
  done
  if kill -0 $$ 2>/dev/null; then
    echo "# watchdog: still running after 110 s, stopping" >&2
    kill -TERM $$ 2>/dev/null
  else
    mapfile -t pids <"$PIDS"
    kill -TERM -- "${pids[@]}" 2>/dev/null
    sleep 2
    kill -KILL -- "${pids[@]}" 2>/dev/null
  fi
) &
watchdog_pid=$!

rm -f "$OUT"/*.png "$OUT"/*.log
for tool in trayer xdotool xwininfo dbus-daemon; do
  command -v "$tool" >/dev/null || {
    fail "$tool is installed" "apt-get install trayer xdotool x11-utils"
    exit 1
  }
done
if ! "$IMPORT" -version 2>/dev/null | grep -q ImageMagick; then
  fail "$IMPORT is ImageMagick" "apt-get install imagemagick"
  exit 1
fi
if [ ! -x "$BIN" ]; then
  fail "the app is built at $BIN" "cargo build -p headroom, or set HEADROOM_BIN"
  exit 1
fi

if [ -z "${DISPLAY:-}" ]; then
  n=90
  while [ -e "/tmp/.X11-unix/X$n" ] || [ -e "/tmp/.X$n-lock" ]; do n=$((n + 1)); done
  Xvfb ":$n" -screen 0 1280x800x24 -nolisten tcp -noreset >"$OUT/xvfb.log" 2>&1 &
  xvfb_pid=$!
  echo "$xvfb_pid" >>"$PIDS"
  export DISPLAY=":$n"
  until_ok 10 test -e "/tmp/.X11-unix/X$n" || {
    fail "Xvfb starts on $DISPLAY"
    exit 1
  }
  log "started Xvfb on $DISPLAY"
fi
xdpyinfo_ok() { xwininfo -root >/dev/null 2>&1; }
until_ok 5 xdpyinfo_ok || {
  fail "the X display $DISPLAY answers"
  exit 1
}

# A private D-Bus session bus: a second launch finds the first through it.
# (The address file of an earlier run must not be read as this one's.)
rm -f "$OUT/dbus.address"
dbus-daemon --session --nofork --nopidfile --print-address=1 >"$OUT/dbus.address" 2>>"$OUT/dbus.log" &
dbus_pid=$!
echo "$dbus_pid" >>"$PIDS"
dbus_up() { [ -s "$OUT/dbus.address" ]; }
until_ok 10 dbus_up || {
  fail "dbus-daemon starts a session bus"
  exit 1
}
DBUS_SESSION_BUS_ADDRESS="$(head -n 1 "$OUT/dbus.address")"
export DBUS_SESSION_BUS_ADDRESS

# ---- the tray host and the app ---------------------------------------------------------

# Xvfb resets itself when its last client leaves (unless run with -noreset),
# refusing connections for a moment: a tray host started just then fails with
# "cannot open display". Try again; once trayer is up it holds the display.
panel_up() { [ -n "$(panel_window)" ]; }
start_trayer() {
  local try
  for try in 1 2 3; do
    trayer --edge top --align right --widthtype request --height 32 \
      --transparent false --tint 0xffffff >>"$OUT/trayer.log" 2>&1 &
    trayer_pid=$!
    echo "$trayer_pid" >>"$PIDS"
    if until_ok 10 panel_up; then return 0; fi
    log "trayer did not come up (try $try): $(tail -n 1 "$OUT/trayer.log")"
    stop "$trayer_pid"
    trayer_pid=""
    sleep 0.5
  done
  return 1
}
check "trayer's panel is up" start_trayer

# The window must start hidden: make sure the switch the e2e tests use is off.
# setsid: a process group of its own (it execs in place, so $! is the app).
setsid env -u HEADROOM_SHOW_WINDOW HEADROOM_DATA_DIR="$DATA_DIR" "$BIN" >"$OUT/app.log" 2>&1 &
app_pid=$!
printf '%s\n' "$app_pid" "-$app_pid" >>"$PIDS"
log "app pid $app_pid"
started=$SECONDS

check "the app connects to the display" until_app 30 app_on_display
icon_up() { [ -n "$(icon_window)" ]; }
check "the tray icon docks in trayer" until_app 30 icon_up
icon="$(icon_window || true)"
log "app up after $((SECONDS - started)) s; icon window ${icon:-none} at $(geometry "$icon" || echo '?')"
# The icon docks during setup, which is also where HEADROOM_SHOW_WINDOW would
# show the popover: give a wrong show time to happen before saying it did not.
# (GTK creates the popover's X window only when it is first shown, so until
# then "hidden" means: no mapped window titled "Headroom".)
sleep 1
check "the popover is not visible at start" popover_not_visible
shot 1-before

# ---- a second launch ---------------------------------------------------------------
# It finds the first (over D-Bus), asks it to show its popover and exits: one
# tray icon, one engine, one model in memory.

# Docked icons in the panel (mapped children at least 8 px square).
icon_count() {
  local panel id n=0
  panel="$(panel_window)"
  [ -n "$panel" ] || { echo 0; return 0; }
  for id in $(xwininfo -children -id "$panel" 2>/dev/null | awk '/^ +0x[0-9a-f]+ /{print $1}'); do
    read -r _ _ w h < <(geometry "$id") || continue
    if [ "${w:-0}" -ge 8 ] && [ "${h:-0}" -ge 8 ] && xwininfo -id "$id" 2>/dev/null | grep -q 'Map State: IsViewable'; then
      n=$((n + 1))
    fi
  done
  echo "$n"
}
second_rc=""
env -u HEADROOM_SHOW_WINDOW HEADROOM_DATA_DIR="$DATA_DIR" timeout 30 "$BIN" >"$OUT/second.log" 2>&1 || second_rc=$?
check "a second launch exits with status 0 (got ${second_rc:-0}; $OUT/second.log)" test "${second_rc:-0}" -eq 0
check "the second launch shows the running app's popover" until_app 10 popover_visible
sleep 1 # a second icon, were there one, would dock by now
icons="$(icon_count)"
check "one tray icon after the second launch (found $icons)" test "$icons" -eq 1
check "the first app still runs" app_alive
shot 1b-second-launch

# The global shortcut (Alt+Space) hides it again: ready for the menu's Open.
xdotool key --clearmodifiers alt+space
check "Alt+Space hides the popover" until_app 10 popover_not_visible

# ---- open ------------------------------------------------------------------------

check "a click on the tray icon opens the menu" open_menu
shot 2-menu-open
if menu_open; then
  pick_item first || log "could not click Open Headroom"
  check "the menu closes after picking Open Headroom" until_ok 5 menu_closed
  check "Open Headroom shows the popover" until_app 10 popover_visible
else
  fail "Open Headroom shows the popover" "no menu to pick from"
fi
if popover_visible; then
  win="$(popover_windows --onlyvisible | sed -n 1p)"  # sed reads all: no SIGPIPE under pipefail
  read -r x y w h < <(geometry "$win" || echo "0 0 0 0")
  log "popover window $win at ${x},${y} ${w}x${h}"
  check "the popover is 420x640 (is ${w}x${h})" test "$w" -eq 420 -a "$h" -eq 640
  read -r sw sh < <(xwininfo -root | awk '/^ *Width:/ { w = $NF } /^ *Height:/ { h = $NF } END { print w, h }')
  # A never-shown GTK window reports an outer size of 0: centring by it once
  # put the popover's corner at the screen's centre, half off screen.
  on_screen() { [ "$x" -ge 0 ] && [ "$y" -ge 0 ] && [ $((x + w)) -le "$sw" ] && [ $((y + h)) -le "$sh" ]; }
  check "the popover is fully on the ${sw}x${sh} screen (at ${x},${y})" on_screen
else
  fail "the popover is 420x640" "not visible"
  fail "the popover is fully on the screen" "not visible"
fi
sleep 1 # let the web view paint
shot 3-after-open

# ---- quit ------------------------------------------------------------------------

check "the tray menu opens again" open_menu
shot 4-menu-quit
if menu_open; then
  pick_item last || log "could not click Quit Headroom"
else
  log "no menu: cannot pick Quit Headroom"
fi
app_exited() { ! app_alive; }
if until_ok 10 app_exited; then
  rc=0
  wait "$app_pid" || rc=$?
  app_pid=""
  check "Quit Headroom ends the app with status 0 (got $rc)" test "$rc" -eq 0
else
  fail "Quit Headroom ends the app within 10 s" "still running"
fi
shot 5-after-quit

cleanup
summary
