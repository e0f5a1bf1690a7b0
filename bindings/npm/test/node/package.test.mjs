// Node, ESM: the package as a newcomer meets it, from the installed tarball and its README:
// one copy for import and require, the file store's holder rules, host callbacks checked,
// every documented option and error code really documented, the files a package should ship.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { describe, test } from 'node:test';

import * as esm from 'idemdb';
import { readmeBlock } from '../readme.mjs';
import { memoryHost } from './hosts.mjs';
import { startServer } from '../server.mjs';

const require = createRequire(import.meta.url);
const cjs = require('idemdb');
const pkgRoot = dirname(require.resolve('idemdb/package.json'));
const readme = readFileSync(join(pkgRoot, 'README.md'), 'utf8');
const scope = { tenant: 'me', operation: 'pay' };
const dir = mkdtempSync(join(tmpdir(), 'idemdb-package-'));

describe('one copy for import and require', () => {
  test('ESM and CommonJS give the same classes and functions', () => {
    for (const name of ['IdemdbError', 'InvalidInputError', 'StoreBusyError', 'Store', 'openFileStore', 'fingerprint']) {
      assert.equal(esm[name], cjs[name], name);
    }
  });

  test('an error thrown through one is an instance of the other\'s class', async () => {
    const fromEsm = await esm.openMemoryStore();
    const fromCjs = await cjs.openMemoryStore();
    assert.throws(() => fromEsm.createIntent(scope, '{'), (e) => e instanceof cjs.InvalidInputError && e instanceof cjs.IdemdbError);
    assert.throws(() => fromCjs.reserve(scope, 'bad key', 'x'), (e) => e instanceof esm.InvalidInputError && e instanceof Error);
    assert.ok(fromCjs instanceof esm.Store);
    fromEsm.close();
    fromCjs.close();
  });

  test('a file opened through import is busy for require (one lock, one process)', async () => {
    const file = join(dir, 'both.idemdb');
    const store = await esm.openFileStore(file);
    await assert.rejects(cjs.openFileStore(file), (e) => e instanceof esm.StoreBusyError && /already open in this process/.test(e.message));
    store.close();
  });
});

describe('Node file store: { wait } and a second open in one process', () => {
  test('a second open throws at once, saying the holder is this process', async () => {
    const file = join(dir, 'twice.idemdb');
    const first = await esm.openFileStore(file);
    await assert.rejects(esm.openFileStore(file), (e) => e.code === 'IDEMDB_STORE_BUSY' && /this process/.test(e.message) && /wait/.test(e.message));
    first.close();
  });

  test('{ wait: true } waits for close(); { wait: ms } gives up after that long', async () => {
    const file = join(dir, 'wait.idemdb');
    const first = await esm.openFileStore(file);
    const key = first.createIntent(scope, { n: 1 }).key;
    const started = Date.now();
    await assert.rejects(esm.openFileStore(file, { wait: 150 }), esm.StoreBusyError);
    assert.ok(Date.now() - started >= 140, `gave up after ${Date.now() - started} ms`);
    const waiting = esm.openFileStore(file, { wait: true });
    setTimeout(() => first.close(), 100);
    const second = await waiting;
    assert.deepEqual(second.pendingIntents().map((i) => i.key), [key]);
    second.close();
    await assert.rejects(esm.openFileStore(file, { wait: 'soon' }), esm.InvalidInputError);
  });

  test('{ wait } waits for another process too', async () => {
    const file = join(dir, 'other-process.idemdb');
    // The child holds the store until told (a line on its stdin), then closes it.
    const child = `
      import { openFileStore } from 'idemdb';
      const store = await openFileStore(${JSON.stringify(file)});
      store.createIntent({ tenant: 'me', operation: 'pay' }, { from: 'child' });
      console.log('open');
      process.stdin.once('data', () => { store.close(); console.log('closed'); process.exit(0); });
    `;
    const { spawn } = await import('node:child_process');
    const proc = spawn(process.execPath, ['--input-type=module', '-e', child], { cwd: process.cwd() });
    let out = '';
    proc.stdout.on('data', (d) => (out += d));
    proc.stderr.on('data', (d) => (out += d));
    const exited = new Promise((resolve) => proc.on('exit', resolve));
    const opened = await Promise.race([
      new Promise((resolve) => proc.stdout.once('data', () => resolve(true))),
      exited.then(() => false),
    ]);
    assert.ok(opened, `the child did not open the store: ${out}`);
    await assert.rejects(esm.openFileStore(file), (e) => e instanceof esm.StoreBusyError && new RegExp(`process ${proc.pid}`).test(e.message));
    const waiting = esm.openFileStore(file, { wait: 30_000 });
    proc.stdin.write('close\n');
    const store = await waiting;
    assert.equal(store.pendingIntents().length, 1);
    store.close();
    assert.equal(await exited, 0, out);
  });
});

