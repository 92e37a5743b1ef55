#!/usr/bin/env bash
#! Regenerates the app icons in assets/icons/ from assets/icons/icon.svg with
#! the Tauri CLI's icon command (@tauri-apps/cli, pinned in ui/package.json).
#! Only the desktop set is kept (macOS .icns, Windows .ico, the PNGs that
#! tauri.conf.json and the Linux tray use); the CLI also writes Android, iOS
#! and Windows Store icons, which Headroom has no use for.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
(cd "$ROOT/ui" && npx --no-install tauri icon "$ROOT/assets/icons/icon.svg" --output "$out" >/dev/null 2>&1)
for f in 32x32.png 64x64.png 128x128.png 128x128@2x.png icon.png icon.icns icon.ico; do
  cp "$out/$f" "$ROOT/assets/icons/$f"
done
echo "icons: wrote $(cd "$ROOT" && echo assets/icons/{32x32,64x64,128x128,128x128@2x,icon}.png assets/icons/icon.{icns,ico})"
