# Headroom: the two commands a fresh machine needs.
#
#   make run    set up, build, and open the menu-bar app
#   make test   set up, build, and run every test (what CI runs)
#
# `make setup` alone installs and patches what the build needs (idempotent).

.PHONY: setup ui build run test
SHELL := /bin/bash

setup:
	@scripts/setup.sh

ui: setup
	@cd ui && npm run --silent build >/dev/null

build: ui
	cargo build -p headroom

run: build
	cargo run -p headroom

test: build
	@scripts/test-all.sh