describe('openHostStore checks its callbacks', () => {
  const refused = (pattern) => (e) => e instanceof esm.InvalidInputError && e.code === 'IDEMDB_INVALID_ARGUMENT' && pattern.test(e.message);

  test('a missing callback is named', async () => {
    const { flush, ...host } = memoryHost();
    void flush;
    await assert.rejects(esm.openHostStore(host), refused(/host\.flush is undefined/));
    await assert.rejects(esm.openHostStore(null), refused(/needs an object/));
  });

  test('a read that returns the bytes instead of filling `out` is named, not "not a store"', async () => {
    const host = memoryHost();
    const fill = host.read;
    // Create the store with a good host, then reopen it with the wrong guess at read().
    (await esm.openHostStore(host)).close();
    host.read = (offset, out) => {
      const copy = new Uint8Array(out.length);
      fill(offset, copy);
      return copy; // the guess: read(offset, length) => bytes
    };
    await assert.rejects(esm.openHostStore(host), refused(/host\.read\(offset, out\) returned Uint8Array: it must copy the bytes into `out`/));
  });

  test('async callbacks and a size that is not a number are named', async () => {
    const asyncHost = memoryHost();
    const size = asyncHost.size;
    asyncHost.size = async () => size();
    await assert.rejects(esm.openHostStore(asyncHost), refused(/host\.size\(\) returned a Promise; the callbacks must be synchronous/));
    const stringSize = memoryHost();
    stringSize.size = () => '0';
    await assert.rejects(esm.openHostStore(stringSize), refused(/host\.size\(\) returned string 0/));
  });

  test('a broken callback after the open is named too, on the call that met it', async () => {
    const host = memoryHost();
    const store = await esm.openHostStore(host);
    host.flush = async () => {};
    assert.throws(() => store.createIntent(scope, { n: 1 }), refused(/host\.flush\(\) returned a Promise/));
  });

  test('the README host example runs as written', () => {
    const script = join(process.cwd(), 'readme-host-storage.mjs');
    writeFileSync(script, readmeBlock(process.cwd(), '// host-storage.mjs'));
    const run = spawnSync(process.execPath, [script], { cwd: process.cwd(), encoding: 'utf8' });
    assert.equal(run.status, 0, run.stderr);
    assert.equal(run.stdout.trim(), 'pending true');
  });
});

