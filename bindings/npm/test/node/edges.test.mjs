// Node, ESM: idempotentFetch at the edges of its promise, counting what the server saw (sends
// and effects) and what the store holds. Fields excluded from the fingerprint still travel; an
// answer too large to store needs attention at once; an outage charges no attempts and the
// intent goes out once when the server is back; an abort at any point leaves either the
// delivered result or a pending intent; a path without a base is refused before anything is
// stored; a file open that waits honours its signal.
import assert from 'node:assert/strict';
import { createServer } from 'node:http';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';

import {
  AbortedError,
  InvalidInputError,
  NeedsAttentionError,
  RetriesExhaustedError,
  StoreBusyError,
  autoResume,
  idempotentFetch,
  openFileStore,
  openFileStoreSync,
  openMemoryStore,
  resumePending,
} from 'idemdb';

const scope = { tenant: 'me', operation: 'pay' };
const fast = { maxAttempts: 3, baseDelayMs: 1, maxDelayMs: 5, timeoutMs: 5000 };
const dir = mkdtempSync(join(tmpdir(), 'idemdb-edges-'));
const ONE_MIB = 1024 * 1024;
const json = (value) => ({ method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(value) });

/**
 * The API: every request to a path is counted (`sends`), every key's effect happens once
 * (`effects`) and its body is kept (`bodies`). `/pay` answers 201; `/big` answers 201 with a
 * body over 1 MiB; `/busy` 503; `/busy-big` 503 with a body over 1 MiB; `/drop` performs the
 * effect and closes the connection unanswered; `/held` performs the effect and answers when
 * `release()` is called.
 */
function api() {
  const state = { sends: new Map(), effects: 0, keys: new Set(), bodies: [], held: [] };
  const server = createServer(async (req, res) => {
    const path = new URL(req.url, 'http://x').pathname.slice(1);
    const chunks = [];
    for await (const chunk of req) chunks.push(chunk);
    state.sends.set(path, (state.sends.get(path) ?? 0) + 1);
    state.bodies.push(Buffer.concat(chunks).toString('utf8'));
    const key = req.headers['idempotency-key'];
    if (path.startsWith('busy')) {
      res.writeHead(503, { 'content-type': 'text/plain' });
      return res.end(path === 'busy-big' ? 'x'.repeat(ONE_MIB + 1) : 'busy');
    }
    if (!state.keys.has(key)) {
      state.keys.add(key);
      state.effects += 1;
    }
    if (path === 'drop') return req.socket.destroy();
    if (path === 'held') await new Promise((resolve) => state.held.push(resolve));
    res.writeHead(201, { 'content-type': 'application/json' });
    res.end(path === 'big' ? `"${'x'.repeat(ONE_MIB)}"` : JSON.stringify({ key }));
  });
  return {
    state,
    server,
    sends: (path) => state.sends.get(path) ?? 0,
    release: () => state.held.splice(0).forEach((resolve) => resolve()),
    listen: (port = 0) => new Promise((resolve) => server.listen(port, '127.0.0.1', () => resolve(`http://127.0.0.1:${server.address().port}`))),
    close: () => new Promise((resolve) => { server.closeAllConnections(); server.close(resolve); }),
  };
}

/** A port nothing listens on (a connection to it is refused). */
async function freePort() {
  const probe = createServer();
  await new Promise((resolve) => probe.listen(0, '127.0.0.1', resolve));
  const { port } = probe.address();
  await new Promise((resolve) => probe.close(resolve));
  return port;
}

let service;
let base;
before(async () => {
  service = api();
  base = await service.listen();
});
after(() => service.close());

