#!/usr/bin/env node
// Benchmark (not a test): reserve+complete pairs per second through a Durable Object whose
// store is kept in the object's storage (openDurableObjectStore, with 4, 16 and 64 KiB rows)
// against the same object with a memory store, in a local workerd with Durable Object storage
// on local disk. Run after a test run (it uses the scratch project with the packed tarball):
//
//   node bench/durable-object.mjs [pairs-per-loop=2000] [requests=400]
//
// Prints, per variant: pairs/s inside one request (the engine and the storage writes, no
// commit to disk between pairs), pairs/s with one request per pair (each pair its own commit
// of the object, as a real worker sees it), sequentially and 8 in flight, and the store's size;
// then each as a ratio of the memory store's figure. Best of 3 rounds, variants interleaved.
import { copyFileSync, mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

import { project, serveWorkerd, workerdConfig, writeConfig } from '../test/workerd/harness.mjs';

const here = dirname(fileURLToPath(import.meta.url));
const loopPairs = Number(process.argv[2] ?? 2000);
const requests = Number(process.argv[3] ?? 400);
const variants = ['memory', 'pages-4k', 'pages-16k', 'pages-64k'];

copyFileSync(join(here, 'durable-object-worker.js'), join(project, 'bench-do.js'));
const dir = mkdtempSync(join(tmpdir(), 'idemdb-do-bench-'));
const config = writeConfig('bench-do.capnp', workerdConfig('bench-do.js', { durable: { className: 'Bench', binding: 'BENCH', dir } }));
const server = await serveWorkerd(config, { probe: '/size' });

async function timed(f) {
  const started = process.hrtime.bigint();
  await f();
  return Number(process.hrtime.bigint() - started) / 1e9;
}

async function pay(variant, key) {
  const response = await fetch(`${server.base}/pay?variant=${variant}`, { method: 'POST', headers: { 'idempotency-key': key } });
  if (response.status !== 201) throw new Error(`${variant}: ${response.status} ${await response.text()}`);
  await response.arrayBuffer();
}

const results = Object.fromEntries(variants.map((v) => [v, { loop: 0, sequential: 0, parallel: 0 }]));
const ROUNDS = 3;
try {
  for (const variant of variants) {
    // Warm up: open the store, compile, grow the file a little.
    await fetch(`${server.base}/bench?variant=${variant}&n=200&run=warm`, { method: 'POST' }).then((r) => r.text());
  }
  // Best of ROUNDS, the variants interleaved, so that a busy moment of the machine hits all alike.
  for (let round = 0; round < ROUNDS; round++) {
    for (const variant of variants) {
      const r = results[variant];
      const loop = await timed(() => fetch(`${server.base}/bench?variant=${variant}&n=${loopPairs}&run=loop${round}`, { method: 'POST' }).then((res) => res.text()));
      const sequential = await timed(async () => {
        for (let i = 0; i < requests; i++) await pay(variant, `seq-${round}-${i}`);
      });
      const parallel = await timed(async () => {
        let next = 0;
        await Promise.all(Array.from({ length: 8 }, async () => {
          while (next < requests) await pay(variant, `par-${round}-${next++}`);
        }));
      });
      r.loop = Math.max(r.loop, loopPairs / loop);
      r.sequential = Math.max(r.sequential, requests / sequential);
      r.parallel = Math.max(r.parallel, requests / parallel);
    }
  }
  for (const variant of variants) results[variant].size = await (await fetch(`${server.base}/size?variant=${variant}`)).json();
} finally {
  await server.stop();
}

const base = results.memory;
const fmt = (n) => Math.round(n).toLocaleString('en-US');
console.log(`reserve+complete pairs per second (local workerd, Durable Object storage on local disk; ${loopPairs} pairs in one request, ${requests} requests of one pair)`);
console.log('| store | in one request | ratio | one request per pair | ratio | 8 requests in flight | ratio |');
console.log('|---|---:|---:|---:|---:|---:|---:|');
for (const variant of variants) {
  const r = results[variant];
  console.log(`| ${variant === 'memory' ? 'memory store (baseline)' : `Durable Object, ${variant.slice(6)} rows`} | ${fmt(r.loop)} | ${(r.loop / base.loop).toFixed(2)} | ${fmt(r.sequential)} | ${(r.sequential / base.sequential).toFixed(2)} | ${fmt(r.parallel)} | ${(r.parallel / base.parallel).toFixed(2)} |`);
}
console.log(`best of ${ROUNDS} rounds; store size after ${200 + ROUNDS * (loopPairs + 2 * requests)} records: ${variants.filter((v) => v !== 'memory').map((v) => `${v} ${fmt(results[v].size.rows)} rows, ${fmt(results[v].size.bytes)} bytes`).join('; ')}`);
