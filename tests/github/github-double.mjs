// A test double in front of Prism: Prism (serving GitHub's own OpenAPI description) checks
// every request the client makes and makes every successful answer; this double adds only
// what no description can give:
//  - it verifies App JWTs with node's crypto (a verifier Hatchery did not write): RS256
//    signature, iat/exp window, iss;
//  - it issues installation tokens of varying length and format, and can revoke them, so
//    refresh and "never assume a token's shape" are tested;
//  - it injects faults on request (5xx, resets, timeouts, delays, 429/403 rate limits,
//    409s, malformed or oversized bodies, pagination links, an answer lost after GitHub
//    acted on the request);
//  - it logs every request, and every Prism validation failure as a violation.
// usage: node github-double.mjs PORT PRISM_URL APP_PUBLIC_KEY_PEM APP_ID
import { createPublicKey, randomBytes, verify } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { createServer } from 'node:http';
import { ActionsService } from './actions-service.mjs';

const [port, prismUrl, publicKeyFile, appId] = process.argv.slice(2);
const publicKey = createPublicKey(readFileSync(publicKeyFile));
// The Actions service a runner scale set talks to, on this same port (actions-service.mjs).
const service = new ActionsService({ base: `http://127.0.0.1:${port}` });
let faults = [];
let log = [];
let violations = [];
let tokens = new Set();
let tokenTtl = 3600;
// What the stand-in runner in a test guest does is chosen by its "JIT config" (see
// images/test-guest/fake-runner); Prism's example value is a fixed string.
let jitConfig = null;
// Opt-in state for long runs (the chaos test): the runners that JIT configs registered, so
// that a name is taken until deleted (GitHub's 409), deletes of unknown runners are 404,
// and lists show what exists. Answers keep Prism's shapes; only the values are ours.
let stateful = false;
const registered = new Map(); // id -> name
let nextRunnerId = 100000;
let registrations = 0;
// Jobs GitHub holds as queued (for the reconciler's lost-webhook search): id -> job.
const queuedJobs = new Map();
let installationRepos = null; // what /installation/repositories lists, once a test sets it
// What /repos/actions/runner/releases lists, once a test sets it: [{tag_name, published_at,
// prerelease?, draft?}], each laid over Prism's example release.
let runnerReleases = null;
// What an org's runner groups say, laid over GitHub's example group (which is restricted to
// one workflow at refs/heads/main): runner_group_id -> fields, once a test sets them, as an
// organization owner would change the group's policy.
const runnerGroups = new Map();
// The network's cost, added to every answer from GitHub's API and from the Actions service
// alike (a held long poll's too, when it is answered), so that benchmarks compare the
// paths at one latency: ms, once a test sets it.
let latencyMs = 0;

function b64urlJson(part) {
  return JSON.parse(Buffer.from(part, 'base64url').toString('utf8'));
}

function checkJwt(auth) {
  const m = /^Bearer ([A-Za-z0-9_-]+)\.([A-Za-z0-9_-]+)\.([A-Za-z0-9_-]+)$/.exec(auth ?? '');
  if (!m) return 'no JWT in Authorization';
  const header = b64urlJson(m[1]);
  const claims = b64urlJson(m[2]);
  if (header.alg !== 'RS256' || header.typ !== 'JWT') return `bad JWT header ${JSON.stringify(header)}`;
  const ok = verify('sha256', Buffer.from(`${m[1]}.${m[2]}`), publicKey, Buffer.from(m[3], 'base64url'));
  if (!ok) return 'JWT signature does not verify';
  const now = Math.floor(Date.now() / 1000);
  if (!(claims.iat <= now)) return `iat ${claims.iat} is in the future`;
  if (!(claims.exp > now)) return `exp ${claims.exp} has passed`;
  if (claims.exp - claims.iat > 600) return `exp - iat = ${claims.exp - claims.iat} > 600`;
  if (String(claims.iss) !== String(appId)) return `iss ${claims.iss} is not ${appId}`;
  return null;
}

function takeFault(method, url) {
  const i = faults.findIndex((f) => (!f.method || f.method === method) && new RegExp(f.path).test(url));
  if (i < 0) return null;
  const f = faults[i];
  if (--f.times <= 0) faults.splice(i, 1);
  return f;
}

