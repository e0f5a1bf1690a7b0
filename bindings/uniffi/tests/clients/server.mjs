// A lossy "create payment" service for the cross-runtime client test (run.mjs): server-side
// idempotency in memory (key -> fingerprint of the body, answer), and deterministic misbehaviour
// drawn from a seed.
//
//   node server.mjs SEED      prints "port N control M" once it listens on 127.0.0.1
//
// POST /payments with `Idempotency-Key` (a structured-field string or bare) and a JSON body
// {"amount", "currency", "ref"}:
//   - same key, same body (canonical JSON)  -> the stored answer again, `Idempotent-Replayed: true`
//   - same key, another body                 -> 422 problem `urn:idemdb:problem:key-mismatch`
//   - same key while its first send runs     -> 409 problem `urn:idemdb:problem:in-progress`, Retry-After: 1
//   - a new key                              -> the effect (counted), 201 {"payment": "pay_N", ...}
// What goes wrong, per key and per send (a hash of seed, key, send number and what):
//   - refused: a share of connections is closed before anything is read (never reached)
//   - busy: 503 with Retry-After: 0 before any effect
//   - throttled: 429 with Retry-After: 120 before any effect (the clients cap the wait at their
//     largest delay; one that waited two minutes would be taken for hung)
//   - down: for a few keys, 503 with Retry-After: 0 on every send (the clients' attempt budget
//     ends it: the intent needs attention, `retries_exhausted`)
//   - foreign: another service's problem (400, type .../unavailable) before any effect, final
//   - slow: a short delay; or, once per chosen key, a delay longer than the clients' timeout
//   - lost: the effect is performed, then the socket is destroyed without an answer
//   - cut: the answer's status and headers are sent, then half its body, then the socket is
//     destroyed (a client must not record a 201 it did not read whole)
//   - taken: the key was bound to another body before the client came (422 on every send)
//   - uncertain: the effect is performed, the answer lost, and every later send is told 409
//     `needs-reconciliation` (what an idemdb service says of a record it cannot settle)
// On the control port, GET /stats?run=NAME: sends and effects per key whose name starts with
// NAME-, effects per payment `ref`, connections refused and sends without a key since the last
// GET /reset (which clears those counts; the clients run one after the other).
import { createHash } from 'node:crypto';
import { createServer } from 'node:http';

const seed = process.argv[2] ?? '1';
/** A number in [0, 1) drawn from the seed and `parts`: the same on every run with this seed. */
const draw = (...parts) => createHash('sha256').update([seed, ...parts].join('\u0000')).digest().readUInt32BE(0) / 2 ** 32;

const RATES = { refused: 0.1, down: 0.03, busy: 0.15, throttled: 0.04, foreign: 0.06, slow: 0.2, stall: 0.08, lost: 0.2, cut: 0.08, taken: 0.06, uncertain: 0.04 };
const STALL_MS = 1500; // longer than the clients' 800 ms per-attempt timeout

/** key -> { fingerprint, state: 'running' | 'done' | 'uncertain', status, body } */
const records = new Map();
/** key -> { sends, effects, answered, afterFinal (sends after a final answer went out whole), and per fault: lost, cut, busy, throttled, stalled, inProgress, foreign, mismatch, reconcile } */
const perKey = new Map();
/** ref -> effects */
const perRef = new Map();
let effects = 0;
/** Sends with a key, of every run. */
let sendsSeen = 0;
let connections = 0;
let refused = 0;
/** Sends without an `Idempotency-Key` since the last GET /reset. */
let unkeyed = 0;

/** Counts `what` for the key and keeps it in the key's history (send number: what). */
const note = (entry, what) => {
  entry[what] += 1;
  entry.history.push(`${entry.sends}:${what}`);
};

