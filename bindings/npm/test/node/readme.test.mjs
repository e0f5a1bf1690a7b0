// The README's Node example, run as written against a local API.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';

import { readmeBlock } from '../readme.mjs';
import { startServer } from '../server.mjs';

test('the README Node example runs as written', async () => {
  const server = await startServer();
  try {
    const project = process.cwd();
    const script = join(project, 'readme-node-example.mjs');
    writeFileSync(script, readmeBlock(project, '// node-example.mjs'));
    // Run it from the project, where `idemdb` is installed.
    const child = spawn(process.execPath, [script], { cwd: project, env: { ...process.env, PAYMENTS_API: server.url } });
    let out = '';
    child.stdout.on('data', (d) => (out += d));
    child.stderr.on('data', (d) => (out += d));
    const code = await new Promise((resolve) => child.on('exit', resolve));
    assert.equal(code, 0, out);
    assert.match(out, /^201 \{"charge":"ch_1"/m);
    assert.match(out, /^pending: 0$/m);
    assert.equal(server.state.effects, 1);
  } finally {
    await server.close();
  }
});
