// A stand-in for GitHub's Actions service as a runner scale set client meets it, written
// from the other side's own source: github.com/actions/scaleset v0.4.0 (client.go,
// session_client.go, types.go, listener/listener.go, internal/testserver/server.go), not
// from Hatchery's client. What it serves, and where the library says so:
//  - POST {api}/actions/runner-registration with `Authorization: RemoteAuth <registration
//    token>` and {url, runner_event: "register"}: the service URL (`<base>/tenant/123/`) and
//    an admin token, an RS256 JWT whose `exp` the client reads to renew (client.go
//    updateTokenIfNeeded: under 60 s left; testserver: the JWT's shape);
//  - runner groups by name, scale sets (get by group and name, by id, create, update,
//    delete), `generatejitconfig`, agents (get, by name, delete), sessions (create, refresh,
//    delete), `acquirejobs`, every one with `api-version` and the admin token (client.go
//    newActionsServiceRequest);
//  - the message queue at the session's `messageQueueUrl`: a long poll with
//    `lastMessageId` and `X-ScaleSetMaxCapacity` under the queue token, 202 when nothing
//    came, 200 with {messageId, messageType: "RunnerScaleSetJobMessages", body: a JSON array
//    as a string, statistics}, 401 once the queue token expired; DELETE of a message 204
//    (session_client.go).
// What the service does beyond the library, modelled here as the issue and ARC describe it:
// one session per scale set (409 RunnerScaleSetSessionConflictException while another
// holder's session lives, and a crashed holder's lingers `lingerMs`); a message redelivered
// until deleted; at most 50 job messages per message; statistics computed from its own
// jobs; a busy runner's removal refused (JobStillRunningException); on GHES (`acquire`) a
// job waits for `acquirejobs` before it is assigned.
//
// Tests drive the GitHub side through /__scaleset/: jobs queued, started and completed by
// a runner (as GitHub would when the runner takes it), faults, state.
import { randomBytes, randomUUID } from 'node:crypto';

const b64url = (v) => Buffer.from(typeof v === 'string' ? v : JSON.stringify(v)).toString('base64url');

export class ActionsService {
  constructor({ base }) {
    this.base = base; // http://127.0.0.1:PORT: the service's URL is base + /tenant/123/
    this.reset();
  }

  reset() {
    this.registrationTokens = new Map(); // token -> expiry ms (from the REST double)
    this.adminTokens = new Map(); // token -> expiry ms
    this.adminTtlS = 3600;
    this.queueTtlMs = 3600_000;
    this.lingerMs = 50_000; // a crashed holder's session still counts this long
    this.pollMs = 50_000; // the long poll's hold when nothing comes
    this.acquire = false; // GHES: jobs wait for acquirejobs
    // What the stand-in runner in a test guest does (images/test-guest/fake-runner reads
    // `exit=`, `sleep=`… from its JIT config): appended to each JIT config, as the REST
    // double's /__double/jit does.
    this.jitExtra = '';
    this.groups = [{ id: 1, name: 'Default', size: 0, isDefaultGroup: true }];
    this.scaleSets = new Map(); // id -> scale set
    this.nextScaleSetId = 1;
    this.sessions = new Map(); // sessionId -> session
    this.jobs = new Map(); // jobId -> job
    this.nextRequestId = 1;
    this.runners = new Map(); // id -> {id, name, runnerScaleSetId, jobId}
    this.nextRunnerId = 5000;
    this.faults = [];
    this.log = [];
    this.violations = [];
    this.waiters = new Set(); // held polls: () => void
  }

  adminToken() {
    const now = Math.floor(Date.now() / 1000);
    const header = b64url({ alg: 'RS256', typ: 'JWT' });
    const claims = b64url({ iat: now - 600, exp: now + this.adminTtlS, iss: '123', nonce: randomBytes(6).toString('hex') });
    // The client never verifies it (client.go parses it unverified for `exp`): a signature
    // of the right length and alphabet is enough.
    const token = `${header}.${claims}.${randomBytes(256).toString('base64url')}`;
    this.adminTokens.set(token, (now + this.adminTtlS) * 1000);
    return token;
  }

