# Headroom: the two commands a fresh machine needs.
#
#   make run    set up, build, and open the menu-bar app
#   make test   set up, then check style (rustfmt, clippy), type-check and
#               lint the macOS code (check-macos), build, and run every test
#               (what CI runs)
#
# `make setup` alone installs and patches what the build needs (idempotent);
# `make check-macos` alone type-checks the workspace for aarch64-apple-darwin.

.PHONY: setup ui build run test check-macos
SHELL := /bin/bash

setup:
	@scripts/setup.sh

ui: setup
	@cd ui && npm run --silent build >/dev/null

build: ui
	cargo build -p headroom

run: build
	cargo run -p headroom

# Sets up, builds the UI and the app, checks and tests, each step timed
# (scripts/test-all.sh runs the set-up itself, so its time is in the table).
test:
	@scripts/test-all.sh

check-macos: ui
	@scripts/check-macos/run.sh
