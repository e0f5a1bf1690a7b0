// workerd (npm `workerd`) runs workers that import `idemdb` from the installed tarball (the
// `workerd` export condition: the .wasm is imported as a compiled module): a memory store in
// the isolate, a Durable Object store on local disk across workerd restarts, and the README's
// examples as written.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { copyFileSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { after, before, describe, test } from 'node:test';

import { readmeBlock } from '../readme.mjs';
import { packageModules, project, serveWorkerd, workerdConfig, writeConfig } from './harness.mjs';

const here = dirname(fileURLToPath(import.meta.url));
const tool = process.env.IDEMDB_SNAPSHOT_TOOL;
/** The test workers' shared payment endpoint, a module beside them. */
const PAYMENTS = '(name = "payments.js", esModule = embed "payments.js")';
const copyWorker = (file, as = file) => {
  copyFileSync(join(here, 'payments.js'), join(project, 'payments.js'));
  copyFileSync(join(here, file), join(project, as));
};

const post = (base, path, key, body, headers = {}) =>
  fetch(`${base}${path}`, {
    method: 'POST',
    headers: { 'idempotency-key': key, 'content-type': 'application/json', ...headers },
    body: typeof body === 'string' ? body : JSON.stringify(body),
  });

function readNatively(bytes, name) {
  const file = join(mkdtempSync(join(tmpdir(), 'idemdb-workerd-snap-')), name);
  writeFileSync(file, bytes);
  const read = spawnSync(tool, ['read', file], { encoding: 'utf8' });
  assert.equal(read.status, 0, read.stderr);
  return read.stdout;
}

describe('memory store in the isolate', () => {
  let server;
  before(async () => {
    copyWorker('worker.js');
    server = await serveWorkerd(writeConfig('workerd-test.capnp', workerdConfig('worker.js', { extraModules: [PAYMENTS] })), { probe: '/stats' });
  });
  after(() => server?.stop());

  test('reserve, effect once, replay byte for byte, 422 on a different request', async () => {
    const { base } = server;
    const first = await post(base, '/pay', 'order-842', { amount: '10.50', trace_id: 'a' });
    assert.equal(first.status, 201, server.logs());
    const firstBody = await first.text();
    const retry = await post(base, '/pay', 'order-842', { amount: '10.50', trace_id: 'b' });
    assert.equal(retry.status, 201);
    assert.equal(retry.headers.get('idempotent-replayed'), 'true');
    assert.equal(await retry.text(), firstBody);
    const other = await post(base, '/pay', 'order-842', { amount: '99.00' });
    assert.equal(other.status, 422);
    const second = await post(base, '/pay', 'order-843', { amount: '1.00' });
    assert.equal(second.status, 201);
    assert.deepEqual(await (await fetch(`${base}/stats`)).json(), { effects: 2 });
    const bad = await post(base, '/pay', 'bad key', {});
    assert.equal(bad.status, 400);
    assert.equal((await bad.json()).code, 'IDEMDB_INVALID_KEY');
  });

  test('a snapshot exported in workerd opens natively', { skip: !tool }, async () => {
    const bytes = new Uint8Array(await (await fetch(`${server.base}/snapshot`)).arrayBuffer());
    const out = readNatively(bytes, 'edge.idemdb');
    assert.match(out, /^record edge pay order-842 completed body=\{"charge":"ch_1","amount":"10.50"\}$/m);
    assert.match(out, /^record edge pay order-843 completed/m);
  });
});

