// Node, ESM: the packed tarball installed as `idemdb` in a scratch project.
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, realpathSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';

import {
  AbandonedError,
  AbortedError,
  IdemdbError,
  InvalidInputError,
  KeyMismatchError,
  NotFoundError,
  RetriesExhaustedError,
  StoreBusyError,
  StoreClosedError,
  TransitionError,
  autoResume,
  fingerprint,
  idempotentFetch,
  newKey,
  openFileStore,
  openHostStore,
  openMemoryStore,
  resumePending,
  sendIntent,
} from 'idemdb';
import { memoryHost } from './hosts.mjs';
import { startServer } from '../server.mjs';

const scope = { tenant: 'me', operation: 'pay' };
const text = (bytes) => new TextDecoder().decode(bytes);
const dir = mkdtempSync(join(tmpdir(), 'idemdb-node-'));
const fast = { maxAttempts: 5, baseDelayMs: 5, maxDelayMs: 50, timeoutMs: 2000 };

describe('package', () => {
  test('the installed version is the crate version, and every export condition has types', () => {
    const require = createRequire(import.meta.url);
    const pkgPath = require.resolve('idemdb/package.json');
    const pkg = JSON.parse(readFileSync(pkgPath, 'utf8'));
    const cargo = readFileSync(process.env.IDEMDB_CARGO_TOML, 'utf8');
    assert.equal(pkg.version, /\[workspace\.package\][^[]*?version\s*=\s*"([^"]+)"/s.exec(cargo)[1]);
    const root = join(pkgPath, '..');
    const walk = (node, conditions) => {
      if (typeof node === 'string') return assert.ok(existsSync(join(root, node)), `${conditions} -> ${node} missing`);
      if (!('types' in node) && Object.keys(node).some((k) => k === 'default')) assert.fail(`${conditions} has no types`);
      for (const [k, v] of Object.entries(node)) walk(v, `${conditions}/${k}`);
    };
    walk(pkg.exports['.'], '.');
    for (const condition of ['node', 'browser', 'workerd', 'worker', 'import', 'require']) assert.ok(condition in pkg.exports['.'], condition);
  });
});

