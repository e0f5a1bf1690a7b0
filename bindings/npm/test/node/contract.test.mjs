// Node, ESM: idempotentFetch against a service that answers each final problem type. Every
// intent ends completed or needs_attention, and none is sent again once it is final. Also the
// contract's shared cases (tests/testdata/answers.json, run by the Rust core too), relative
// targets, the header allow-list (the store file's bytes never hold a secret), an aborted
// signal, and the stored-intent notification.
import assert from 'node:assert/strict';
import { createServer } from 'node:http';
import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';

import {
  AbortedError,
  KeyMismatchError,
  NeedsAttentionError,
  InvalidInputError,
  RetriesExhaustedError,
  StorageError,
  autoResume,
  TransitionError,
  UnsupportedError,
  classifyAnswer,
  problemCode,
  STORED_RESPONSE_HEADERS,
  toIdemdbError,
  idempotentFetch,
  openFileStore,
  openMemoryStore,
  resumePending,
} from 'idemdb';

const scope = { tenant: 'me', operation: 'pay' };
const fast = { maxAttempts: 5, baseDelayMs: 1, maxDelayMs: 5, timeoutMs: 2000 };
const dir = mkdtempSync(join(tmpdir(), 'idemdb-contract-'));

function problem(res, status, slug) {
  res.writeHead(status, { 'content-type': 'application/problem+json' });
  res.end(JSON.stringify({ type: `urn:idemdb:problem:${slug}`, title: 't', status }));
}

let server;
let base;
const hits = new Map();
const heard = [];
before(async () => {
  server = createServer((req, res) => {
    const path = new URL(req.url, 'http://x').pathname.slice(1);
    hits.set(path, (hits.get(path) ?? 0) + 1);
    heard.push(req.headers);
    req.resume();
    if (path === 'replayed-500') {
      res.writeHead(500, { 'idempotent-replayed': 'true' });
      return res.end('stored failure');
    }
    if (path === 'reconcile') return problem(res, 409, 'needs-reconciliation');
    if (path === 'expired') return problem(res, 410, 'expired');
    if (path === 'provider') return problem(res, 409, 'provider-key-expired');
    if (path === 'conflict') return problem(res, 422, 'key-mismatch');
    if (path === 'not-found') return res.writeHead(404).end('no such account');
    if (path === 'busy') return res.writeHead(503).end('busy');
    if (path === 'secret-answer') {
      res.writeHead(201, {
        'content-type': 'application/json',
        'x-api-key': 'sk-RSECRET-1',
        'x-auth-token': 'tok-RSECRET-2',
        authorization: 'Bearer tok-RSECRET-3',
        'www-authenticate': 'Bearer realm=RSECRET-4',
        location: '/v1/payments/p_1?token=RSECRET-5#x',
      });
      return res.end('{"id":"p_1"}');
    }
    // Another service's problems whose types happen to end like idemdb's, and a service's own base.
    const foreign = { 'other-unavailable': [400, 'https://other.example/problems/unavailable'], 'other-closed': [403, 'https://other.example/problems/closed'], 'other-expired': [401, 'https://other.example/problems/expired'], 'other-corrupt': [404, 'https://other.example/problems/corrupt'], 'based-reconcile': [409, 'https://api.example.com/problems/needs-reconciliation'] }[path];
    if (foreign) {
      res.writeHead(foreign[0], { 'content-type': 'application/problem+json' });
      return res.end(JSON.stringify({ type: foreign[1], title: 't', status: foreign[0] }));
    }
    res.writeHead(201).end('ok');
  });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  base = `http://127.0.0.1:${server.address().port}`;
});
after(() => server.close());