describe('fields excluded from the fingerprint', () => {
  test('are sent on every send, a resume after a restart included; the same key with another value is the same intent', async () => {
    const canonical = { exclude: ['/body/trace_id'] };
    const file = join(dir, 'excluded.idemdb');
    let store = await openFileStore(file);
    const down = `http://127.0.0.1:${await freePort()}`;
    await assert.rejects(
      idempotentFetch(store, '/pay', { scope, key: 'k-trace', canonical, baseUrl: down, retry: { ...fast, maxAttempts: 1 }, init: json({ amount: '10.50', trace_id: 't-1' }) }),
      RetriesExhaustedError,
    );
    store.close();
    store = await openFileStore(file); // a restart
    const before = service.state.bodies.length;
    const [resumed] = await resumePending(store, { baseUrl: base, retry: fast });
    assert.equal(resumed.response.status, 201);
    assert.deepEqual(service.state.bodies.slice(before).map((b) => JSON.parse(b)), [{ amount: '10.50', trace_id: 't-1' }], 'the server receives the excluded field');
    // The same key, another trace id: the same intent (its recorded answer, nothing sent).
    const again = await idempotentFetch(store, '/pay', { scope, key: 'k-trace', canonical, baseUrl: base, init: json({ amount: '10.50', trace_id: 't-2' }) });
    assert.equal(again.status, 201);
    assert.equal(service.state.bodies.length, before + 1, 'nothing sent again');
    // Another amount under the same key is another request.
    await assert.rejects(
      idempotentFetch(store, '/pay', { scope, key: 'k-trace', canonical, baseUrl: base, init: json({ amount: '99.00', trace_id: 't-1' }) }),
      (e) => e.code === 'IDEMDB_KEY_MISMATCH',
    );
    store.close();
  });

  test('a normalised field is sent as the app wrote it', async () => {
    const store = await openMemoryStore();
    const before = service.state.bodies.length;
    await idempotentFetch(store, '/pay', { scope, canonical: { normalise: { '/body/currency': 'uppercase' } }, baseUrl: base, retry: fast, init: json({ currency: 'eur' }) });
    assert.deepEqual(JSON.parse(service.state.bodies[before]), { currency: 'eur' });
  });
});

describe('an answer too large to store', () => {
  test('a final answer over 1 MiB needs attention at once: one send, one effect, never resent', async () => {
    const store = await openMemoryStore();
    const effects = service.state.effects;
    const error = await idempotentFetch(store, '/big', { scope, baseUrl: base, retry: fast, init: json({ n: 1 }) }).then(
      () => assert.fail('resolved'),
      (e) => e,
    );
    assert.ok(error instanceof NeedsAttentionError, `${error.name}: ${error.message}`);
    assert.equal(error.cause, 'answer_too_large');
    assert.match(error.message, /too large to store/);
    assert.equal(error.response.status, 201, 'the answer is handed to the caller');
    assert.equal((await error.response.arrayBuffer()).byteLength, ONE_MIB + 2, 'with its whole body');
    for (let pass = 0; pass < 25; pass++) await resumePending(store, { baseUrl: base, retry: fast });
    assert.equal(service.sends('big'), 1, 'sent once');
    assert.equal(service.state.effects - effects, 1, 'one effect');
    const [intent] = store.listIntents();
    assert.equal(intent.state, 'needs_attention');
    assert.equal(intent.cause, 'answer_too_large');
    assert.equal(intent.response.status, 201, 'the status and headers are kept');
    assert.equal(intent.response.body.length, 0, 'the body is not');
    // An operation whose answers are that large raises its limit.
    const roomy = await openMemoryStore({ policies: { pay: { maxResultBytes: 2 * ONE_MIB } } });
    const response = await idempotentFetch(roomy, '/big', { scope, baseUrl: base, retry: fast, init: json({ n: 1 }) });
    assert.equal((await response.arrayBuffer()).byteLength, ONE_MIB + 2);
    assert.equal(roomy.listIntents()[0].state, 'completed');
  });

  test('a retried answer over 1 MiB does not stop the budget from ending in needs attention', async () => {
    const store = await openMemoryStore();
    await assert.rejects(
      idempotentFetch(store, '/busy-big', { scope, baseUrl: base, retry: { ...fast, attemptsPerIntent: 2 }, init: json({ n: 2 }) }),
      (e) => e instanceof NeedsAttentionError && e.cause === 'retries_exhausted',
    );
    assert.equal(service.sends('busy-big'), 2);
    assert.equal(store.listIntents()[0].response.status, 503);
  });
});