const stats = (key) => {
  let entry = perKey.get(key);
  if (!entry) {
    entry = { sends: 0, effects: 0, answered: 0, afterFinal: 0, delivered: false, history: [], lost: 0, cut: 0, busy: 0, throttled: 0, stalled: 0, inProgress: 0, foreign: 0, mismatch: 0, reconcile: 0 };
    perKey.set(key, entry);
  }
  return entry;
};

/** RFC 8785-ish canonical JSON (sorted keys): what makes two bodies the same request. */
function canonical(value) {
  if (Array.isArray(value)) return `[${value.map(canonical).join(',')}]`;
  if (value && typeof value === 'object') {
    return `{${Object.keys(value).sort().map((k) => `${JSON.stringify(k)}:${canonical(value[k])}`).join(',')}}`;
  }
  return JSON.stringify(value);
}

const problem = (res, status, type, title, headers = {}) => {
  res.writeHead(status, { 'content-type': 'application/problem+json', ...headers });
  res.end(JSON.stringify({ type, title, status }));
};

/**
 * Once a final answer (one a client must not send again after: 201, 422, 400, 409
 * needs-reconciliation) has been written out whole, a later send of its key is a resend after a
 * final answer: allowed only to a client killed before it recorded that answer.
 */
function delivered(res, entry) {
  res.on('finish', () => {
    entry.delivered = true;
    entry.history.push(`${entry.sends}:delivered`);
  });
}

