// workerd (npm `workerd`) runs test/workerd/worker.js, which imports `idemdb` from the installed
// tarball (the `workerd` export condition: the .wasm is imported as a compiled module).
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { copyFileSync, mkdtempSync, readdirSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { after, before, test } from 'node:test';

import { readmeBlock } from '../readme.mjs';

const here = dirname(fileURLToPath(import.meta.url));
const project = process.env.IDEMDB_SCRATCH ?? join(here, '..', '..', '.scratch', 'project');
const pkgRoot = join(project, 'node_modules', 'idemdb');
const workerdBin = join(here, '..', '..', 'node_modules', '.bin', 'workerd');

/** Modules of the package a worker needs (the Node and browser entries are left out). */
const SKIP = new Set(['node.js', 'node-file.js', 'browser.js', 'opfs.js']);

/**
 * The capnp config, written into the project directory (embeds are relative to it): the worker,
 * every module of the package by its path, and `idemdb` as an alias of the workerd entry.
 */
export function workerdConfig(workerFile, port) {
  const modules = [`(name = "worker.js", esModule = embed ${JSON.stringify(workerFile)})`];
  modules.push(`(name = "idemdb", esModule = "export * from './node_modules/idemdb/dist/esm/workerd.js';")`);
  for (const sub of ['dist/esm', 'dist/wasm']) {
    for (const file of readdirSync(join(pkgRoot, sub))) {
      if (SKIP.has(file)) continue;
      const name = `node_modules/idemdb/${sub}/${file}`;
      const path = name;
      if (file.endsWith('.js')) modules.push(`(name = ${JSON.stringify(name)}, esModule = embed ${JSON.stringify(path)})`);
      if (file.endsWith('.wasm')) modules.push(`(name = ${JSON.stringify(name)}, wasm = embed ${JSON.stringify(path)})`);
    }
  }
  return `using Workerd = import "/workerd/workerd.capnp";
const config :Workerd.Config = (
  services = [(name = "main", worker = .worker)],
  sockets = [(name = "http", address = "127.0.0.1:${port}", http = (), service = "main")],
);
const worker :Workerd.Worker = (
  modules = [
    ${modules.join(',\n    ')}
  ],
  compatibilityDate = "2025-09-01",
);
`;
}

// A listening socket on a port the kernel picks. workerd inherits it (`--socket-fd`), so no
// other process can take the port between choosing it and workerd listening on it.
async function listeningSocket() {
  const server = createServer();
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  return { server, port: server.address().port, fd: server._handle.fd };
}

// Starts workerd on `config` with its socket `http` on an inherited listening socket.
async function serveWorkerd(config) {
  const socket = await listeningSocket();
  const proc = spawn(workerdBin, ['serve', config, '--socket-fd', 'http=3'], {
    stdio: ['ignore', 'pipe', 'pipe', socket.fd],
  });
  // The child holds its own copy; the parent must not accept connections on it.
  await new Promise((resolve) => socket.server.close(resolve));
  return { proc, port: socket.port };
}

let child;
let base;
let logs = '';

before(async () => {
  const config = join(project, 'workerd-test.capnp');
  copyFileSync(join(here, 'worker.js'), join(project, 'worker.js'));
  // The address in the file is overridden by the inherited socket.
  writeFileSync(config, workerdConfig('worker.js', 8787));
  const started = await serveWorkerd(config);
  child = started.proc;
  const port = started.port;
  child.stdout.on('data', (d) => (logs += d));
  child.stderr.on('data', (d) => (logs += d));
  base = `http://127.0.0.1:${port}`;
  const deadline = Date.now() + 30_000;
  for (;;) {
    try {
      await fetch(`${base}/stats`);
      break;
    } catch {
      if (Date.now() > deadline || child.exitCode !== null) throw new Error(`workerd did not start:\n${logs}`);
      await new Promise((r) => setTimeout(r, 100));
    }
  }
});

after(() => child?.kill('SIGKILL'));

const pay = (key, body) =>
  fetch(`${base}/pay`, { method: 'POST', headers: { 'idempotency-key': key, 'content-type': 'application/json' }, body: JSON.stringify(body) });

test('reserve, effect once, replay byte for byte, 422 on a different request', async () => {
  const first = await pay('order-842', { amount: '10.50', trace_id: 'a' });
  assert.equal(first.status, 201, logs);
  const firstBody = await first.text();
  const retry = await pay('order-842', { amount: '10.50', trace_id: 'b' });
  assert.equal(retry.status, 201);
  assert.equal(retry.headers.get('idempotent-replayed'), 'true');
  assert.equal(await retry.text(), firstBody);
  const other = await pay('order-842', { amount: '99.00' });
  assert.equal(other.status, 422);
  const second = await pay('order-843', { amount: '1.00' });
  assert.equal(second.status, 201);
  assert.deepEqual(await (await fetch(`${base}/stats`)).json(), { effects: 2 });
  const bad = await fetch(`${base}/pay`, { method: 'POST', headers: { 'idempotency-key': 'bad key' }, body: '{}' });
  assert.equal(bad.status, 400);
  assert.equal((await bad.json()).code, 'IDEMDB_INVALID_KEY');
});

test('a snapshot exported in workerd opens natively', { skip: !process.env.IDEMDB_SNAPSHOT_TOOL }, async () => {
  const bytes = new Uint8Array(await (await fetch(`${base}/snapshot`)).arrayBuffer());
  const file = join(mkdtempSync(join(tmpdir(), 'idemdb-workerd-snap-')), 'edge.idemdb');
  writeFileSync(file, bytes);
  const read = spawnSync(process.env.IDEMDB_SNAPSHOT_TOOL, ['read', file], { encoding: 'utf8' });
  assert.equal(read.status, 0, read.stderr);
  assert.match(read.stdout, /^record edge pay order-842 completed body=\{"charge":"ch_1","amount":"10.50"\}$/m);
  assert.match(read.stdout, /^record edge pay order-843 completed/m);
});

test('the README workerd example (worker and config) runs as written', async () => {
  writeFileSync(join(project, 'worker.js'), readmeBlock(project, '// worker.js'));
  // The README's config as written; its socket `http` is overridden by an inherited one.
  writeFileSync(join(project, 'readme-config.capnp'), readmeBlock(project, 'using Workerd'));
  const { proc: readme, port } = await serveWorkerd(join(project, 'readme-config.capnp'));
  let out = '';
  readme.stdout.on('data', (d) => (out += d));
  readme.stderr.on('data', (d) => (out += d));
  try {
    const url = `http://127.0.0.1:${port}/`;
    const deadline = Date.now() + 30_000;
    let first;
    for (;;) {
      try {
        first = await fetch(url, { method: 'POST', headers: { 'idempotency-key': 'k1' }, body: '{"amount":"1.00"}' });
        break;
      } catch {
        if (Date.now() > deadline || readme.exitCode !== null) throw new Error(`workerd did not start:\n${out}`);
        await new Promise((r) => setTimeout(r, 100));
      }
    }
    assert.equal(first.status, 201, out);
    const firstBody = await first.text();
    const again = await fetch(url, { method: 'POST', headers: { 'idempotency-key': 'k1' }, body: '{"amount":"1.00"}' });
    assert.equal(again.headers.get('idempotent-replayed'), 'true');
    assert.equal(await again.text(), firstBody);
    const other = await fetch(url, { method: 'POST', headers: { 'idempotency-key': 'k1' }, body: '{"amount":"2.00"}' });
    assert.equal(other.status, 422);
  } finally {
    readme.kill('SIGKILL');
    copyFileSync(join(here, 'worker.js'), join(project, 'worker.js'));
  }
});