describe('an outage', () => {
  test('a refused connection charges no attempt after the first; the worker sends the intent once when the server is back', async () => {
    const port = await freePort();
    const downBase = `http://127.0.0.1:${port}`;
    const store = await openMemoryStore();
    await assert.rejects(idempotentFetch(store, '/pay', { scope, baseUrl: downBase, retry: fast, init: json({ outage: 1 }) }), RetriesExhaustedError);
    assert.equal(store.pendingIntents()[0].attempts, 1, 'three refused sends, one attempt charged');
    const later = api();
    let passes = 0;
    let upAfter;
    const settled = new Promise((resolve) => {
      const stop = autoResume(store, {
        baseUrl: downBase,
        retry: fast,
        retryEveryMs: 20,
        onlinePollMs: 0,
        onResumed: (results) => {
          passes += 1;
          if (passes === 10) upAfter = later.listen(port); // the server comes back
          if (results.some(({ intent }) => intent.state !== 'pending')) {
            stop();
            resolve(results);
          }
        },
      });
    });
    const [result] = await settled;
    await upAfter;
    assert.equal(result.intent.state, 'completed', `${result.intent.state} ${result.intent.cause ?? ''} after ${passes} passes`);
    assert.ok(passes > 10);
    assert.equal(later.sends('pay'), 1, 'sent once the server is back');
    assert.equal(later.state.effects, 1);
    assert.equal(result.intent.attempts, 2, 'charged: the first refused send and the one that got through');
    await later.close();
  });

  test('a send that may have reached the server is charged', async () => {
    const store = await openMemoryStore();
    await assert.rejects(idempotentFetch(store, '/drop', { scope, baseUrl: base, retry: fast, init: json({ n: 3 }) }), RetriesExhaustedError);
    assert.equal(service.sends('drop'), 3);
    assert.equal(store.pendingIntents()[0].attempts, 3);
  });

  test('the budget is time too: past retry.maxPendingMs an intent needs attention, until reopened', async () => {
    const store = await openMemoryStore();
    const sends = service.sends('busy');
    const retry = { ...fast, maxPendingMs: 0 };
    await assert.rejects(
      idempotentFetch(store, '/busy', { scope, baseUrl: base, retry, init: json({ n: 4 }) }),
      (e) => e instanceof NeedsAttentionError && e.cause === 'retries_exhausted' && /pending for/.test(e.message),
    );
    assert.equal(service.sends('busy') - sends, 1);
    const [intent] = store.listIntents();
    store.reopenIntent(scope, intent.key);
    const [resumed] = await resumePending(store, { baseUrl: base, retry });
    assert.ok(resumed.error instanceof RetriesExhaustedError, 'reopened: sent again with its new budget');
    assert.equal(service.sends('busy') - sends, 1 + fast.maxAttempts);
  });
});

describe('an abort', () => {
  /** `store` whose method `name` aborts `controller` before it runs. */
  const abortingIn = (store, name, controller, when = () => true) =>
    new Proxy(store, {
      get(target, prop) {
        const value = Reflect.get(target, prop, target);
        if (typeof value !== 'function') return value;
        return (...args) => {
          if (prop === name && when(...args)) controller.abort();
          return value.apply(target, args);
        };
      },
    });

  async function settleAndCount(store, effects) {
    await resumePending(store, { baseUrl: base, retry: fast });
    const states = store.listIntents().map((i) => i.state);
    assert.deepEqual(states, ['completed']);
    assert.equal(service.state.effects - effects, 1, 'one effect in all');
  }

  test('while the intent is being stored: it stays pending, nothing is sent; resumed, it is sent once', async () => {
    const store = await openMemoryStore();
    const controller = new AbortController();
    const sends = service.sends('pay');
    const effects = service.state.effects;
    await assert.rejects(
      idempotentFetch(abortingIn(store, 'createIntent', controller), '/pay', { scope, baseUrl: base, retry: fast, signal: controller.signal, init: json({ a: 1 }) }),
      AbortedError,
    );
    assert.equal(service.sends('pay'), sends);
    // The marker of the send about to go was stored with the intent (one flush): it counts, as
    // a crash mid-send does.
    assert.deepEqual(
      [store.pendingIntents()[0].attempts, store.pendingIntents()[0].lastAttempt?.outcome],
      [1, 'sent'],
    );
    await settleAndCount(store, effects);
  });

  test('while the send is being recorded (a store that ignores `sending`): nothing is sent', async () => {
    const store = await openMemoryStore();
    const controller = new AbortController();
    const sends = service.sends('pay');
    const effects = service.state.effects;
    // A store whose createIntent does not take `sending`: the marker is written on its own.
    const plain = new Proxy(store, {
      get(target, prop) {
        const value = Reflect.get(target, prop, target);
        if (prop !== 'createIntent') return typeof value === 'function' ? value.bind(target) : value;
        return (scope, request, options) => value.call(target, scope, request, { ...options, sending: false });
      },
    });
    const wrapped = abortingIn(plain, 'recordAttempt', controller, (_scope, _key, attempt) => attempt.outcome === 'sent');
    await assert.rejects(idempotentFetch(wrapped, '/pay', { scope, baseUrl: base, retry: fast, signal: controller.signal, init: json({ a: 2 }) }), AbortedError);
    assert.equal(service.sends('pay'), sends, 'the abort came before the request left');
    assert.equal(store.pendingIntents().length, 1);
    await settleAndCount(store, effects);
  });

  test('while the request is in flight (the effect ran): it stays pending; resumed, the answer is replayed', async () => {
    const store = await openMemoryStore();
    const controller = new AbortController();
    const effects = service.state.effects;
    const call = idempotentFetch(store, '/held', { scope, baseUrl: base, retry: fast, signal: controller.signal, init: json({ a: 3 }) });
    while (service.state.held.length === 0) await new Promise((resolve) => setTimeout(resolve, 1));
    controller.abort();
    await assert.rejects(call, AbortedError);
    service.release();
    assert.equal(store.pendingIntents().length, 1);
    const resumed = resumePending(store, { baseUrl: base, retry: fast });
    while (service.state.held.length === 0) await new Promise((resolve) => setTimeout(resolve, 1));
    service.release();
    await resumed;
    assert.deepEqual(store.listIntents().map((i) => i.state), ['completed']);
    assert.equal(service.state.effects - effects, 1);
  });

  test('while the final answer is being recorded: the call completes and delivers it', async () => {
    const store = await openMemoryStore();
    const controller = new AbortController();
    const effects = service.state.effects;
    const response = await idempotentFetch(abortingIn(store, 'recordResponse', controller), '/pay', { scope, baseUrl: base, retry: fast, signal: controller.signal, init: json({ a: 4 }) });
    assert.ok(controller.signal.aborted);
    assert.equal(response.status, 201);
    assert.deepEqual(store.listIntents().map((i) => i.state), ['completed']);
    await settleAndCount(store, effects);
  });

  test('during the backoff after a 503: it stays pending with its attempt counted', async () => {
    const store = await openMemoryStore();
    const controller = new AbortController();
    const wrapped = abortingIn(store, 'recordAttempt', controller, (_scope, _key, attempt) => attempt.outcome === 'status');
    await assert.rejects(idempotentFetch(wrapped, '/busy', { scope, baseUrl: base, retry: fast, signal: controller.signal, init: json({ a: 5 }) }), AbortedError);
    const [intent] = store.pendingIntents();
    assert.equal(intent.attempts, 1);
    assert.deepEqual({ ...intent.lastAttempt, at: 0 }, { outcome: 'status', status: 503, at: 0 });
  });
});