  // From the REST double: a registration token it issued (POST …/registration-token).
  registrationIssued(token, expiresMs) { this.registrationTokens.set(token, expiresMs); }

  // POST {api}/actions/runner-registration.
  runnerRegistration(headers, body) {
    const m = /^RemoteAuth (\S+)$/.exec(headers.authorization ?? '');
    if (!m || !(this.registrationTokens.get(m[1]) > Date.now())) return [401, { message: 'Bad credentials' }];
    let parsed;
    try { parsed = JSON.parse(body); } catch { return [400, { message: 'Problems parsing JSON' }]; }
    if (parsed.runner_event !== 'register' || typeof parsed.url !== 'string' || !/^https?:\/\/[^/]+\/[^/]+(\/[^/]+)?$/.test(parsed.url)) {
      this.violations.push({ url: '/actions/runner-registration', problem: `bad body ${body}` });
      return [400, { message: 'bad registration request' }];
    }
    return [201, { url: `${this.base}/tenant/123/`, token: this.adminToken() }];
  }

  takeFault(method, path) {
    const i = this.faults.findIndex((f) => (!f.method || f.method === method) && new RegExp(f.path).test(path));
    if (i < 0) return null;
    const f = this.faults[i];
    if (--f.times <= 0) this.faults.splice(i, 1);
    return f;
  }

  statistics(ss) {
    const jobs = [...this.jobs.values()].filter((j) => j.scaleSetId === ss.id && j.state !== 'completed');
    const runners = [...this.runners.values()].filter((r) => r.runnerScaleSetId === ss.id);
    const busy = runners.filter((r) => r.jobId).length;
    return {
      totalAvailableJobs: jobs.filter((j) => j.state === 'available').length,
      totalAcquiredJobs: jobs.filter((j) => j.state === 'acquired').length,
      totalAssignedJobs: jobs.filter((j) => j.state === 'assigned' || j.state === 'running').length,
      totalRunningJobs: jobs.filter((j) => j.state === 'running').length,
      totalRegisteredRunners: runners.length,
      totalBusyRunners: busy,
      totalIdleRunners: runners.length - busy,
    };
  }

  // A job event for the scale set's queue (types.go JobMessageBase and its kinds).
  event(ss, type, job, extra = {}) {
    ss.pending.push({
      messageType: type,
      runnerRequestId: job.runnerRequestId,
      repositoryName: 'pytorch',
      ownerName: 'pytorch',
      jobId: job.jobId,
      jobWorkflowRef: 'pytorch/pytorch/.github/workflows/ppc64le.yml@refs/heads/main',
      jobDisplayName: job.name,
      workflowRunId: job.runId,
      eventName: 'push',
      requestLabels: job.labels,
      queueTime: job.queueTime,
      scaleSetAssignTime: job.assignTime ?? '0001-01-01T00:00:00Z',
      runnerAssignTime: job.runnerAssignTime ?? '0001-01-01T00:00:00Z',
      finishTime: job.finishTime ?? '0001-01-01T00:00:00Z',
      ...(type === 'JobAvailable' ? { acquireJobUrl: `${this.base}/tenant/123/_apis/runtime/runnerscalesets/${ss.id}/acquirejobs` } : {}),
      ...extra,
    });
    this.wake();
  }

  wake() { for (const w of [...this.waiters]) w(); }

  assign(ss, job) {
    job.state = 'assigned';
    job.assignTime = new Date().toISOString();
    this.event(ss, 'JobAssigned', job);
  }