describe('what the README documents', () => {
  test('every error code of the package is in the README error table', () => {
    const declared = ['generated/vocabulary.d.ts', 'errors.d.ts'].flatMap((file) => [...readFileSync(join(pkgRoot, 'dist', 'esm', file), 'utf8').matchAll(/['"](IDEMDB_[A-Z_]+)['"]/g)].map((m) => m[1]));
    assert.ok(declared.length >= 25, `found ${declared.length} codes`);
    const table = readme.slice(readme.indexOf('### Errors'));
    for (const code of new Set(declared)) assert.match(table, new RegExp(`\`${code}\``), `${code} is not in the README error table`);
    for (const name of Object.keys(esm).filter((n) => esm[n] === esm.IdemdbError || esm[n]?.prototype instanceof esm.IdemdbError)) assert.match(table, new RegExp(`\`${name}\``), `${name} is not in the README error table`);
  });

  test('every idempotentFetch option and retry default is in the README', () => {
    const section = readme.slice(readme.indexOf('### `idempotentFetch` options'), readme.indexOf('### Errors'));
    const declarations = readFileSync(join(pkgRoot, 'dist', 'esm', 'fetch.d.ts'), 'utf8');
    const options = (iface) => [...declarations.slice(declarations.indexOf(`interface ${iface}`)).split('\n}')[0].matchAll(/^\s{4}(\w+)\??:/gm)].map((m) => m[1]);
    for (const name of options('IdempotentFetchOptions')) assert.match(section, new RegExp(`\`${name}\``), `option ${name}`);
    for (const name of options('RetryOptions')) assert.match(section, new RegExp(`\`retry\\.${name}\``), `retry.${name}`);
    for (const fallback of ['`5`', '`250`', '`30000`', '`15000`', '`20`', "`'idempotency-key'`"]) assert.ok(section.includes(fallback), fallback);
  });

  test('resumePending reports the intent as recorded after the sends', async () => {
    const server = await startServer();
    try {
      const store = await esm.openMemoryStore();
      const intent = store.createIntent(scope, { method: 'POST', url: `${server.url}/api/pay`, headers: { 'content-type': 'application/json' }, body: { n: 1 } });
      const down = store.createIntent(scope, { method: 'POST', url: `${server.url}/api/down`, headers: {}, body: { n: 2 } });
      const results = await esm.resumePending(store, { retry: { maxAttempts: 2, baseDelayMs: 1, maxDelayMs: 5, timeoutMs: 2000 } });
      const done = results.find((r) => r.intent.key === intent.key);
      assert.equal(done.intent.state, 'completed');
      assert.equal(done.intent.response.status, 201);
      assert.equal(done.intent.attempts, 1);
      const failed = results.find((r) => r.intent.key === down.key);
      assert.equal(failed.error.code, 'IDEMDB_RETRIES_EXHAUSTED');
      assert.equal(failed.intent.state, 'pending');
      assert.equal(failed.intent.attempts, 2);
      assert.equal(server.state.effects, 1);
    } finally {
      await server.close();
    }
  });

  test('ready() exists everywhere and resolves at once in Node; the engine works without it', async () => {
    assert.equal(typeof esm.ready, 'function');
    await esm.ready();
    assert.match(esm.fingerprint({ a: 1 }), /^[0-9a-f]{64}$/);
  });
});

describe('the files of the package', () => {
  const pkg = JSON.parse(readFileSync(join(pkgRoot, 'package.json'), 'utf8'));

  test('licence files and a repository field', () => {
    assert.ok(existsSync(join(pkgRoot, 'LICENSE-MIT')), 'LICENSE-MIT');
    assert.ok(existsSync(join(pkgRoot, 'LICENSE-APACHE')), 'LICENSE-APACHE');
    assert.match(readFileSync(join(pkgRoot, 'LICENSE-APACHE'), 'utf8'), /Apache License\s+Version 2\.0/);
    assert.match(readFileSync(join(pkgRoot, 'LICENSE-MIT'), 'utf8'), /Permission is hereby granted, free of charge/);
    assert.equal(pkg.license, 'MIT OR Apache-2.0');
    assert.equal(pkg.repository?.type, 'git');
    assert.match(pkg.repository?.url ?? '', /^git\+https:\/\//);
    assert.equal(pkg.repository?.directory, 'bindings/npm');
  });

  test('the README links nothing outside the package', () => {
    const links = [...readme.matchAll(/\]\(([^)]+)\)/g)].map((m) => m[1]);
    for (const link of links) {
      assert.ok(/^(https?:|#)/.test(link) || existsSync(join(pkgRoot, link)), `README link ${link} does not resolve inside the package`);
    }
  });

  test('the .wasm is exported as idemdb/idemdb.wasm', () => {
    const wasm = require.resolve('idemdb/idemdb.wasm');
    assert.deepEqual([...readFileSync(wasm).subarray(0, 4)], [0, 0x61, 0x73, 0x6d]);
  });

  test('every source file of the package opens with a header comment', { skip: !process.env.IDEMDB_CARGO_TOML }, () => {
    const src = join(dirname(process.env.IDEMDB_CARGO_TOML), 'bindings', 'npm', 'src');
    const files = readdirSync(src).filter((f) => f.endsWith('.ts'));
    assert.ok(files.length >= 14, files.join(' '));
    for (const file of files) assert.match(readFileSync(join(src, file), 'utf8'), /^\/\*\*\n \* \S/, `${file} has no header comment`);
  });
});
