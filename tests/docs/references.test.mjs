// The documentation's cross-references resolve: README.md and docs/*.md are the reference,
// and the code, the config example, the alert rules and the docs point into them.
//  - every repository path a document names in a code span (`docs/DESIGN.md`,
//    `deploy/monitoring/`) exists in the checkout (placeholders such as ARCH aside);
//  - every reference to a section, written `FILE: "Heading"` (README.md or docs/NAME.md,
//    in a comment, a message or a document), names a heading that file has.
// Headings are read by pandoc (the parser the man pages are made with), not by a regex.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { join, relative } from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';

const root = fileURLToPath(new URL('../..', import.meta.url));
const docs = ['README.md', 'CHANGELOG.md', ...readdirSync(join(root, 'docs')).filter((f) => f.endsWith('.md')).map((f) => `docs/${f}`)];

// Pandoc's AST of a Markdown file: its headings' text, and its code spans.
function parse(file) {
  const ast = JSON.parse(execFileSync('pandoc', ['-f', 'gfm', '-t', 'json', join(root, file)], { encoding: 'utf8', maxBuffer: 64 << 20 }));
  const headings = [], code = [];
  const text = (inlines) => inlines.map((i) => i.t === 'Str' ? i.c : i.t === 'Space' || i.t === 'SoftBreak' ? ' ' : i.t === 'Code' ? `\`${i.c[1]}\`` : Array.isArray(i.c) ? text(i.c.flat().filter((x) => x && typeof x === 'object' && 't' in x)) : '').join('');
  const walk = (node) => {
    if (Array.isArray(node)) return node.forEach(walk);
    if (!node || typeof node !== 'object') return;
    if (node.t === 'Header') headings.push(text(node.c[2]));
    if (node.t === 'Code') code.push(node.c[1]);
    if (node.t === 'CodeBlock') return;
    if ('c' in node) walk(node.c);
  };
  walk(ast.blocks);
  return { headings, code };
}
const parsed = new Map(docs.map((f) => [f, parse(f)]));

// Every file of the checkout that may refer to a section: sources, scripts, configs, docs.
function sources(dir, out = []) {
  for (const name of readdirSync(join(root, dir))) {
    const path = join(dir, name);
    if (['node_modules', '.git'].includes(name) || /^build/.test(name)) continue;
    const st = statSync(join(root, path));
    if (st.isDirectory()) sources(path, out);
    else if (/\.(c|h|sh|mjs|md|ya?ml|lua|json)$|^hatchery\.(post|pre)/.test(name) && st.size < 2 << 20) out.push(path);
  }
  return out;
}

// CHANGELOG.md names what was removed too, and STYLE.md quotes other projects' files.
const notPaths = new Set(['CHANGELOG.md', 'docs/STYLE.md']);

test('every repository path the documents name exists', () => {
  const prefixes = /^(docs|deploy|controller|tests|images|agent|include|debian|docker)\//;
  const missing = [];
  for (const [file, { code }] of parsed) {
    if (notPaths.has(file)) continue;
    for (const span of code) {
      const path = span.split(/\s/)[0];
      // A pattern or a placeholder (images/runner-ARCH.qcow2, tests/*/…) names no one file.
      if (!prefixes.test(path) || /[*{}<>]|(^|[_/.-])(ARCH|NAME|N|VERSION)([_/.-]|$)|\.\.\./.test(path)) continue;
      if (!existsSync(join(root, path.replace(/[.,:;)]+$/, '')))) missing.push(`${file}: ${path}`);
    }
  }
  assert.deepEqual(missing, []);
});

test('every "FILE: \\"Heading\\"" reference names a heading of that file', () => {
  const ref = /`?\b(README\.md|docs\/[A-Z-]+\.md)`?: "([^"]+)"/g;
  let seen = 0;
  const broken = [];
  for (const file of sources('.')) {
    const text = readFileSync(join(root, file), 'utf8').replace(/\n\s*(\*|#|\/\/|--)\s*/g, ' ');
    for (const [, target, heading] of text.matchAll(ref)) {
      seen++;
      const doc = parsed.get(target);
      if (!doc) broken.push(`${file}: ${target} is not a document`);
      else if (!doc.headings.includes(heading)) broken.push(`${file}: ${target} has no heading "${heading}"`);
    }
  }
  assert.deepEqual(broken, []);
  assert.ok(seen >= 8, `only ${seen} references found: the pattern no longer matches how they are written`);
});

test('the check finds a broken reference', () => {
  const doc = parsed.get('docs/RUNNING.md');
  assert.ok(doc.headings.includes('Metrics'));
  assert.ok(!doc.headings.includes('Metricz'));
  assert.ok(!existsSync(join(root, 'docs/NO-SUCH.md')));
  assert.equal(relative(root, join(root, 'docs')), 'docs');
});