describe('intents', () => {
  test('create persists canonical request and fingerprint; same intent again is idempotent', async () => {
    const store = await openMemoryStore();
    const intent = store.createIntent(scope, { b: 1, a: ' x ', trace_id: 't1' }, { canonical: { exclude: ['/trace_id'], normalise: { '/a': 'trim' } } });
    assert.equal(intent.state, 'pending');
    assert.match(intent.key, /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
    assert.equal(text(intent.request), '{"a":"x","b":1}');
    assert.equal(intent.fingerprint, fingerprint('{"a":"x","b":1}'));
    const again = store.createIntent(scope, '{"a":"x","b":1,"trace_id":"t2"}', { key: intent.key, canonical: { exclude: ['/trace_id'] } });
    assert.deepEqual(again, intent);
    assert.throws(
      () => store.createIntent(scope, { a: 'y' }, { key: intent.key }),
      (e) => e instanceof KeyMismatchError && e.code === 'IDEMDB_KEY_MISMATCH' && e.response === undefined,
    );
    store.close();
  });

  test('attempts, final response, abandon and pending listing', async () => {
    const store = await openMemoryStore();
    const one = store.createIntent(scope, { n: 1 });
    const two = store.createIntent({ tenant: 'me', operation: 'refund' }, { n: 2 });
    const pending = store.pendingIntents();
    assert.deepEqual(new Set(pending.map((i) => i.key)), new Set([one.key, two.key]));
    assert.ok(pending[0].createdAt <= pending[1].createdAt, 'oldest first');
    store.recordAttempt(scope, one.key, { outcome: 'sent' });
    let after = store.recordAttempt(scope, one.key, { outcome: 'status', status: 503 });
    assert.equal(after.attempts, 1);
    assert.deepEqual({ ...after.lastAttempt, at: 0 }, { outcome: 'status', status: 503, at: 0 });
    after = store.recordResponse(scope, one.key, { status: 201, headers: [['content-type', 'application/json']], body: '{"id":1}' });
    assert.equal(after.state, 'completed');
    assert.equal(after.response.status, 201);
    assert.equal(text(after.response.body), '{"id":1}');
    assert.throws(() => store.recordAttempt(scope, one.key, { outcome: 'sent' }), (e) => e instanceof TransitionError && e.code === 'IDEMDB_INTENT_FINISHED');
    const abandoned = store.abandonIntent({ tenant: 'me', operation: 'refund' }, two.key, 'user cancelled');
    assert.equal(abandoned.state, 'abandoned');
    assert.equal(abandoned.reason, 'user cancelled');
    assert.deepEqual(store.pendingIntents(), []);
    assert.equal(store.listIntents().length, 2);
    assert.deepEqual(store.purgeIntents({ keepForMs: 60_000 }), { removed: 0, more: false });
    assert.deepEqual(store.purgeIntents({ keepForMs: 0 }), { removed: 2, more: false });
    assert.throws(() => store.recordAttempt(scope, 'missing-key', { outcome: 'sent' }), NotFoundError);
  });

  test('a batch of intents is one commit: all or nothing', async () => {
    const store = await openMemoryStore();
    const made = store.createIntents(scope, [{ n: 1 }, { n: 2 }, '{"n":3}'], { keys: ['k-1', 'k-2'] });
    assert.deepEqual(made.map((i) => i.key).slice(0, 2), ['k-1', 'k-2']);
    assert.match(made[2].key, /^[0-9a-f-]{36}$/);
    assert.throws(() => store.createIntents(scope, [{ n: 4 }, { n: 99 }], { keys: ['k-4', 'k-1'] }), KeyMismatchError);
    assert.equal(store.getIntent(scope, 'k-4'), null);
    assert.equal(store.pendingIntents().length, 3);
  });

  test('errors are typed Error subclasses with stable codes, never strings', async () => {
    const store = await openMemoryStore();
    const cases = [
      [() => store.createIntent(scope, '{not json'), InvalidInputError, 'IDEMDB_INVALID_REQUEST'],
      [() => store.createIntent(scope, {}, { key: 'has space' }), InvalidInputError, 'IDEMDB_INVALID_KEY'],
      [() => store.createIntent({ tenant: '', operation: 'x' }, {}), InvalidInputError, 'IDEMDB_INVALID_KEY'],
      [() => store.abandonIntent(scope, 'nope', 'x'), NotFoundError, 'IDEMDB_NOT_FOUND'],
      [() => store.reserve(scope, 'k', 'not-hex'), InvalidInputError, 'IDEMDB_INVALID_ARGUMENT'],
      [() => store.complete({ fence: 1n }, 'x'), InvalidInputError, 'IDEMDB_INVALID_ARGUMENT'],
    ];
    for (const [f, Class, code] of cases) {
      assert.throws(f, (e) => e instanceof Class && e instanceof IdemdbError && e instanceof Error && e.code === code && e.name === Class.name && e.message.length > 0);
    }
    store.close();
    store.close();
    assert.throws(() => store.pendingIntents(), (e) => e instanceof StoreClosedError && e.code === 'IDEMDB_CLOSED');
  });
});

describe('intent pages and iteration', () => {
  const refund = { tenant: 'me', operation: 'refund' };

  test('pages walk every intent once, in key order, with a cursor; the filter keeps one state', async () => {
    const store = await openMemoryStore();
    const made = [
      ...store.createIntents(scope, Array.from({ length: 150 }, (_, n) => ({ n }))),
      ...store.createIntents(refund, Array.from({ length: 100 }, (_, n) => ({ n }))),
    ];
    for (const intent of made.slice(0, 40)) store.recordResponse(scope, intent.key, { status: 201, body: 'ok' });
    const all = store.listIntents().map((i) => `${i.tenant}/${i.operation}/${i.key}`);
    assert.equal(all.length, 250);

    const walked = [];
    const sizes = [];
    let after = null;
    do {
      const page = store.intentPage({ after, limit: 100 });
      sizes.push(page.intents.length);
      walked.push(...page.intents.map((i) => `${i.tenant}/${i.operation}/${i.key}`));
      after = page.next;
    } while (after !== null);
    assert.deepEqual(sizes, [100, 100, 50]);
    assert.deepEqual(walked, all, 'the pages are listIntents in order, none twice, none left out');

    const pending = [];
    for await (const intent of store.intents({ state: 'pending', pageSize: 7 })) pending.push(intent);
    assert.equal(pending.length, 210);
    assert.ok(pending.every((i) => i.state === 'pending'));
    assert.deepEqual(new Set(pending.map((i) => i.key)), new Set(store.pendingIntents().map((i) => i.key)));
    const done = store.intentPage({ state: 'completed', limit: 1000 });
    assert.equal(done.intents.length, 40);
    assert.equal(done.next, null);
    store.close();
  });

  test('an intent created during an iteration after its cursor is met; none is met twice', async () => {
    const store = await openMemoryStore();
    store.createIntents(scope, [{ n: 1 }, { n: 2 }, { n: 3 }], { keys: ['b-1', 'b-2', 'b-3'] });
    const seen = [];
    for await (const intent of store.intents({ pageSize: 1 })) {
      seen.push(intent.key);
      if (intent.key === 'b-1') {
        store.createIntent(scope, { n: 0 }, { key: 'a-0' }); // before the cursor: not met
        store.createIntent(scope, { n: 9 }, { key: 'z-9' }); // after it: met
      }
    }
    assert.deepEqual(seen, ['b-1', 'b-2', 'b-3', 'z-9']);
    assert.equal(store.listIntents().length, 5);
  });

  test('bad page arguments are typed errors; an aborted iteration stops with AbortedError', async () => {
    const store = await openMemoryStore();
    store.createIntents(scope, [{ n: 1 }, { n: 2 }, { n: 3 }]);
    for (const options of [{ limit: 0 }, { limit: 10_001 }, { limit: 1.5 }, { after: 'xyz' }, { after: 'abc' }, { after: '' }]) {
      assert.throws(() => store.intentPage(options), (e) => e instanceof InvalidInputError && e.code === 'IDEMDB_INVALID_ARGUMENT', JSON.stringify(options));
    }
    // A state the core does not name is refused with the core's code for an unknown name.
    assert.throws(() => store.intentPage({ state: 'done' }), (e) => e instanceof InvalidInputError && e.code === 'IDEMDB_UNKNOWN_NAME');
    const controller = new AbortController();
    const seen = [];
    await assert.rejects(
      (async () => {
        for await (const intent of store.intents({ pageSize: 1, signal: controller.signal })) {
          seen.push(intent.key);
          controller.abort();
        }
      })(),
      (e) => e instanceof AbortedError && e.code === 'IDEMDB_ABORTED',
    );
    assert.equal(seen.length, 1);
    store.close();
    await assert.rejects(store.intents().next(), (e) => e instanceof StoreClosedError);
  });

  test('Symbol.dispose closes a store and releases its file', async () => {
    const file = join(dir, 'disposed.idemdb');
    const first = await openFileStore(file);
    first.createIntent(scope, { n: 1 }, { key: 'kept' });
    await assert.rejects(openFileStore(file), StoreBusyError);
    first[Symbol.dispose]();
    assert.equal(first.isOpen, false);
    const second = await openFileStore(file);
    assert.equal(second.getIntent(scope, 'kept').key, 'kept');
    second[Symbol.dispose]();
    second[Symbol.dispose]();
    assert.equal(second.isOpen, false);
  });
});

describe('reserve and replay', () => {
  test('acquire, complete, replay byte for byte, mismatch, stale lease', async () => {
    const store = await openMemoryStore({ policies: { pay: { leaseTtlMs: 60_000 } } });
    const key = newKey();
    const fp = fingerprint({ amount: '1.00' });
    const first = store.reserve(scope, key, fp);
    assert.equal(first.status, 'acquired');
    assert.equal(typeof first.lease.fence, 'bigint');
    assert.equal(store.reserve(scope, key, fp).status, 'in_progress');
    const renewed = store.renew(first.lease);
    store.complete(renewed, '{"charge":"ch_1"}');
    const replay = store.reserve(scope, key, fp);
    assert.equal(replay.status, 'replay');
    assert.equal(text(replay.body), '{"charge":"ch_1"}');
    assert.deepEqual(store.reserve(scope, key, fingerprint({ amount: '2.00' })), { status: 'mismatch', stored: 'completed' });
    assert.throws(() => store.complete(first.lease, 'again'), TransitionError);
    assert.equal(store.get(scope, key).state, 'completed');
    assert.equal(store.reserveRequest(scope, key, { amount: '1.00' }).status, 'replay');
  });
});

describe('file store (Node file handle)', () => {
  test('intents survive reopening; one process at a time; snapshots round-trip', async () => {
    const file = join(dir, 'client.idemdb');
    let store = await openFileStore(file);
    const intent = store.createIntent(scope, { amount: '5.00' });
    await assert.rejects(openFileStore(file), (e) => e instanceof StoreBusyError && e.code === 'IDEMDB_STORE_BUSY');
    store.close();
    store = await openFileStore(file);
    assert.deepEqual(store.pendingIntents().map((i) => i.key), [intent.key]);
    const copy = await openMemoryStore({ snapshot: store.exportSnapshot() });
    assert.equal(copy.pendingIntents()[0].key, intent.key);
    store.close();
  });

  test('a process killed without closing loses nothing it was told was stored', async () => {
    const file = join(dir, 'killed.idemdb');
    const child = `
      import { openFileStore } from 'idemdb';
      const store = await openFileStore(${JSON.stringify(file)});
      for (let i = 0; i < 20; i++) { const it = store.createIntent({ tenant: 'me', operation: 'pay' }, { i }); console.log(it.key); }
      process.kill(process.pid, 'SIGKILL');
    `;
    const run = spawnSync(process.execPath, ['--input-type=module', '-e', child], { cwd: process.cwd(), encoding: 'utf8' });
    assert.equal(run.signal, 'SIGKILL');
    const keys = run.stdout.trim().split('\n');
    assert.equal(keys.length, 20);
    const store = await openFileStore(file); // the stale lock of the dead process is taken over
    assert.deepEqual(new Set(store.pendingIntents().map((i) => i.key)), new Set(keys));
    store.close();
  });

  test('a taker killed inside its take-over never blocks the next open; a live one is waited for', async () => {
    const file = join(dir, 'takeover.idemdb');
    (await openFileStore(file)).close();
    const lock = `${realpathSync(file)}.lock`;
    const guard = `${lock}.takeover`;
    const gone = spawnSync(process.execPath, ['-e', '']).pid; // a pid whose process has ended
    const holder = (pid) => `${pid}\nidemdb-holder 1 runtime=node access=write started=- token=0123456789abcdef\n`;
    for (const left of [holder(gone), `${gone}\n`]) {
      writeFileSync(lock, holder(gone));
      writeFileSync(guard, left);
      const store = await openFileStore(file); // before: "could not take ..." for 5 s
      assert.equal(existsSync(guard), false, 'the dead taker\'s guard is gone');
      store.close();
      assert.equal(existsSync(lock), false, 'released');
    }
    // A live taker's guard, removed by that taker 200 ms later: waited for, not refused.
    const taker = spawn('sh', ['-c', `sleep 0.2; rm -f '${guard}'; sleep 30`], { stdio: 'ignore' });
    try {
      writeFileSync(lock, holder(gone));
      writeFileSync(guard, holder(taker.pid));
      const store = await openFileStore(file);
      assert.equal(existsSync(guard), false);
      store.close();
    } finally {
      taker.kill('SIGKILL');
    }
  });

  test('a store file written here opens natively, and a native one opens here', { skip: !process.env.IDEMDB_SNAPSHOT_TOOL }, async () => {
    const file = join(dir, 'to-native.idemdb');
    const store = await openFileStore(file);
    const intent = store.createIntent({ tenant: 'node', operation: 'pay' }, { from: 'node' });
    store.close();
    const read = spawnSync(process.env.IDEMDB_SNAPSHOT_TOOL, ['read', file], { encoding: 'utf8' });
    assert.equal(read.status, 0, read.stderr);
    assert.match(read.stdout, /^verify ok$/m);
    assert.match(read.stdout, new RegExp(`^intent node pay ${intent.key} pending attempts=0 request=\\{"from":"node"\\}$`, 'm'));
    const nativeFile = join(dir, 'from-native.idemdb');
    const write = spawnSync(process.env.IDEMDB_SNAPSHOT_TOOL, ['write', nativeFile], { encoding: 'utf8' });
    assert.equal(write.status, 0, write.stderr);
    const native = await openFileStore(nativeFile);
    assert.deepEqual(native.pendingIntents().map((i) => [i.key, i.attempts]), [['native-intent-1', 1]]);
    assert.equal(text(native.get({ tenant: 'native', operation: 'pay' }, 'native-record-1').body), 'native-body');
    native.close();
  });

  test('host callbacks back a store (an edge host\'s storage)', async () => {
    const host = memoryHost();
    const store = await openHostStore(host);
    const before = host.flushes;
    const intent = store.createIntent(scope, { via: 'host' });
    assert.equal(host.flushes - before, 1, 'one durable flush per commit');
    store.close();
    const reopened = await openHostStore(host);
    assert.equal(reopened.pendingIntents()[0].key, intent.key);
    // A failing write is a typed storage error; what was stored before stays.
    const healthyWrite = host.write;
    host.write = () => { throw new Error('disk full'); };
    assert.throws(() => reopened.createIntent(scope, { lost: true }), (e) => e instanceof IdemdbError && e.code === 'IDEMDB_STORAGE' && /disk full/.test(e.message));
    host.write = healthyWrite;
    reopened.close();
    const after = await openHostStore(host);
    assert.deepEqual(after.pendingIntents().map((i) => i.key), [intent.key]);
    after.close();
  });
});

describe('crash consistency (host storage that tracks written vs durable bytes)', () => {
  /** Storage over `state.volatile`; `flush` copies it to `state.durable`; writes fail after `state.budget`. */
  function crashingHost(state) {
    const resize = (bytes, length) => {
      const next = new Uint8Array(length);
      next.set(bytes.subarray(0, Math.min(length, bytes.length)));
      return next;
    };
    return {
      read: (offset, out) => out.set(state.volatile.subarray(offset, offset + out.length)),
      write: (offset, data) => {
        if (state.budget-- <= 0) throw new Error('power cut');
        state.volatile.set(data, offset);
      },
      size: () => state.volatile.length,
      truncate: (length) => {
        if (state.budget <= 0) throw new Error('power cut');
        state.volatile = resize(state.volatile, length);
      },
      flush: () => {
        if (state.budget <= 0) throw new Error('power cut');
        state.durable = state.volatile.slice();
      },
    };
  }
  const fixed = (bytes) => crashingHost({ volatile: bytes, durable: bytes, budget: Infinity });

  test('a power cut at any write: both the durable and the written image open, with every confirmed intent', async () => {
    let cuts = 0;
    for (let budget = 0; budget < 80; budget++) {
      const state = { volatile: new Uint8Array(0), durable: new Uint8Array(0), budget: Infinity };
      const store = await openHostStore(crashingHost(state));
      const confirmed = [];
      const attempted = [];
      state.budget = budget;
      for (let i = 0; i < 8; i++) {
        const key = `k-${i}`;
        attempted.push(key);
        try {
          store.createIntent(scope, { i }, { key });
          confirmed.push(key);
        } catch (error) {
          assert.ok(error instanceof IdemdbError, 'a typed error');
          cuts += 1;
          break;
        }
      }
      for (const image of [state.durable.slice(), state.volatile.slice()]) {
        const reopened = await openHostStore(fixed(image));
        const keys = reopened.pendingIntents().map((i) => i.key);
        for (const key of confirmed) assert.ok(keys.includes(key), `budget ${budget}: confirmed ${key} lost`);
        for (const key of keys) assert.ok(attempted.includes(key), `budget ${budget}: unknown ${key}`);
        reopened.close();
      }
    }
    assert.ok(cuts >= 40, `the power was cut mid-commit (${cuts} times)`);
  });
});

describe('idempotentFetch', () => {
  let server;
  before(async () => { server = await startServer(); });
  after(() => server.close());

  test('dropped responses after the effect: same key on every retry, one effect, response recorded', async () => {
    server.reset();
    const store = await openMemoryStore();
    const response = await idempotentFetch(store, `${server.url}/api/pay?drop=2`, {
      scope,
      init: { method: 'POST', headers: { 'content-type': 'application/json', authorization: 'Bearer secret' }, body: JSON.stringify({ amount: '10.00' }) },
      retry: fast,
    });
    assert.equal(response.status, 201);
    assert.equal((await response.json()).charge, 'ch_1');
    assert.equal(server.state.effects, 1);
    assert.equal(server.state.seen.length, 3);
    assert.equal(new Set(server.state.seen).size, 1);
    const [intent] = store.listIntents();
    assert.equal(intent.key, server.state.seen[0]);
    assert.equal(intent.state, 'completed');
    assert.equal(intent.attempts, 3);
    assert.ok(!text(intent.request).includes('secret'), 'credentials are never stored');
  });

  test('a first send that gets its answer costs two durable flushes: the intent with its send, the answer', async () => {
    server.reset();
    const host = memoryHost();
    const store = await openHostStore(host);
    const before = host.flushes;
    let storedAt;
    const response = await idempotentFetch(store, `${server.url}/api/pay`, {
      scope,
      init: { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ amount: '3.00' }) },
      retry: fast,
      onStored: (intent) => {
        storedAt = host.flushes - before;
        assert.deepEqual([intent.attempts, intent.lastAttempt?.outcome], [1, 'sent'], 'durable with its send before it leaves');
      },
    });
    assert.equal(response.status, 201);
    assert.equal(storedAt, 1, 'the intent and the first send marker: one flush');
    assert.equal(host.flushes - before, 2, 'then the answer: two in all (three before)');
    const [intent] = store.listIntents();
    assert.deepEqual([intent.state, intent.attempts, server.state.effects], ['completed', 1, 1]);
    store.close();
  });

  test('the key is sent as the IETF sf-string by default, bare when asked', async () => {
    server.reset();
    const store = await openMemoryStore();
    const init = { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ amount: '1.00' }) };
    await idempotentFetch(store, `${server.url}/api/pay`, { scope, init, retry: fast, key: 'order-842:a"b\\c' });
    await idempotentFetch(store, `${server.url}/api/pay`, { scope, init, retry: fast, key: 'order-843', keyFormat: 'bare' });
    assert.deepEqual(server.state.rawKeys, ['"order-842:a\\"b\\\\c"', 'order-843']);
    assert.deepEqual(server.state.seen, ['order-842:a"b\\c', 'order-843']);
    assert.equal(server.state.effects, 2);
  });

  test('503 with Retry-After is retried after the delay; 422 is a conflict and never retried', async () => {
    server.reset();
    const store = await openMemoryStore();
    const started = Date.now();
    const ok = await idempotentFetch(store, `${server.url}/api/busy?busy=1&retryAfter=1`, { scope, init: { method: 'POST', body: '{}' }, retry: { ...fast, maxDelayMs: 5000 } });
    assert.equal(ok.status, 201);
    assert.ok(Date.now() - started >= 950, 'Retry-After: 1 was honoured');
    server.reset();
    await assert.rejects(
      idempotentFetch(store, `${server.url}/api/conflict`, { scope, init: { method: 'POST', body: '{}' }, retry: fast }),
      (e) => e instanceof KeyMismatchError && e.code === 'IDEMDB_KEY_MISMATCH' && e.response.status === 422,
    );
    assert.equal(server.state.seen.length, 1, '422 is not retried');
  });

  test('exhausted retries leave the intent pending; resume sends it with the same key', async () => {
    server.reset();
    const store = await openMemoryStore();
    await assert.rejects(
      idempotentFetch(store, `${server.url}/api/down`, { scope, init: { method: 'POST', body: '{"n":1}' }, retry: { ...fast, maxAttempts: 2 } }),
      (e) => e instanceof RetriesExhaustedError && e.code === 'IDEMDB_RETRIES_EXHAUSTED',
    );
    const [pending] = store.pendingIntents();
    assert.equal(pending.attempts, 2);
    // The server comes back: resume rewrites the URL through a fetch wrapper, as an app would
    // after a deploy; the key is the stored one.
    const results = await resumePending(store, {
      retry: fast,
      fetch: (url, init) => fetch(String(url).replace('/api/down', '/api/pay'), init),
    });
    assert.equal(results.length, 1);
    assert.equal(results[0].response.status, 201);
    assert.deepEqual(server.state.seen, [pending.key]);
    assert.deepEqual(store.pendingIntents(), []);
    const abandonedStore = await openMemoryStore();
    const intent = abandonedStore.createIntent(scope, { method: 'POST', url: `${server.url}/api/pay`, headers: {} });
    abandonedStore.abandonIntent(scope, intent.key, 'user gave up');
    await assert.rejects(idempotentFetch(abandonedStore, `${server.url}/api/pay`, { scope, key: intent.key, init: { method: 'POST' } }), (e) => e instanceof AbandonedError || e instanceof KeyMismatchError);
  });

  test('two senders of the same intent at once: one effect, both get the recorded response', async () => {
    server.reset();
    const store = await openMemoryStore();
    const intent = store.createIntent(scope, { method: 'POST', url: `${server.url}/api/pay?drop=1`, headers: { 'content-type': 'application/json' }, body: { n: 9 } });
    const [a, b] = await Promise.all([sendIntent(store, intent, { retry: fast }), sendIntent(store, intent, { retry: fast })]);
    assert.equal(a.status, 201);
    assert.equal(b.status, 201);
    assert.equal(server.state.effects, 1);
    assert.deepEqual(new Set(server.state.seen), new Set([intent.key]));
    assert.equal(store.getIntent(scope, intent.key).state, 'completed');
  });

  test('autoResume resumes at start-up', async () => {
    server.reset();
    const store = await openMemoryStore();
    store.createIntent(scope, { method: 'POST', url: `${server.url}/api/pay`, headers: { 'content-type': 'application/json' }, body: { n: 7 } });
    const done = new Promise((resolve) => {
      const stop = autoResume(store, { retry: fast, onResumed: (results) => { stop(); resolve(results); } });
    });
    const results = await done;
    assert.equal(results[0].response.status, 201);
    assert.equal(server.state.effects, 1);
  });
});
