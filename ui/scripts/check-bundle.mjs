// Fails the build if ui/dist could not run offline under the app's CSP
// (script-src 'self'): no inline scripts, no remote URLs, no absolute paths.
import { readdirSync, readFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';

const dist = fileURLToPath(new URL('../dist', import.meta.url));

// Strings that look like URLs but are never fetched: XML namespace names the
// DOM needs, and the links Svelte and marked print inside their own error
// messages ("Please report this to https://github.com/markedjs/marked.").
const ALLOWED = [
  /^http:\/\/www\.w3\.org\/(1999\/xhtml|2000\/svg|1998\/Math\/MathML|1999\/xlink|XML\/1998\/namespace|2000\/xmlns\/)/,
  /^https:\/\/svelte\.dev\/e\//,
  /^https:\/\/github\.com\/markedjs\/marked\.?$/,
];

function* files(dir) {
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) yield* files(path);
    else yield path;
  }
}

const problems = [];
for (const file of files(dist)) {
  const name = relative(dist, file);
  const text = readFileSync(file, 'utf8');
  for (const [url] of text.matchAll(/\b(?:https?|wss?):\/\/[^\s"'`)<>]+/g)) {
    if (!ALLOWED.some((pattern) => pattern.test(url))) problems.push(`${name}: remote URL ${url}`);
  }
  if (/\.(?:css|html)$/.test(name) && /@import|url\(\s*['"]?data:/.test(text)) {
    problems.push(`${name}: @import or data: URL in CSS`);
  }
  if (name.endsWith('.html')) {
    for (const [tag] of text.matchAll(/<script\b[^>]*>/g)) {
      if (!/\bsrc=/.test(tag)) problems.push(`${name}: inline script ${tag}`);
    }
    for (const [, attr] of text.matchAll(/\b(?:src|href)="([^"]+)"/g)) {
      if (!attr.startsWith('./')) problems.push(`${name}: non-relative reference ${attr}`);
    }
    if (/\bon[a-z]+=/.test(text)) problems.push(`${name}: inline event handler`);
  }
}

if (problems.length > 0) {
  console.error(`check-bundle: ${problems.length} problem(s) in dist/\n  ${problems.join('\n  ')}`);
  process.exit(1);
}
console.log('check-bundle: dist/ is self-contained (no inline scripts, no remote URLs)');
