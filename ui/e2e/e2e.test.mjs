// Entry point for `node --test ui/e2e/`: given a folder, Node's test runner
// only picks files named like *.test.mjs (see "Running tests from the command
// line" in the node:test docs), so it would skip app.e2e.mjs. Importing it
// here registers its tests in this file's run.
//
// Run one or the other, not both: `node --test ui/e2e/` or
// `node --test ui/e2e/app.e2e.mjs` (a glob like ui/e2e/*.mjs runs it twice).
import './app.e2e.mjs';
