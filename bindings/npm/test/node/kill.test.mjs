// idempotentFetch in a Node child process killed with SIGKILL at random points (0–40 ms after
// the start of one of its calls, or 0–200 ms after it opened its store) and resumed,
// twenty times, against a lossy server (the first response of every key is lost after its
// effect): every intent ends completed or needs attention, none is sent after it was final,
// and the server performs exactly one effect per key.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { test } from 'node:test';

import { openFileStore } from 'idemdb';
import { startServer } from '../server.mjs';

const PAYMENTS = 24;
const KILLS = 20;
const child = join(dirname(fileURLToPath(import.meta.url)), 'kill-child.mjs');

test('killed twenty times and resumed: one effect per key, nothing sent after it is final', async () => {
  const server = await startServer();
  const file = join(mkdtempSync(join(tmpdir(), 'idemdb-kill-')), 'client.idemdb');
  const states = async () => {
    if (!existsSync(file)) return new Map();
    const store = await openFileStore(file, { wait: 5000 });
    try {
      return new Map(store.listIntents().map((i) => [i.key, i.state]));
    } finally {
      store.close();
    }
  };
  const finalKeys = async () => new Set([...(await states())].filter(([, s]) => s !== 'pending').map(([k]) => k));
  // `kill`: undefined (run to the end), or `{ afterCalls, ms }`: SIGKILL `ms` after the start of
  // the child's `afterCalls`-th call (0: after it opened its store), as it says on stdout.
  const run = (kill) =>
    new Promise((resolve, reject) => {
      const proc = spawn(process.execPath, [child, file, server.url, String(PAYMENTS)], { stdio: ['ignore', 'pipe', 'pipe'], cwd: process.cwd() });
      let stderr = '';
      proc.stderr.on('data', (chunk) => (stderr += chunk));
      let timer;
      let calls = 0;
      let opened = false;
      let pending = '';
      proc.stdout.on('data', (chunk) => {
        pending += String(chunk);
        const lines = pending.split('\n');
        pending = lines.pop();
        for (const line of lines) {
          if (line === 'open') opened = true;
          if (line.startsWith('call ')) calls += 1;
          if (kill !== undefined && timer === undefined && opened && calls >= kill.afterCalls) {
            timer = setTimeout(() => proc.kill('SIGKILL'), kill.ms);
          }
        }
      });
      proc.on('error', reject);
      proc.on('exit', (code, signal) => {
        clearTimeout(timer);
        if (kill === undefined && code !== 0) reject(new Error(`child failed (${code}): ${stderr}`));
        else resolve(signal);
      });
    });
  // A fixed seed: the same kill points on every run.
  let seed = 20261202;
  const random = () => (seed = (seed * 1103515245 + 12345) % 2147483648) / 2147483648;
  const resentAfterFinal = [];
  let killedMidFlight = 0;
  try {
    for (let round = 0; round < KILLS; round++) {
      const before = await finalKeys();
      const from = server.state.seen.length;
      // Most kills land inside the call of a key not yet final (round r: the (r+1)-th call, whose
      // key earlier rounds have not finished), whatever the machine's speed; some at a random
      // time after the store opened.
      const kill =
        round % 4 === 3
          ? { afterCalls: 0, ms: Math.floor(random() * 200) }
          : { afterCalls: round + 1, ms: Math.floor(random() * 40) };
      await run(kill);
      resentAfterFinal.push(...server.state.seen.slice(from).filter((key) => before.has(key)));
      if ([...(await states()).values()].includes('pending')) killedMidFlight += 1;
    }
    const before = await finalKeys();
    const from = server.state.seen.length;
    await run(undefined);
    resentAfterFinal.push(...server.state.seen.slice(from).filter((key) => before.has(key)));

    assert.deepEqual(resentAfterFinal, [], 'no intent is sent after it is final');
    const end = await states();
    assert.equal(end.size, PAYMENTS);
    assert.ok([...end.values()].every((s) => s === 'completed' || s === 'needs_attention'), JSON.stringify([...end]));
    const expected = Array.from({ length: PAYMENTS }, (_, n) => `pay-${String(n).padStart(2, '0')}`);
    assert.deepEqual([...server.state.effectsByKey.keys()].sort(), expected, 'one effect per key, no other key');
    assert.equal(server.state.effects, PAYMENTS);
    assert.ok(server.state.seen.length > PAYMENTS, 'the lossy server made the client send again');
    assert.ok(killedMidFlight >= 1, 'some kill left an intent pending');
    console.log(`# ${KILLS} kills (${killedMidFlight} left an intent pending), ${server.state.seen.length} sends for ${server.state.effects} effects`);
  } finally {
    await server.close();
  }
});
