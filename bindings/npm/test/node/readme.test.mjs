// The README's Node example, run as written against a local API: up, and down then up.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';

import { readmeBlock } from '../readme.mjs';
import { startServer } from '../server.mjs';

/** Writes the example into the project (where `idemdb` is installed) and runs it in `cwd`. */
async function runExample(api, cwd = process.cwd()) {
  const project = process.cwd();
  const script = join(project, 'readme-node-example.mjs');
  writeFileSync(script, readmeBlock(project, '// node-example.mjs'));
  const child = spawn(process.execPath, [script], { cwd, env: { ...process.env, PAYMENTS_API: api } });
  let out = '';
  child.stdout.on('data', (d) => (out += d));
  child.stderr.on('data', (d) => (out += d));
  const code = await new Promise((resolve) => child.on('exit', resolve));
  return { code, out };
}

/** An address nothing listens on: a connection to it is refused. */
async function downApi() {
  const probe = createServer();
  await new Promise((resolve) => probe.listen(0, '127.0.0.1', resolve));
  const { port } = probe.address();
  await new Promise((resolve) => probe.close(resolve));
  return `http://127.0.0.1:${port}`;
}

test('the README Node example runs as written', async () => {
  const server = await startServer();
  try {
    const { code, out } = await runExample(server.url);
    assert.equal(code, 0, out);
    assert.match(out, /^201 \{"charge":"ch_1"/m);
    assert.match(out, /^pending: 0$/m);
    assert.equal(server.state.effects, 1);
  } finally {
    await server.close();
  }
});

test('the README Node example, API down: exits cleanly with the payment pending; the next run sends it once', async () => {
  const cwd = mkdtempSync(join(tmpdir(), 'idemdb-readme-'));
  const down = await runExample(await downApi(), cwd);
  assert.equal(down.code, 0, down.out);
  const key = /^stays pending (\S+)$/m.exec(down.out)?.[1];
  assert.ok(key, down.out);
  assert.match(down.out, /^pending: 1$/m);
  const server = await startServer();
  try {
    const up = await runExample(server.url, cwd);
    assert.equal(up.code, 0, up.out);
    assert.match(up.out, new RegExp(`^resumed ${key} completed 201$`, 'm'));
    assert.match(up.out, /^pending: 0$/m);
    assert.equal(server.state.effects, 2, "the first run's payment and the second run's, once each");
    assert.equal(server.state.seen.filter((seen) => seen === key).length, 1, 'the pending payment is sent once');
  } finally {
    await server.close();
  }
});