describe('retry contract', () => {
  test('the shared answer cases hold (the Rust core runs the same file)', () => {
    const { cases } = JSON.parse(readFileSync(new URL('../../../../../../tests/testdata/answers.json', import.meta.url), 'utf8'));
    assert.ok(cases.length >= 20);
    for (const c of cases) {
      const problem = problemCode(c.type, c.code, c.base);
      const verdict = classifyAnswer(c.status, c.replayed, problem);
      const name = verdict.class === 'needs_attention' ? `needs_attention:${verdict.cause}` : verdict.class;
      assert.equal(name, c.class, JSON.stringify(c));
    }
  });

  test('every final answer ends the intent, and nothing is resent', async () => {
    hits.clear();
    const store = await openMemoryStore();
    const noticed = [];
    const options = { scope, baseUrl: base, retry: { ...fast, attemptsPerIntent: 3 }, onNeedsAttention: (i) => noticed.push(i.key) };
    const send = (path) => idempotentFetch(store, `/${path}`, { ...options, init: { method: 'POST', body: path } });
    const replayed = await send('replayed-500');
    assert.equal(replayed.status, 500);
    assert.equal((await send('not-found')).status, 404);
    await assert.rejects(send('conflict'), KeyMismatchError);
    for (const [path, cause] of [['reconcile', 'needs_reconciliation'], ['expired', 'expired'], ['provider', 'provider_key_expired'], ['busy', 'retries_exhausted']]) {
      await assert.rejects(send(path), (e) => e instanceof NeedsAttentionError && e.code === 'IDEMDB_NEEDS_ATTENTION' && e.cause === cause && e.response !== undefined, path);
    }
    const counts = () => Object.fromEntries(hits);
    const expected = { 'replayed-500': 1, 'not-found': 1, conflict: 1, reconcile: 1, expired: 1, provider: 1, busy: 3 };
    assert.deepEqual(counts(), expected);
    assert.equal(noticed.length, 4, 'the app is told of each intent that needs attention');
    assert.deepEqual(await resumePending(store, { baseUrl: base, retry: fast }), []);
    assert.deepEqual(counts(), expected, 'nothing is resent after a resume');
    const states = store.listIntents().map((i) => i.state);
    assert.equal(states.length, 7);
    assert.ok(states.every((s) => s === 'completed' || s === 'needs_attention'), states.join());
    const waiting = store.intentsNeedingAttention();
    assert.equal(waiting.length, 4);
    const reconcile = waiting.find((i) => new TextDecoder().decode(i.request).includes('reconcile'));
    assert.equal(reconcile.response.status, 409, 'the last answer is kept');
    store.reopenIntent(scope, reconcile.key);
    const resumed = await resumePending(store, { baseUrl: base, retry: fast });
    assert.equal(resumed.length, 1);
    assert.equal(hits.get('reconcile'), 2);
  });

  test("another service's problem types are classified by their status; idemdb's are read in full", async () => {
    hits.clear();
    const store = await openMemoryStore();
    const options = { scope, baseUrl: base, retry: { ...fast, attemptsPerIntent: 5 }, problemBase: 'https://api.example.com/problems/' };
    const send = (path) => idempotentFetch(store, `/${path}`, { ...options, init: { method: 'POST', body: path } });
    for (const [path, status] of [['other-unavailable', 400], ['other-closed', 403], ['other-expired', 401], ['other-corrupt', 404]]) {
      assert.equal((await send(path)).status, status, `${path}: the answer is final`);
      assert.equal(hits.get(path), 1, `${path}: sent once`);
    }
    await assert.rejects(send('based-reconcile'), (e) => e instanceof NeedsAttentionError && e.cause === 'needs_reconciliation');
    assert.equal(hits.get('based-reconcile'), 1);
    assert.equal(problemCode('https://other.example/problems/expired', undefined), undefined);
    assert.equal(problemCode('urn:idemdb:problem:expired', undefined), 'IDEMDB_EXPIRED');
  });

  test('the attempt budget counts across resumes', async () => {
    hits.clear();
    const store = await openMemoryStore();
    const retry = { ...fast, maxAttempts: 2, attemptsPerIntent: 5 };
    await assert.rejects(idempotentFetch(store, '/busy', { scope, baseUrl: base, retry, init: { method: 'POST' } }), RetriesExhaustedError);
    const [first] = await resumePending(store, { baseUrl: base, retry });
    assert.equal(first.intent.attempts, 4, 'the count is kept across resumes');
    const [second] = await resumePending(store, { baseUrl: base, retry });
    assert.ok(second.error instanceof NeedsAttentionError && second.error.cause === 'retries_exhausted');
    assert.equal(hits.get('busy'), 5);
    assert.deepEqual(await resumePending(store, { baseUrl: base, retry }), []);
    assert.equal(hits.get('busy'), 5);
  });

  test('a stored path reaches the service at the base given at resume', async () => {
    hits.clear();
    const store = await openMemoryStore();
    await assert.rejects(
      idempotentFetch(store, '/moved', { scope, baseUrl: 'http://127.0.0.1:9', retry: { ...fast, maxAttempts: 1 }, init: { method: 'POST' } }),
      RetriesExhaustedError,
    );
    const [intent] = store.pendingIntents();
    assert.equal(JSON.parse(new TextDecoder().decode(intent.request)).url, '/moved', 'the path is stored, not an address');
    const [resumed] = await resumePending(store, { baseUrl: base, retry: fast });
    assert.equal(resumed.response.status, 201);
    assert.equal(hits.get('moved'), 1);
  });

  test('a secret header is sent and never reaches the store file', async () => {
    const path = join(dir, 'secret.idemdb');
    const store = await openFileStore(path);
    heard.length = 0;
    await idempotentFetch(store, `${base}/ok`, {
      scope,
      retry: fast,
      init: { method: 'POST', headers: { 'x-api-key': 'sk-SECRET-1', 'content-type': 'text/plain' }, body: 'x' },
      transportHeaders: () => ({ authorization: 'Bearer tok-SECRET-2' }),
    });
    store.close();
    assert.equal(heard[0]['x-api-key'], 'sk-SECRET-1');
    assert.equal(heard[0].authorization, 'Bearer tok-SECRET-2');
    const bytes = readFileSync(path);
    for (const secret of ['SECRET', 'x-api-key', 'authorization']) assert.equal(bytes.indexOf(secret), -1, secret);
    assert.notEqual(bytes.indexOf('text/plain'), -1, 'the allowed header is stored');
  });

  test("an answer's secret headers never reach the store file: only the allow-list is kept, a location without its query", async () => {
    const path = join(dir, 'secret-answer.idemdb');
    const store = await openFileStore(path);
    const response = await idempotentFetch(store, `${base}/secret-answer`, { scope, retry: fast, init: { method: 'POST', body: 'x' } });
    assert.equal(response.status, 201);
    const [intent] = store.listIntents();
    assert.deepEqual(intent.response.headers.map(([name]) => name).sort(), ['content-type', 'location']);
    assert.deepEqual(intent.response.headers.find(([name]) => name === 'location'), ['location', '/v1/payments/p_1']);
    store.close();
    const bytes = readFileSync(path);
    for (const secret of ['RSECRET', 'x-api-key', 'x-auth-token', 'www-authenticate']) assert.equal(bytes.indexOf(secret), -1, secret);
    assert.deepEqual([...STORED_RESPONSE_HEADERS], ['content-type', 'content-language', 'etag', 'last-modified', 'location', 'retry-after', 'idempotent-replayed']);
  });

  test('an aborted signal stores and sends nothing; onStored gives the key before the send', async () => {
    hits.clear();
    const store = await openMemoryStore();
    await assert.rejects(
      idempotentFetch(store, `${base}/ok`, { scope, signal: AbortSignal.abort(), init: { method: 'POST' } }),
      AbortedError,
    );
    assert.equal(store.listIntents().length, 0);
    assert.equal(hits.size, 0);
    let stored;
    await idempotentFetch(store, `${base}/ok`, { scope, retry: fast, init: { method: 'POST' }, onStored: (i) => { stored = { key: i.key, hits: hits.size }; } });
    assert.equal(stored.hits, 0, 'told before the first send');
    assert.equal(stored.key, store.listIntents()[0].key);
  });

  test('every engine code has its class; only storage codes are StorageError', () => {
    const expected = { IDEMDB_FENCE_EXHAUSTED: TransitionError, IDEMDB_READ_ONLY: UnsupportedError, IDEMDB_UNKNOWN_NAME: InvalidInputError };
    for (const [code, Class] of Object.entries(expected)) {
      const error = toIdemdbError(Object.assign(new Error('m'), { code }));
      assert.ok(error instanceof Class && error.code === code, `${code} → ${error.name}`);
    }
    const storage = ['IDEMDB_STORAGE', 'IDEMDB_COMMIT_UNKNOWN', 'IDEMDB_CORRUPT'];
    for (const code of storage) assert.ok(toIdemdbError(Object.assign(new Error('m'), { code })) instanceof StorageError, code);
    for (const code of ['IDEMDB_NEEDS_ATTENTION', 'IDEMDB_KEY_MISMATCH', 'IDEMDB_ABORTED']) {
      const error = toIdemdbError(Object.assign(new Error('m'), { code }));
      assert.ok(!(error instanceof StorageError) && error.code === code, code);
    }
  });

  test('autoResume takes a signal: aborted, it sends nothing; aborting stops the sends', async () => {
    const store = await openMemoryStore();
    store.createIntent(scope, { method: 'POST', url: '/ok', headers: {} });
    const calls = [];
    const fetch = async (url) => { calls.push(url); return new Response('ok', { status: 201 }); };
    autoResume(store, { signal: AbortSignal.abort(), baseUrl: base, fetch, retryEveryMs: 0, onlinePollMs: 0 });
    for (let i = 0; i < 20; i++) await new Promise((resolve) => setImmediate(resolve));
    assert.deepEqual(calls, []);
    assert.equal(store.pendingIntents()[0].attempts, 0);
    const controller = new AbortController();
    const done = new Promise((resolve) => {
      autoResume(store, { signal: controller.signal, baseUrl: base, fetch, retryEveryMs: 0, onlinePollMs: 0, onResumed: resolve });
    });
    const [result] = await done;
    assert.equal(result.response.status, 201);
    controller.abort();
    assert.deepEqual(calls, [`${base}/ok`]);
  });
});