describe('Durable Object store on local disk', () => {
  const dir = mkdtempSync(join(tmpdir(), 'idemdb-do-'));
  const config = () =>
    writeConfig('durable-test.capnp', workerdConfig('durable.js', { durable: { className: 'Payments', binding: 'PAYMENTS', dir }, extraModules: [PAYMENTS] }));
  const effects = async (base, tenant = 'acme') => (await (await fetch(`${base}/effects`, { headers: { 'x-tenant': tenant } })).json()).effects;
  let server;
  before(async () => {
    copyWorker('durable.js');
    server = await serveWorkerd(config(), { probe: '/effects' });
  });
  after(() => server?.stop());

  test('32 concurrent first requests with one key: one effect; the rest in progress, then replays', async () => {
    const { base } = server;
    const answers = await Promise.all(
      Array.from({ length: 32 }, () => post(base, '/pay?effectMs=200', 'order-1', { amount: '10.50' }).then(async (r) => ({ status: r.status, replayed: r.headers.get('idempotent-replayed'), body: await r.text() }))),
    );
    const executed = answers.filter((a) => a.status === 201 && a.replayed !== 'true');
    assert.equal(executed.length, 1, JSON.stringify(answers.map((a) => a.status)) + server.logs());
    for (const answer of answers) {
      assert.ok(answer.status === 409 || (answer.status === 201 && answer.body === executed[0].body), JSON.stringify(answer));
    }
    assert.ok(answers.filter((a) => a.status === 409).length >= 1, 'duplicates arrived while the effect ran');
    assert.equal(await effects(base), 1);
    const retry = await post(base, '/pay', 'order-1', { amount: '10.50', trace_id: 'later' });
    assert.equal(retry.status, 201);
    assert.equal(retry.headers.get('idempotent-replayed'), 'true');
    assert.equal(await retry.text(), executed[0].body);
    assert.equal(await effects(base), 1);
  });

  test('a different body under the same key is refused with 422 and runs nothing', async () => {
    const other = await post(server.base, '/pay', 'order-1', { amount: '99.00' });
    assert.equal(other.status, 422);
    assert.equal(await effects(server.base), 1);
  });

  test('records survive a workerd restart (killed with SIGKILL): replays, no second effect', async () => {
    const before = await (await post(server.base, '/pay', 'order-2', { amount: '2.00' })).text();
    const otherTenant = await post(server.base, '/pay', 'order-2', { amount: '2.00' }, { 'x-tenant': 'globex' });
    assert.equal(otherTenant.status, 201, 'another tenant is another object, another store');
    assert.equal(await effects(server.base), 2);
    await server.stop();
    server = await serveWorkerd(config(), { probe: '/effects' });
    const { base } = server;
    for (const key of ['order-1', 'order-2']) {
      const replay = await post(base, '/pay', key, { amount: key === 'order-1' ? '10.50' : '2.00' });
      assert.equal(replay.status, 201, server.logs());
      assert.equal(replay.headers.get('idempotent-replayed'), 'true', key);
    }
    assert.equal(await (await post(base, '/pay', 'order-2', { amount: '2.00' })).text(), before);
    assert.equal((await post(base, '/pay', 'order-1', { amount: '99.00' })).status, 422);
    assert.equal(await effects(base), 2);
    assert.equal(await effects(base, 'globex'), 1);
    const fresh = await post(base, '/pay', 'order-3', { amount: '3.00' });
    assert.equal(fresh.status, 201);
    assert.equal(await effects(base), 3);
  });

  test('the object keeps a real store file: its snapshot opens natively', { skip: !tool }, async () => {
    const bytes = new Uint8Array(await (await fetch(`${server.base}/snapshot`)).arrayBuffer());
    const out = readNatively(bytes, 'durable.idemdb');
    assert.match(out, /^verify ok$/m);
    assert.match(out, /^record edge pay order-1 completed body=\{"charge":"ch_1","amount":"10.50"\}$/m);
    assert.match(out, /^record edge pay order-3 completed/m);
  });
});

