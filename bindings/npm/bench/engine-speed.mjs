#!/usr/bin/env node
// Benchmark (not a test): the speed of two builds of the engine, side by side in one process,
// to check that a size lever costs no speed. Each argument is a raw `idemdb_wasm.wasm` (cargo's
// output, before wasm-bindgen); each is run through wasm-bindgen for Node into a temporary
// directory. Per build: memory-store reserve+complete pairs per second, fingerprints of a
// 300-byte JSON body per second, intents created per second, in CPU time of this process;
// best of 5 rounds, interleaved.
//
//   node bench/engine-speed.mjs BASELINE.wasm CANDIDATE.wasm [pairs=3000]
import { execFileSync } from 'node:child_process';
import { mkdtempSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { basename, join } from 'node:path';

const [baseline, candidate, pairsArg] = process.argv.slice(2);
if (!baseline || !candidate) {
  console.error('usage: engine-speed.mjs BASELINE.wasm CANDIDATE.wasm [pairs]');
  process.exit(2);
}
const pairs = Number(pairsArg ?? 3000);
const require = createRequire(import.meta.url);

function load(wasm) {
  const dir = mkdtempSync(join(tmpdir(), 'idemdb-speed-'));
  execFileSync('wasm-bindgen', ['--target', 'nodejs', '--out-dir', dir, wasm], { stdio: 'inherit' });
  return require(join(dir, 'idemdb_wasm.js'));
}

const body = new TextEncoder().encode(JSON.stringify({ amount: '10.50', currency: 'BRL', customer: 'c'.repeat(200), items: [1, 2, 3], trace_id: 'x' }));
const canonical = { exclude: ['/trace_id'] };

/** CPU seconds of this process (user + system): steadier than wall time on a shared machine. */
const cpu = () => {
  const { user, system } = process.cpuUsage();
  return (user + system) / 1e6;
};

function round(engine, run) {
  const store = engine.WasmStore.openMemory(null, { durability: 'immediate' });
  const fp = engine.fingerprint(body, canonical);
  let started = cpu();
  for (let i = 0; i < pairs; i++) {
    const answer = store.reserve('t', 'pay', `${run}-${i}`, fp);
    store.complete(answer.lease, body);
  }
  const reserve = pairs / (cpu() - started);
  started = cpu();
  for (let i = 0; i < pairs * 5; i++) engine.fingerprint(body, canonical);
  const fingerprint = (pairs * 5) / (cpu() - started);
  started = cpu();
  for (let i = 0; i < pairs; i++) store.createIntent('t', 'pay', `${run}-intent-${i}`, body, canonical);
  const intents = pairs / (cpu() - started);
  store.close();
  return { reserve, fingerprint, intents };
}

const builds = [baseline, candidate].map((wasm) => ({ name: wasm, engine: load(wasm), best: { reserve: 0, fingerprint: 0, intents: 0 } }));
for (let r = 0; r < 5; r++) {
  for (const build of builds) {
    const result = round(build.engine, `r${r}`);
    for (const k of Object.keys(result)) build.best[k] = Math.max(build.best[k], result[k]);
  }
}
const fmt = (n) => Math.round(n).toLocaleString('en-US');
console.log('| build | reserve+complete /s | fingerprint /s | createIntent /s |');
console.log('|---|---:|---:|---:|');
for (const b of builds) console.log(`| ${basename(join(b.name, '..', '..', '..', '..'))} | ${fmt(b.best.reserve)} | ${fmt(b.best.fingerprint)} | ${fmt(b.best.intents)} |`);
const [a, b] = builds.map((x) => x.best);
console.log(`| ratio (candidate / baseline) | ${(b.reserve / a.reserve).toFixed(3)} | ${(b.fingerprint / a.fingerprint).toFixed(3)} | ${(b.intents / a.intents).toFixed(3)} |`);