function readBody(req) {
  return new Promise((resolve) => {
    const chunks = [];
    req.on('data', (c) => chunks.push(c));
    req.on('end', () => resolve(Buffer.concat(chunks)));
  });
}

function send(res, status, headers, body) {
  res.writeHead(status, { 'Content-Type': 'application/json', ...headers });
  res.end(body);
}

const server = createServer(async (req, res) => {
  const body = await readBody(req);
  const url = req.url;
  if (url.startsWith('/__double/')) {
    if (url === '/__double/faults' && req.method === 'POST') {
      faults.push(...JSON.parse(body.toString()).map((f) => ({ times: 1, ...f })));
      return send(res, 200, {}, '{}');
    }
    if (url === '/__double/log') {
      if (req.method === 'DELETE') { log = []; violations = []; faults = []; service.reset(); return send(res, 200, {}, '{}'); }
      return send(res, 200, {}, JSON.stringify({ log, violations: [...violations, ...service.violations] }));
    }
    if (url === '/__double/revoke' && req.method === 'POST') { tokens = new Set(); return send(res, 200, {}, '{}'); }
    if (url === '/__double/token-ttl' && req.method === 'POST') { tokenTtl = Number(body.toString()); return send(res, 200, {}, '{}'); }
    if (url === '/__double/jit' && req.method === 'POST') { jitConfig = body.toString(); return send(res, 200, {}, '{}'); }
    if (url === '/__double/latency' && req.method === 'POST') { latencyMs = Number(body.toString()); return send(res, 200, {}, '{}'); }
    if (url === '/__double/stateful' && req.method === 'POST') { stateful = true; return send(res, 200, {}, '{}'); }
    if (url === '/__double/runners') return send(res, 200, {}, JSON.stringify([...registered].map(([id, name]) => ({ id, name }))));
    if (url === '/__double/registrations') return send(res, 200, {}, JSON.stringify({ registrations }));
    if (url === '/__double/queued' && req.method === 'POST') {
      for (const j of JSON.parse(body.toString())) queuedJobs.set(j.id, j);
      return send(res, 200, {}, '{}');
    }
    if (url === '/__double/repos' && req.method === 'POST') {
      installationRepos = JSON.parse(body.toString());
      return send(res, 200, {}, '{}');
    }
    if (url === '/__double/releases' && req.method === 'POST') {
      runnerReleases = JSON.parse(body.toString());
      return send(res, 200, {}, '{}');
    }
    if (url === '/__double/runner-group' && req.method === 'POST') {
      const { id, ...fields } = JSON.parse(body.toString());
      runnerGroups.set(Number(id), fields);
      return send(res, 200, {}, '{}');
    }
    if (url === '/__double/dequeue' && req.method === 'POST') {
      for (const id of JSON.parse(body.toString())) queuedJobs.delete(id);
      return send(res, 200, {}, '{}');
    }
    return send(res, 404, {}, '{}');
  }

  if (url.startsWith('/__scaleset/')) {
    const [status, out] = service.control(req.method, url.split('?')[0], body.toString());
    return send(res, status, {}, JSON.stringify(out));
  }
  const latency = () => latencyMs && new Promise((r) => setTimeout(r, latencyMs));
  if (url.startsWith('/tenant/123/')) {
    const answer = await service.handle(req, body);
    await latency();
    if (answer === 'reset') return req.socket.destroy();
    if (answer === 'hang') return;
    const [status, out] = answer;
    if (out === null) { res.writeHead(status); return res.end(); }
    return send(res, status, {}, typeof out === 'string' ? out : JSON.stringify(out));
  }
  await latency(); // nothing below is held: before the answer is the same as on it
  if (/^(\/api\/v3)?\/actions\/runner-registration$/.test(url) && req.method === 'POST') {
    log.push({ method: req.method, url, headers: req.headers, body: body.toString() });
    const fault = takeFault(req.method, url);
    if (fault?.status) return send(res, fault.status, {}, JSON.stringify(fault.body ?? { message: 'injected' }));
    const [status, out] = service.runnerRegistration(req.headers, body.toString());
    return send(res, status, {}, JSON.stringify(out));
  }
  // GitHub Enterprise Server serves the API under /api/v3; Prism serves at /.
  const enterprise = url.startsWith('/api/v3/');
  const apiUrl = enterprise ? url.slice('/api/v3'.length) : url;
  const entry = { method: req.method, url, headers: req.headers, body: body.toString() };
  log.push(entry);
  const jwtPath = apiUrl.startsWith('/app/') || /\/installation$/.test(apiUrl.split('?')[0]);
  if (jwtPath) {
    const problem = checkJwt(req.headers.authorization);
    if (problem) {
      violations.push({ url, problem });
      return send(res, 401, {}, JSON.stringify({ message: `A JSON web token could not be decoded: ${problem}` }));
    }
  } else {
    const token = (req.headers.authorization ?? '').replace(/^Bearer /, '');
    if (!tokens.has(token) && !req.headers['x-double-static-token']) {
      entry.rejected_token = true;
      return send(res, 401, {}, JSON.stringify({ message: 'Bad credentials' }));
    }
  }

  let fault = takeFault(req.method, url);
  const path = apiUrl.split('?')[0];
  if (stateful && req.method === 'POST' && path.endsWith('/generate-jitconfig')) {
    const name = JSON.parse(body.toString()).name;
    if ([...registered.values()].includes(name)) fault = { ...(fault ?? {}), prefer: 409 };
  }
  // A delete that fails (an injected status, a reset, a hang) deletes nothing.
  if (stateful && req.method === 'DELETE' && /\/actions\/runners\/\d+$/.test(path) && !fault?.status && !fault?.reset && !fault?.hang) {
    const id = Number(path.split('/').pop());
    if (!registered.delete(id)) return send(res, 404, {}, JSON.stringify({ message: 'Not Found' }));
  }
  if (fault?.delay_ms) await new Promise((r) => setTimeout(r, fault.delay_ms));
  if (fault?.reset) return req.socket.destroy();
  if (fault?.hang) return; // never answer: the client's timeout must fire
  if (fault?.status) {
    return send(res, fault.status, fault.headers ?? {}, fault.raw ?? JSON.stringify(fault.body ?? { message: 'injected' }));
  }

  const headers = { ...req.headers };
  delete headers.host;
  delete headers['content-length'];
  if (fault?.prefer) headers.prefer = `code=${fault.prefer}`;
  let upstream;
  try {
    upstream = await fetch(prismUrl + apiUrl, { method: req.method, headers, body: body.length ? body : undefined });
  } catch (e) {
    violations.push({ url, problem: `prism unreachable: ${e.message}` });
    return send(res, 502, {}, '{}');
  }
  let text = await upstream.text();
  const v = upstream.headers.get('sl-violations');
  if (v && upstream.status >= 400 && !fault?.prefer) violations.push({ url, method: req.method, problem: v });
  if (upstream.status === 201 && /\/access_tokens$/.test(url)) {
    // Prism's example token has a fixed shape and a date in 2016: issue a live one of a
    // length and format the client cannot have assumed.
    const parsed = JSON.parse(text);
    parsed.token = `ghs_${randomBytes(8 + Math.floor(Math.random() * 40)).toString('base64url')}`;
    parsed.expires_at = new Date(Date.now() + tokenTtl * 1000).toISOString().replace(/\.\d+Z$/, 'Z');
    tokens.add(parsed.token);
    entry.issued = parsed.token;
    text = JSON.stringify(parsed);
  }
  if (upstream.status === 201 && /\/registration-token$/.test(path)) {
    // Prism's example token is fixed and expired in 2020: a live one, which the Actions
    // service's runner-registration then accepts.
    const parsed = JSON.parse(text);
    parsed.token = randomBytes(20).toString('hex').toUpperCase().slice(0, 29);
    const expires = Date.now() + 3600_000;
    parsed.expires_at = new Date(expires).toISOString();
    service.registrationIssued(parsed.token, expires);
    text = JSON.stringify(parsed);
  }
  if (upstream.status === 201 && /\/generate-jitconfig$/.test(url)) {
    const parsed = JSON.parse(text);
    const name = JSON.parse(body.toString()).name;
    if (jitConfig !== null)
      parsed.encoded_jit_config = Buffer.from(`${jitConfig} runner=${name}`).toString('base64') + ` ${jitConfig}`;
    parsed.runner.name = name;
    if (stateful) {
      parsed.runner.id = nextRunnerId++;
      registered.set(parsed.runner.id, name);
      registrations++;
    }
    text = JSON.stringify(parsed);
  }
  if (stateful && upstream.status === 200 && req.method === 'GET' && /\/actions\/runners$/.test(path)) {
    const parsed = JSON.parse(text);
    const example = parsed.runners[0];
    const wanted = new URL(url, 'http://x').searchParams.get('name');
    parsed.runners = [...registered].filter(([, name]) => !wanted || name === wanted)
      .map(([id, name]) => ({ ...example, id, name, busy: false, status: 'online' }));
    parsed.total_count = parsed.runners.length;
    text = JSON.stringify(parsed);
  }
  if (stateful && upstream.status === 200 && /\/actions\/runs$/.test(path)) {
    const parsed = JSON.parse(text);
    const example = parsed.workflow_runs[0];
    // A job marked hidden is queued in a run that is in progress: not in this list. A job
    // with a `repo` is listed for that repository only.
    const repo = /^\/repos\/([^/]+\/[^/]+)\//.exec(path)[1];
    const runIds = [...new Set([...queuedJobs.values()].filter((j) => !j.hidden && (!j.repo || j.repo === repo)).map((j) => j.run_id))];
    parsed.workflow_runs = runIds.map((id) => ({ ...example, id, status: 'queued', conclusion: null }));
    parsed.total_count = parsed.workflow_runs.length;
    text = JSON.stringify(parsed);
  }
  const runJobs = /\/actions\/runs\/(\d+)\/jobs$/.exec(path);
  if (stateful && upstream.status === 200 && runJobs) {
    const parsed = JSON.parse(text);
    const example = parsed.jobs[0];
    parsed.jobs = [...queuedJobs.values()].filter((j) => j.run_id === Number(runJobs[1]))
      .map((j) => ({ ...example, id: j.id, run_id: j.run_id, labels: j.labels, status: 'queued', conclusion: null, runner_name: null, runner_id: null }));
    parsed.total_count = parsed.jobs.length;
    text = JSON.stringify(parsed);
  }
  if (stateful && installationRepos && upstream.status === 200 && path === '/installation/repositories') {
    const parsed = JSON.parse(text);
    const example = parsed.repositories[0];
    parsed.repositories = installationRepos.map((fullName) => ({ ...example, full_name: fullName, name: fullName.split('/')[1], owner: { ...example.owner, login: fullName.split('/')[0] } }));
    parsed.total_count = parsed.repositories.length;
    text = JSON.stringify(parsed);
  }
  if (runnerReleases && upstream.status === 200 && path === '/repos/actions/runner/releases') {
    const example = JSON.parse(text)[0];
    text = JSON.stringify(runnerReleases.map((r) => ({ ...example, draft: false, prerelease: false, name: r.tag_name, ...r })));
  }
  const group = /^\/orgs\/[^/]+\/actions\/runner-groups\/(\d+)$/.exec(path);
  if (group && upstream.status === 200) {
    const id = Number(group[1]);
    text = JSON.stringify({ ...JSON.parse(text), id, ...(runnerGroups.get(id) ?? {}) });
  }
  // One job: GitHub's example, with this job's id, and queued (or the status the test
  // gives it) while the test says so.
  const oneJob = /\/actions\/jobs\/(\d+)$/.exec(path);
  if (stateful && upstream.status === 200 && oneJob) {
    const parsed = JSON.parse(text);
    const queued = queuedJobs.get(Number(oneJob[1]));
    parsed.id = Number(oneJob[1]);
    if (queued) Object.assign(parsed, { run_id: queued.run_id, labels: queued.labels, status: queued.status ?? 'queued', conclusion: null, completed_at: null });
    text = JSON.stringify(parsed);
  }
  const out = { 'Content-Type': upstream.headers.get('content-type') ?? 'application/json' };
  if (fault?.link) out.Link = fault.link.replaceAll('SELF', `http://127.0.0.1:${port}`);
  if (fault?.ratelimit) Object.assign(out, fault.ratelimit);
  // GitHub acted, but its answer is lost on the way: the client cannot know.
  if (fault?.lose_answer) return req.socket.destroy();
  send(res, upstream.status, out, text);
});
// A kept-alive connection is closed by its client, never under it: node's fetch reuses one
// for up to 4 s, and a server closing at 5 s met a reuse when this process was held up
// (e2e.chaos under load: "other side closed").
server.keepAliveTimeout = 65000;
server.listen(Number(port), '127.0.0.1', () => console.log(`github-double listening on ${port}`));
