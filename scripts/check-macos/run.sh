#!/usr/bin/env bash
#! `make check-macos`: type-checks and lints (clippy, -D warnings) the whole
#! workspace, all targets, for aarch64-apple-darwin, so every
#! `cfg(target_os = "macos")` line is compiled on every test run, here on
#! Linux where there is no Apple SDK (../shared notes: macos-check-on-linux.md).
#!
#! How: the project's mlx-sys patch has a check-only mode (MLX_SYS_CHECK_ONLY=1:
#! bindings for the target, no CMake, no linking), and the -sys crates' C
#! goes to ./cc, which writes empty objects. Only Rust is checked: not C, C++
#! or Objective-C, and nothing links, so link and runtime errors on a Mac are
#! out of its reach. On a Mac itself the host build already is the Mac's:
#! there it runs the same check natively.
#!
#! Then it proves the CPU backend's kernels (engine::backend::cpu: the
#! row-shared matmul, its thread team, AVX2 softmax and SiLU) are compiled
#! out of the Mac build: rustc's dep-info for the engine on this target lists
#! every source file it read, and none may be under engine/src/backend/cpu/.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
TARGET=aarch64-apple-darwin
cd "$ROOT"

# The engine's dep-info files for $TARGET that list the backend boundary
# (older ones, from before it existed, are not evidence either way).
no_cpu_kernels_for_mac() {
  local deps="${CARGO_TARGET_DIR:-$ROOT/target}/$TARGET/debug/deps" files=() f
  for f in "$deps"/headroom_engine-*.d; do
    [ -e "$f" ] && grep -q 'engine/src/backend/mod.rs' "$f" && files+=("$f")
  done
  if [ ${#files[@]} -eq 0 ]; then
    echo "check-macos: no dep-info for headroom-engine under $deps: cannot tell what the Mac build compiles" >&2
    return 1
  fi
  if grep -l 'engine/src/backend/cpu/' "${files[@]}" >&2; then
    echo "check-macos: the CPU backend's kernels (engine/src/backend/cpu/) are compiled for $TARGET (files above)" >&2
    return 1
  fi
  echo "check-macos: engine::backend::cpu is not in the $TARGET build (${#files[@]} dep-info files read)"
}

# One pass: clippy type-checks everything `cargo check` would, then lints;
# a separate `cargo check` first only did the type-check twice.
if [ "$(uname -s)" = Darwin ]; then
  cargo clippy --workspace --all-targets --target "$TARGET" -- -D warnings
  no_cpu_kernels_for_mac
  exit
fi

command -v clang >/dev/null || { echo "check-macos: clang is needed (Debian package clang)" >&2; exit 1; }
if command -v rustup >/dev/null && ! rustup target list --installed | grep -qx "$TARGET"; then
  echo "check-macos: the Rust target $TARGET is not installed: run scripts/setup.sh (or rustup target add $TARGET)" >&2
  exit 1
fi
# tauri's generate_context! reads the built UI (frontendDist).
[ -d ui/dist ] || { echo "check-macos: ui/dist is missing: run \`make ui\` first" >&2; exit 1; }

export MLX_SYS_CHECK_ONLY=1
export CC_aarch64_apple_darwin="$ROOT/scripts/check-macos/cc"
export CXX_aarch64_apple_darwin="$ROOT/scripts/check-macos/cc"

cargo clippy --workspace --all-targets --target "$TARGET" -- -D warnings
echo "check-macos: the workspace type-checks and passes clippy for $TARGET"
no_cpu_kernels_for_mac