  // ---- the GitHub side, for tests -------------------------------------------------------
  control(method, path, body) {
    const p = body ? JSON.parse(body) : {};
    const ss = p.scaleSet ? [...this.scaleSets.values()].find((s) => s.name === p.scaleSet) : [...this.scaleSets.values()][0];
    switch (`${method} ${path}`) {
      case 'POST /__scaleset/settings':
        for (const k of ['adminTtlS', 'queueTtlMs', 'lingerMs', 'pollMs', 'acquire', 'jitExtra']) if (k in p) this[k] = p[k];
        if (p.groups) this.groups = p.groups;
        return [200, {}];
      case 'POST /__scaleset/faults':
        this.faults.push(...p.map((f) => ({ times: 1, ...f })));
        return [200, {}];
      case 'POST /__scaleset/jobs': { // {count, labels?, scaleSet?}: queued on GitHub
        if (!ss) return [409, { message: 'no scale set yet' }];
        const made = [];
        for (let i = 0; i < (p.count ?? 1); i++) {
          const job = {
            jobId: randomUUID(), runnerRequestId: this.nextRequestId++, scaleSetId: ss.id, runId: 9000 + this.nextRequestId,
            name: `job ${this.nextRequestId}`, labels: p.labels ?? ss.labels.map((l) => l.name), state: 'available',
            queueTime: new Date().toISOString(), runner: null, result: null, runs: 0,
          };
          this.jobs.set(job.jobId, job);
          made.push(job.jobId);
          if (this.acquire) this.event(ss, 'JobAvailable', job);
          else this.assign(ss, job);
        }
        return [200, { jobs: made }];
      }
      case 'POST /__scaleset/start': { // {jobId, runnerName}: a runner of the set took it
        const job = this.jobs.get(p.jobId);
        const runner = [...this.runners.values()].find((r) => r.name === p.runnerName);
        if (!job || !runner || job.state !== 'assigned' || runner.jobId) return [409, { message: 'cannot start' }];
        job.state = 'running';
        job.runner = runner.name;
        job.runs++;
        job.runnerAssignTime = new Date().toISOString();
        runner.jobId = job.jobId;
        this.event(this.scaleSets.get(job.scaleSetId), 'JobStarted', job, { runnerId: runner.id, runnerName: runner.name });
        return [200, {}];
      }
      case 'POST /__scaleset/complete': { // {jobId, result}: succeeded, failed, canceled
        const job = this.jobs.get(p.jobId);
        if (!job || job.state === 'completed') return [409, { message: 'cannot complete' }];
        const runner = [...this.runners.values()].find((r) => r.name === job.runner);
        const set = this.scaleSets.get(job.scaleSetId);
        job.finishTime = new Date().toISOString();
        this.event(set, 'JobCompleted', job, { result: p.result ?? 'succeeded', runnerId: runner?.id ?? 0, runnerName: runner?.name ?? '' });
        if (runner) this.runners.delete(runner.id); // a JIT runner is single-use
        job.runner = null;
        // A job a runner missed is canceled and handed out again (up to 3 times).
        if (p.result === 'canceled' && p.requeue) { job.state = 'assigned'; this.assign(set, job); } else job.state = 'completed';
        return [200, {}];
      }
      case 'POST /__scaleset/vanish': // GitHub deleted the scale set (7 days idle, an incident)
        if (ss) this.scaleSets.delete(ss.id);
        return [200, {}];
      case 'POST /__scaleset/revoke': // every admin token stops working (401)
        this.adminTokens.clear();
        return [200, {}];
      case 'POST /__scaleset/evict': // the service dropped every session
        this.sessions.clear();
        this.wake();
        return [200, {}];
      case 'GET /__scaleset/state':
        return [200, {
          scaleSets: [...this.scaleSets.values()].map((s) => ({ ...s, pending: s.pending.length, messages: s.messages.length, statistics: this.statistics(s) })),
          sessions: [...this.sessions.values()],
          jobs: [...this.jobs.values()],
          runners: [...this.runners.values()],
          violations: this.violations,
          log: this.log,
        }];
      case 'DELETE /__scaleset/state':
        this.reset();
        return [200, {}];
      default:
        return [404, { message: `no control ${method} ${path}` }];
    }
  }

