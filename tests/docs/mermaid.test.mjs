#!/usr/bin/env node
/*
 * mermaid.test.mjs - every ```mermaid block of README.md and docs/*.md
 * parsed by the mermaid package (the renderer code hosts use), in a jsdom
 * window, so a picture that would show as an error box fails here. Which
 * words the pictures may use is checked by unit/test_wk_diagrams.
 *
 *   node mermaid.test.mjs
 */
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { JSDOM } from 'jsdom';

const repo = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');
const dom = new JSDOM('<!doctype html><html><body></body></html>');
globalThis.window = dom.window;
globalThis.document = dom.window.document;
const { default: mermaid } = await import('mermaid');
mermaid.initialize({ startOnLoad: false });

/* The documents: README.md and every .md under docs/. */
const files = ['README.md', ...fs.readdirSync(path.join(repo, 'docs'))
  .filter((f) => f.endsWith('.md')).map((f) => path.join('docs', f))];
let passed = 0;
let failed = 0;
for (const f of files) {
  const text = fs.readFileSync(path.join(repo, f), 'utf8');
  const re = /```mermaid\n([\s\S]*?)\n```/g;
  let m;
  let i = 0;
  while ((m = re.exec(text))) {
    i++;
    try {
      await mermaid.parse(m[1]);
      passed++;
      console.log(`ok   ${f} picture ${i}`);
    } catch (e) {
      failed++;
      console.log(`FAIL ${f} picture ${i}: ${String(e.message || e).split('\n').slice(0, 4).join(' | ')}`);
    }
  }
}
/* The parser itself refuses a broken picture. */
try {
  await mermaid.parse('flowchart TD\n  A[["x" -->\n');
  failed++;
  console.log('FAIL the parser accepted a broken picture');
} catch {
  passed++;
  console.log('ok   a broken picture is refused');
}
if (passed < 4) {
  failed++;
  console.log(`FAIL only ${passed - 1} pictures found`);
}
console.log(`${passed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