describe('Durable Object without SQL', () => {
  test('openDurableObjectStore answers UnsupportedError, not the platform\'s plain Error', async () => {
    writeFileSync(
      join(project, 'nosql.js'),
      `import { DurableObject } from 'cloudflare:workers';
import { openDurableObjectStore } from 'idemdb';
export class Plain extends DurableObject {
  async fetch() {
    try {
      await openDurableObjectStore(this.ctx.storage);
      return Response.json({ opened: true });
    } catch (error) {
      return Response.json({ name: error.name, code: error.code, message: error.message });
    }
  }
}
export default { fetch: (request, env) => env.PLAIN.get(env.PLAIN.idFromName('a')).fetch(request) };
`,
    );
    const dir = mkdtempSync(join(tmpdir(), 'idemdb-nosql-'));
    const config = writeConfig('nosql.capnp', workerdConfig('nosql.js', { durable: { className: 'Plain', binding: 'PLAIN', dir, sql: false } }));
    const server = await serveWorkerd(config, { probe: '/' });
    try {
      const { message, ...answer } = await (await fetch(`${server.base}/`)).json();
      assert.deepEqual(answer, { name: 'UnsupportedError', code: 'IDEMDB_UNSUPPORTED' }, `${message}\n${server.logs()}`);
    } finally {
      server.stop();
    }
  });
});

describe('README', () => {
  test('the Durable Object example (worker and config) runs as written and keeps its records across a restart', async () => {
    writeFileSync(join(project, 'worker.js'), readmeBlock(project, '// worker.js'));
    const dir = mkdtempSync(join(tmpdir(), 'idemdb-readme-do-'));
    // The README's config as written, with its disk path (a directory beside the config) moved
    // to a fresh one; its socket `http` is overridden by an inherited one.
    const text = readmeBlock(project, '# config.capnp').replace(/path = "[^"]*"/, `path = ${JSON.stringify(dir)}`);
    const config = writeConfig('readme-config.capnp', text);
    let server = await serveWorkerd(config);
    try {
      const pay = (base, body) => fetch(`${base}/pay`, { method: 'POST', headers: { 'idempotency-key': 'k1', 'x-tenant': 'acme' }, body });
      const first = await pay(server.base, '{"amount":"1.00"}');
      assert.equal(first.status, 201, server.logs());
      const firstBody = await first.text();
      await server.stop();
      server = await serveWorkerd(config);
      const again = await pay(server.base, '{"amount":"1.00"}');
      assert.equal(again.headers.get('idempotent-replayed'), 'true', server.logs());
      assert.equal(await again.text(), firstBody);
      assert.equal((await pay(server.base, '{"amount":"2.00"}')).status, 422);
    } finally {
      await server.stop();
    }
  });

  test('the memory-store example runs as written, and a failed first open is tried again', async () => {
    writeFileSync(join(project, 'worker.js'), readmeBlock(project, '// memory-worker.js'));
    // `idemdb` is the package with openMemoryStore failing on its first call only, as an open
    // can fail (no randomness yet, a trap): the example must not keep that failure.
    writeFileSync(
      join(project, 'flaky-idemdb.js'),
      `import * as idemdb from './node_modules/idemdb/dist/esm/workerd.js';
export * from './node_modules/idemdb/dist/esm/workerd.js';
let calls = 0;
export async function openMemoryStore(options) {
  calls += 1;
  if (calls === 1) throw new idemdb.StorageError('IDEMDB_STORAGE', 'first open fails (test)');
  return idemdb.openMemoryStore(options);
}
`,
    );
    const modules = packageModules("export * from './flaky-idemdb.js';");
    const server = await serveWorkerd(
      writeConfig('readme-memory.capnp', workerdConfig('worker.js', { modules, extraModules: ['(name = "flaky-idemdb.js", esModule = embed "flaky-idemdb.js")'] })),
    );
    try {
      const pay = (body) => fetch(`${server.base}/`, { method: 'POST', headers: { 'idempotency-key': 'k1' }, body });
      assert.equal(server.probeStatus, 500, 'the first request (the start-up probe) met the failed open');
      const first = await pay('{"amount":"1.00"}');
      assert.equal(first.status, 201, server.logs());
      const firstBody = await first.text();
      const again = await pay('{"amount":"1.00"}');
      assert.equal(again.headers.get('idempotent-replayed'), 'true');
      assert.equal(await again.text(), firstBody);
      assert.equal((await pay('{"amount":"2.00"}')).status, 422);
    } finally {
      await server.stop();
      copyFileSync(join(here, 'worker.js'), join(project, 'worker.js'));
    }
  });
});