  // ---- the service ----------------------------------------------------------------------
  // Returns [status, body object|string|null, headers] or a Promise of it; null body: none.
  async handle(req, body) {
    const url = new URL(req.url, this.base);
    const path = url.pathname.replace(/^\/tenant\/123/, '');
    const entry = { method: req.method, path, query: url.search, at: Date.now() };
    this.log.push(entry);
    if (this.log.length > 20000) this.log.splice(0, 10000);
    const fault = this.takeFault(req.method, path);
    if (fault?.delay_ms) await new Promise((r) => setTimeout(r, fault.delay_ms));
    if (fault?.reset) return 'reset';
    if (fault?.hang) return 'hang';
    if (fault?.status) return [fault.status, fault.raw ?? fault.body ?? { typeName: 'InjectedException', message: 'injected' }];

    const queue = /^\/_apis\/runtime\/runnerscalesets\/(\d+)\/messages(?:\/(\d+))?$/.exec(path);
    if (queue) return this.messages(req, url, Number(queue[1]), queue[2] && Number(queue[2]), fault);

    if (url.searchParams.get('api-version') !== '6.0-preview')
      this.violations.push({ path, problem: `api-version ${url.searchParams.get('api-version')}` });
    const bearer = /^Bearer (\S+)$/.exec(req.headers.authorization ?? '')?.[1];
    const acquirePath = /^\/_apis\/runtime\/runnerscalesets\/(\d+)\/acquirejobs$/.exec(path);
    const session = acquirePath && [...this.sessions.values()].find((s) => s.queueToken === bearer);
    if (!acquirePath && !(this.adminTokens.get(bearer) > Date.now())) return [401, { typeName: 'UnauthorizedException', message: 'admin token expired or unknown' }];
    if (acquirePath && !(session && session.queueTokenExpires > Date.now())) return [401, { typeName: 'UnauthorizedException', message: 'queue token expired' }];
    let json = null;
    if (body.length) {
      try { json = JSON.parse(body); } catch { return [400, { typeName: 'ArgumentException', message: 'bad JSON' }]; }
    }
    let m;
    if (req.method === 'GET' && path === '/_apis/runtime/runnergroups/') {
      const name = url.searchParams.get('groupName');
      const found = this.groups.filter((g) => g.name.toLowerCase() === (name ?? '').toLowerCase());
      return [200, { count: found.length, value: found }];
    }
    if (path === '/_apis/runtime/runnerscalesets' && req.method === 'GET') {
      const group = Number(url.searchParams.get('runnerGroupId'));
      const name = url.searchParams.get('name');
      const found = [...this.scaleSets.values()].filter((s) => s.runnerGroupId === group && s.name === name);
      return [200, { count: found.length, value: found.map((s) => this.scaleSetView(s)) }];
    }
    if (path === '/_apis/runtime/runnerscalesets' && req.method === 'POST') {
      if (!json?.name || !Array.isArray(json.labels) || !json.labels.length || !json.runnerGroupId) return [400, { typeName: 'ArgumentException', message: 'name, labels and runnerGroupId are required' }];
      if ([...this.scaleSets.values()].some((s) => s.name === json.name && s.runnerGroupId === json.runnerGroupId)) return [409, { typeName: 'RunnerScaleSetExistsException', message: 'exists' }];
      const group = this.groups.find((g) => g.id === json.runnerGroupId);
      if (!group) return [404, { typeName: 'RunnerGroupNotFoundException', message: 'no such group' }];
      const ss = { id: this.nextScaleSetId++, name: json.name, runnerGroupId: group.id, runnerGroupName: group.name, labels: json.labels, RunnerSetting: json.RunnerSetting ?? {}, createdOn: new Date().toISOString(), pending: [], messages: [], nextMessageId: 1 };
      this.scaleSets.set(ss.id, ss);
      return [200, this.scaleSetView(ss)];
    }
    if ((m = /^\/_apis\/runtime\/runnerscalesets\/(\d+)$/.exec(path))) {
      const ss = this.scaleSets.get(Number(m[1]));
      if (!ss) return [404, { typeName: 'RunnerScaleSetNotFoundException', message: 'no such scale set' }];
      if (req.method === 'GET') return [200, this.scaleSetView(ss)];
      if (req.method === 'PATCH') {
        if (json?.labels) ss.labels = json.labels;
        if (json?.name) ss.name = json.name;
        return [200, this.scaleSetView(ss)];
      }
      if (req.method === 'DELETE') { this.scaleSets.delete(ss.id); return [204, null]; }
    }
    if ((m = /^\/_apis\/runtime\/runnerscalesets\/(\d+)\/sessions(?:\/([0-9a-f-]+))?$/.exec(path))) {
      const ss = this.scaleSets.get(Number(m[1]));
      if (!ss) return [404, { typeName: 'RunnerScaleSetNotFoundException', message: 'no such scale set' }];
      if (req.method === 'POST' && !m[2]) {
        const now = Date.now();
        const holder = [...this.sessions.values()].find((s) => s.scaleSetId === ss.id && now - s.seen < this.lingerMs);
        if (holder) return [409, { typeName: 'GitHub.DistributedTask.WebApi.RunnerScaleSetSessionConflictException', message: `The actions runner scale set ${ss.name} already has an active session for owner ${holder.ownerName}.` }];
        for (const [id, s] of this.sessions) if (s.scaleSetId === ss.id) this.sessions.delete(id);
        const s = { sessionId: randomUUID(), scaleSetId: ss.id, ownerName: json?.ownerName ?? '', seen: now };
        this.newQueueToken(s);
        this.sessions.set(s.sessionId, s);
        return [200, this.sessionView(s, ss, fault)];
      }
      const s = this.sessions.get(m[2]);
      if (!s || s.scaleSetId !== ss.id) return [404, { typeName: 'RunnerScaleSetSessionNotFoundException', message: 'no such session' }];
      if (req.method === 'PATCH') { this.newQueueToken(s); s.seen = Date.now(); return [200, this.sessionView(s, ss, fault)]; }
      if (req.method === 'DELETE') { this.sessions.delete(s.sessionId); this.wake(); return [204, null]; }
    }
    if (acquirePath && req.method === 'POST') {
      const ss = this.scaleSets.get(Number(acquirePath[1]));
      if (!ss || !Array.isArray(json)) return [400, { typeName: 'ArgumentException', message: 'a list of runner request ids' }];
      const got = [];
      for (const id of json) {
        const job = [...this.jobs.values()].find((j) => j.runnerRequestId === id && j.scaleSetId === ss.id);
        if (job?.state === 'available') { job.state = 'acquired'; got.push(id); setImmediate(() => this.assign(ss, job)); }
      }
      return [200, { count: got.length, value: got }];
    }
    if ((m = /^\/_apis\/runtime\/runnerscalesets\/(\d+)\/generatejitconfig$/.exec(path)) && req.method === 'POST') {
      const ss = this.scaleSets.get(Number(m[1]));
      if (!ss) return [404, { typeName: 'RunnerScaleSetNotFoundException', message: 'no such scale set' }];
      if (!json?.name) return [400, { typeName: 'ArgumentException', message: 'name is required' }];
      if ([...this.runners.values()].some((r) => r.name === json.name)) return [409, { typeName: 'AgentExistsException', message: `A runner named ${json.name} exists` }];
      const runner = { id: this.nextRunnerId++, name: json.name, runnerScaleSetId: ss.id, jobId: null };
      this.runners.set(runner.id, runner);
      const config = Buffer.from(JSON.stringify({ '.runner': b64url({ agentName: runner.name, poolId: ss.id, workFolder: json.workFolder }), '.credentials': randomBytes(24).toString('base64') })).toString('base64');
      return [200, { runner: { id: runner.id, name: runner.name, runnerScaleSetId: ss.id }, encodedJITConfig: this.jitExtra ? `${config} ${this.jitExtra}` : config }];
    }
    if (path === '/_apis/distributedtask/pools/0/agents' && req.method === 'GET') {
      const found = [...this.runners.values()].filter((r) => r.name === url.searchParams.get('agentName'));
      return [200, { count: found.length, value: found.map(({ id, name, runnerScaleSetId }) => ({ id, name, runnerScaleSetId })) }];
    }
    if ((m = /^\/_apis\/distributedtask\/pools\/0\/agents\/(\d+)$/.exec(path))) {
      const r = this.runners.get(Number(m[1]));
      if (!r) return [404, { typeName: 'GitHub.DistributedTask.WebApi.AgentNotFoundException', message: 'no such runner' }];
      if (req.method === 'GET') return [200, { id: r.id, name: r.name, runnerScaleSetId: r.runnerScaleSetId }];
      if (req.method === 'DELETE') {
        if (r.jobId) return [400, { typeName: 'GitHub.DistributedTask.WebApi.JobStillRunningException', message: 'the runner is running a job' }];
        this.runners.delete(r.id);
        return [204, null];
      }
    }
    this.violations.push({ path, problem: `${req.method} ${path}: not a scale set endpoint` });
    return [404, { typeName: 'NotFoundException', message: 'no such endpoint' }];
  }