/** Answers `body` with `status`, or, when the draw says so, cuts it off halfway. */
function answer(res, entry, key, n, status, headers, body) {
  if (draw(key, n, 'cut') < RATES.cut) {
    note(entry, 'cut');
    res.writeHead(status, { ...headers, 'content-length': Buffer.byteLength(body) });
    res.write(body.slice(0, Math.floor(body.length / 2)));
    setTimeout(() => res.socket?.destroy(), 10);
    return;
  }
  note(entry, 'answered');
  delivered(res, entry);
  res.writeHead(status, headers);
  res.end(body);
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

async function pay(req, res, raw) {
  const header = req.headers['idempotency-key'];
  if (!header) {
    unkeyed += 1;
    return problem(res, 400, 'urn:idemdb:problem:invalid-request', 'Idempotency-Key required');
  }
  const key = header.startsWith('"') ? header.slice(1, -1).replace(/\\(.)/g, '$1') : header;
  let body;
  try {
    body = JSON.parse(raw);
  } catch {
    return problem(res, 400, 'urn:idemdb:problem:invalid-request', 'the body is not JSON');
  }
  const fingerprint = createHash('sha256').update(canonical(body)).digest('hex');
  const entry = stats(key);
  entry.sends += 1;
  sendsSeen += 1;
  entry.history.push(`${entry.sends}:sent(#${sendsSeen} of all)`);
  if (entry.delivered) entry.afterFinal += 1;
  const n = entry.sends;
  // A key another request took before this client came: bound to another body.
  if (draw(key, 'taken') < RATES.taken && !records.has(key)) {
    records.set(key, { fingerprint: 'another-request', state: 'done', status: 201, body: '{"payment":"someone-else"}' });
  }
  if (draw(key, n, 'slow') < RATES.slow) await sleep(Math.floor(draw(key, n, 'delay') * 120));
  const record = records.get(key);
  if (record) {
    if (record.fingerprint !== fingerprint) {
      note(entry, 'mismatch');
      delivered(res, entry);
      return problem(res, 422, 'urn:idemdb:problem:key-mismatch', 'this key was used with another request');
    }
    if (record.state === 'running') {
      note(entry, 'inProgress');
      return problem(res, 409, 'urn:idemdb:problem:in-progress', 'the first request with this key is still running', { 'retry-after': '1' });
    }
    if (record.state === 'uncertain') {
      note(entry, 'reconcile');
      delivered(res, entry);
      return problem(res, 409, 'urn:idemdb:problem:needs-reconciliation', 'the outcome of this key is unknown: reconcile first');
    }
    if (draw(key, n, 'lost') < RATES.lost) {
      note(entry, 'lost');
      return req.socket.destroy(); // the replay is lost too
    }
    return answer(res, entry, key, n, record.status, { 'content-type': 'application/json', 'idempotent-replayed': 'true' }, record.body);
  }
  // Before any effect: busy, or another service's problem in front of this one.
  if (draw(key, 'down') < RATES.down || draw(key, n, 'busy') < RATES.busy) {
    note(entry, 'busy');
    res.writeHead(503, { 'retry-after': '0', 'content-type': 'text/plain' });
    return res.end('busy, try again');
  }
  if (draw(key, n, 'throttled') < RATES.throttled) {
    note(entry, 'throttled');
    return problem(res, 429, 'urn:idemdb:problem:rate-limited', 'slow down', { 'retry-after': '120' });
  }
  if (n === 1 && draw(key, 'foreign') < RATES.foreign) {
    note(entry, 'foreign');
    delivered(res, entry);
    return problem(res, 400, 'https://gateway.example/problems/unavailable', 'the gateway refuses this payment');
  }
  const running = { fingerprint, state: 'running' };
  records.set(key, running);
  // Once per chosen key: the first send runs longer than the client waits (it retries into 409).
  if (n === 1 && draw(key, 'stall') < RATES.stall) {
    note(entry, 'stalled');
    await sleep(STALL_MS);
  }
  // The effect.
  effects += 1;
  note(entry, 'effects');
  const ref = String(body?.ref);
  perRef.set(ref, (perRef.get(ref) ?? 0) + 1);
  const result = JSON.stringify({ payment: `pay_${effects}`, amount: body?.amount, ref });
  if (draw(key, 'uncertain') < RATES.uncertain) {
    running.state = 'uncertain';
    note(entry, 'lost');
    return req.socket.destroy();
  }
  Object.assign(running, { state: 'done', status: 201, body: result });
  if (draw(key, n, 'lost') < RATES.lost) {
    note(entry, 'lost');
    return req.socket.destroy(); // the effect happened; its answer is lost
  }
  answer(res, entry, key, n, 201, { 'content-type': 'application/json' }, result);
}

// The control port (the driver's GET /stats and /reset): never refused, never delayed.
const control = createServer((req, res) => {
  const url = new URL(req.url, 'http://localhost');
  if (url.pathname === '/stats') {
    const run = url.searchParams.get('run') ?? '';
    const keys = Object.fromEntries([...perKey].filter(([key]) => key.startsWith(`${run}-`)));
    const refs = Object.fromEntries([...perRef].filter(([ref]) => ref.startsWith(`${run}-`)));
    res.writeHead(200, { 'content-type': 'application/json' });
    return res.end(JSON.stringify({ keys, refs, refused, unkeyed }));
  }
  if (url.pathname === '/reset') {
    refused = 0;
    unkeyed = 0;
    res.writeHead(204);
    return res.end();
  }
  res.writeHead(404);
  res.end();
});

const server = createServer({ keepAliveTimeout: 2000 }, (req, res) => {
  const url = new URL(req.url, 'http://localhost');
  if (req.method !== 'POST' || url.pathname !== '/payments') {
    res.writeHead(404);
    return res.end();
  }
  const chunks = [];
  req.on('data', (chunk) => chunks.push(chunk));
  req.on('end', () => {
    pay(req, res, Buffer.concat(chunks).toString('utf8')).catch((error) => {
      console.error(error);
      if (!res.headersSent) res.writeHead(500);
      res.end();
    });
  });
});

// Connections refused before anything is read: such a send never reached the service.
server.on('connection', (socket) => {
  connections += 1;
  if (draw('connection', connections, 'refused') < RATES.refused) {
    refused += 1;
    socket.destroy();
  }
});

server.listen(0, '127.0.0.1', () => {
  control.listen(0, '127.0.0.1', () => {
    console.log(`port ${server.address().port} control ${control.address().port}`);
  });
});
