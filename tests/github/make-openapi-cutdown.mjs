// Cuts the operations Hatchery calls out of GitHub's official OpenAPI description
// (@octokit/openapi, MIT licensed: the attribution is kept in the output's `info`), with
// every component they reference. The output, openapi-cutdown.json, is what Prism serves
// in the tests. Rerun this to refresh it:
//
//   node tests/github/make-openapi-cutdown.mjs [PATH/TO/api.github.com.json]
//
// An enterprise's runners live under /enterprises/{enterprise}, which GitHub describes for
// Enterprise Cloud only (ghec.json, beside api.github.com.json in the same package): those
// operations, and the components they use that api.github.com.json lacks, come from it.
//
// Without a path it installs the pinned @octokit/openapi into a temporary directory.
// Two changes are made for Prism (see docs/ORACLES.md):
//  - every application/json response is also offered as application/vnd.github+json,
//    the media type GitHub recommends and the client sends in Accept;
//  - `Link` response headers are dropped: GitHub's examples point at api.github.com,
//    which a paginating client must never follow from loopback.
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const OPENAPI_VERSION = '23.0.2';
const OPERATIONS = {
  '/repos/{owner}/{repo}/actions/runners/generate-jitconfig': ['post'],
  '/orgs/{org}/actions/runners/generate-jitconfig': ['post'],
  '/repos/{owner}/{repo}/actions/runners': ['get'],
  '/orgs/{org}/actions/runners': ['get'],
  '/repos/{owner}/{repo}/actions/runners/{runner_id}': ['get', 'delete'],
  '/orgs/{org}/actions/runners/{runner_id}': ['get', 'delete'],
  '/repos/{owner}/{repo}/installation': ['get'],
  '/orgs/{org}/installation': ['get'],
  '/app/installations/{installation_id}/access_tokens': ['post'],
  '/repos/{owner}/{repo}/actions/runs': ['get'],
  '/repos/{owner}/{repo}/actions/runs/{run_id}/jobs': ['get'],
  '/repos/{owner}/{repo}/actions/jobs/{job_id}': ['get'],
  '/installation/repositories': ['get'],
  '/repos/{owner}/{repo}/releases': ['get'],
  '/orgs/{org}/actions/runner-groups/{runner_group_id}': ['get'],
  // A runner scale set's auth chain starts with a registration token (actions/scaleset).
  '/orgs/{org}/actions/runners/registration-token': ['post'],
  '/repos/{owner}/{repo}/actions/runners/registration-token': ['post'],
};
const ENTERPRISE_OPERATIONS = {
  '/enterprises/{enterprise}/installation': ['get'],
  '/enterprises/{enterprise}/actions/runners/generate-jitconfig': ['post'],
  '/enterprises/{enterprise}/actions/runners': ['get'],
  '/enterprises/{enterprise}/actions/runners/{runner_id}': ['get', 'delete'],
  '/enterprises/{enterprise}/actions/runners/registration-token': ['post'],
};

let source = process.argv[2];
let tmp = null;
if (!source) {
  tmp = mkdtempSync(join(tmpdir(), 'octokit-openapi-'));
  execFileSync('npm', ['install', '--no-audit', '--no-fund', '--loglevel=error', '--prefix', tmp,
    `@octokit/openapi@${OPENAPI_VERSION}`], { stdio: 'inherit' });
  source = join(tmp, 'node_modules/@octokit/openapi/generated/api.github.com.json');
}
const full = JSON.parse(readFileSync(source, 'utf8'));
const ghec = JSON.parse(readFileSync(join(dirname(source), 'ghec.json'), 'utf8'));

const out = {
  openapi: full.openapi,
  info: {
    ...full.info,
    title: `${full.info.title} (Hatchery cut-down)`,
    description: `The operations Hatchery calls, cut from GitHub's OpenAPI description ` +
      `(@octokit/openapi ${OPENAPI_VERSION}, MIT license, (c) GitHub) by ` +
      `tests/github/make-openapi-cutdown.mjs.`,
  },
  servers: full.servers,
  paths: {},
  components: {},
};

const seen = new Set();
// A component comes from api.github.com.json when it has it, else from `doc`.
function collect(node, doc) {
  if (Array.isArray(node)) return node.forEach((n) => collect(n, doc));
  if (!node || typeof node !== 'object') return;
  for (const [k, v] of Object.entries(node)) {
    if (k === '$ref' && typeof v === 'string' && v.startsWith('#/components/') && !seen.has(v)) {
      seen.add(v);
      const [, , kind, name] = v.split('/');
      const from = full.components[kind]?.[name] ? full : doc;
      out.components[kind] ??= {};
      out.components[kind][name] = from.components[kind][name];
      collect(from.components[kind][name], from);
    } else {
      collect(v, doc);
    }
  }
}

for (const [doc, operations] of [[full, OPERATIONS], [ghec, ENTERPRISE_OPERATIONS]]) {
  for (const [path, methods] of Object.entries(operations)) {
    out.paths[path] = {};
    for (const m of methods) {
      const op = doc.paths[path]?.[m];
      if (!op) throw new Error(`${m.toUpperCase()} ${path} is not in the description`);
      out.paths[path][m] = op;
    }
    if (doc.paths[path].parameters) out.paths[path].parameters = doc.paths[path].parameters;
    collect(out.paths[path], doc);
  }
}

// Prism adjustments, applied to copies so the committed components stay GitHub's.
const adjusted = JSON.parse(JSON.stringify(out));
function adjustResponse(r) {
  if (!r || r.$ref) return;
  if (r.headers) delete r.headers.Link;
  if (r.content?.['application/json'] && !r.content['application/vnd.github+json'])
    r.content['application/vnd.github+json'] = r.content['application/json'];
}
for (const methods of Object.values(adjusted.paths))
  for (const op of Object.values(methods))
    for (const r of Object.values(op.responses ?? {})) adjustResponse(r);
for (const r of Object.values(adjusted.components.responses ?? {})) adjustResponse(r);
delete adjusted.components.headers?.link;

const here = dirname(fileURLToPath(import.meta.url));
const text = JSON.stringify(adjusted) + '\n';
writeFileSync(join(here, 'openapi-cutdown.json'), text);
console.log(`openapi-cutdown.json: ${Object.keys(adjusted.paths).length} paths, ` +
  `${seen.size} components, ${text.length} bytes`);
if (tmp) rmSync(tmp, { recursive: true, force: true });