  newQueueToken(s) {
    s.queueToken = randomBytes(24).toString('base64url');
    s.queueTokenExpires = Date.now() + this.queueTtlMs;
  }

  scaleSetView(ss) {
    const { pending, messages, nextMessageId, ...view } = ss;
    return { ...view, runnerJitConfigUrl: `${this.base}/tenant/123/_apis/runtime/runnerscalesets/${ss.id}/generatejitconfig`, statistics: this.statistics(ss) };
  }

  sessionView(s, ss, fault) {
    return {
      sessionId: s.sessionId,
      ownerName: s.ownerName,
      runnerScaleSet: this.scaleSetView(ss),
      messageQueueUrl: fault?.emptyQueueUrl ? '' : `${this.base}/tenant/123/_apis/runtime/runnerscalesets/${ss.id}/messages?sessionId=${s.sessionId}`,
      messageQueueAccessToken: s.queueToken,
      statistics: this.statistics(ss),
    };
  }

  // The queue: GET (long poll) and DELETE of one message, under the queue token.
  async messages(req, url, scaleSetId, messageId, fault) {
    const ss = this.scaleSets.get(scaleSetId);
    const token = /^Bearer (\S+)$/.exec(req.headers.authorization ?? '')?.[1];
    const s = [...this.sessions.values()].find((x) => x.queueToken === token);
    if (!s || s.scaleSetId !== scaleSetId) return [401, { typeName: 'UnauthorizedException', message: 'no session for this token' }];
    if (!(s.queueTokenExpires > Date.now())) return [401, { typeName: 'UnauthorizedException', message: 'queue token expired' }];
    if (!ss) return [404, { typeName: 'RunnerScaleSetNotFoundException', message: 'no such scale set' }];
    s.seen = Date.now();
    if (req.method === 'DELETE') {
      const i = ss.messages.findIndex((x) => x.messageId === messageId);
      if (i < 0) {
        // Deleted already (a client that died between its delete and its record, and deletes
        // again): 404. A message never issued is a client's mistake.
        if (messageId >= ss.nextMessageId) this.violations.push({ problem: `message ${messageId} deleted but never issued` });
        return [404, { typeName: 'MessageNotFoundException', message: 'no such message' }];
      }
      ss.messages.splice(i, 1);
      return [204, null];
    }
    if (req.method !== 'GET') return [405, { message: 'method' }];
    if (fault?.emptyBody) return [200, '']; // the service's "nothing", as a 200
    const capacity = req.headers['x-scalesetmaxcapacity'];
    if (capacity === undefined || !/^\d+$/.test(capacity)) this.violations.push({ problem: `poll without X-ScaleSetMaxCapacity (${capacity})` });
    const last = Number(url.searchParams.get('lastMessageId') ?? 0);
    const next = () => {
      // An outstanding message after the cursor first (redelivery until deleted), then a
      // new one of at most 50 pending events.
      const out = ss.messages.find((x) => x.messageId > last);
      if (out) return out;
      if (!ss.pending.length) return null;
      const msg = { messageId: ss.nextMessageId++, events: ss.pending.splice(0, 50) };
      ss.messages.push(msg);
      return msg;
    };
    let msg = next();
    if (!msg) {
      await new Promise((resolve) => {
        const done = () => { clearTimeout(timer); this.waiters.delete(done); req.socket.off('close', done); resolve(); };
        const timer = setTimeout(done, this.pollMs);
        this.waiters.add(done);
        // The connection, not the request: a request's 'close' comes once its body is read.
        req.socket.once('close', done);
      });
      // The client went away meanwhile (killed, or its timeout): nothing is handed to it,
      // and its session is not seen alive.
      if (req.socket.destroyed) return 'hang';
      if (!this.sessions.has(s.sessionId)) return [404, { typeName: 'RunnerScaleSetSessionNotFoundException', message: 'session evicted' }];
      msg = next();
    }
    if (!msg) return [202, null];
    s.seen = Date.now();
    return [200, { messageId: msg.messageId, messageType: 'RunnerScaleSetJobMessages', body: JSON.stringify(msg.events), statistics: this.statistics(ss) }];
  }
}