describe('targets and file opens', () => {
  test('a path without baseUrl (Node has no location) is refused before anything is stored', async () => {
    const store = await openMemoryStore();
    await assert.rejects(
      idempotentFetch(store, '/pay', { scope, retry: fast, init: json({ n: 5 }) }),
      (e) => e instanceof InvalidInputError && e.code === 'IDEMDB_INVALID_REQUEST' && /baseUrl/.test(e.message),
    );
    await assert.rejects(
      idempotentFetch(store, '/pay', { scope, baseUrl: 'not a url', retry: fast, init: json({ n: 5 }) }),
      (e) => e instanceof InvalidInputError && e.code === 'IDEMDB_INVALID_ARGUMENT',
    );
    assert.deepEqual(store.listIntents(), []);
  });

  test('openFileStore honours { wait, signal, onQueued }; openFileStoreSync refuses them', async () => {
    const file = join(dir, 'held.idemdb');
    const holder = await openFileStore(file);
    await assert.rejects(openFileStore(file, { signal: AbortSignal.abort() }), AbortedError);
    const controller = new AbortController();
    const queued = [];
    const waiting = openFileStore(file, { wait: true, signal: controller.signal, onQueued: (info) => queued.push(info) });
    await new Promise((resolve) => setTimeout(resolve, 60));
    controller.abort();
    await assert.rejects(waiting, (e) => e instanceof AbortedError && e.code === 'IDEMDB_ABORTED');
    assert.deepEqual(queued, [{ name: file, waitMs: undefined }]);
    await assert.rejects(openFileStore(file, { wait: 30 }), (e) => e instanceof StoreBusyError && e.waitedMs === 30);
    for (const options of [{ wait: true }, { signal: new AbortController().signal }, { onQueued: () => {} }]) {
      assert.throws(() => openFileStoreSync(file, options), (e) => e instanceof InvalidInputError && e.code === 'IDEMDB_INVALID_ARGUMENT', Object.keys(options)[0]);
    }
    holder.close();
    const next = await openFileStore(file, { wait: 1000, signal: new AbortController().signal });
    assert.ok(next.isOpen, 'an aborted wait left no lock behind');
    next.close();
  });
});
