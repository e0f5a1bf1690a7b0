// The cross-runtime client test: one lossy service (server.mjs) answers the npm, Rust, Kotlin
// and Python clients in turn; each is killed with SIGKILL after some sends and started again on
// the same store file, twice (--kills). Then, per client: every intent has a final answer (a result, a
// final refusal, or needs attention), the service performed at most one effect per key and per
// payment, exactly one for every intent whose final answer is a 201, none for a refused one,
// and no key was sent more than a sane number of times.
//
//   node run.mjs --seed S --intents N [--kills K] --client 'NAME=["cmd", "arg", ...]' [--client ...]
//
// Each client command is run with STORE BASE_URL N NAME appended, and must end with a line
// "report <json>" ({ intents: [{ key, state, status, cause, attempts, body }] }, body: the
// recorded answer's body as text). Prints a table and
// "clients: P passed, F failed"; exits 1 on any failure.
import { spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

const args = process.argv.slice(2);
const option = (name, fallback) => {
  const at = args.indexOf(`--${name}`);
  return at >= 0 ? args[at + 1] : fallback;
};
const seed = option('seed', '1');
const intents = Number(option('intents', '25'));
const clients = args.flatMap((arg, i) => (arg === '--client' ? [args[i + 1]] : [])).map((spec) => {
  const at = spec.indexOf('=');
  return { name: spec.slice(0, at), command: JSON.parse(spec.slice(at + 1)) };
});
/** Sends of one key beyond which a client is not sane: the attempt budget (20), with room for a restart. */
const MAX_SENDS_PER_KEY = 24;
/** A client run that takes longer hangs. */
const RUN_LIMIT_MS = 120_000;
/** How many times each client is killed with SIGKILL and started again. */
const KILLS = Number(option('kills', '2'));
/**
 * Sends after which the `k`th process of a client is killed: drawn from the seed per client,
 * between a sixth and a third of the intents (at least 3), so that the kills land elsewhere and
 * all of them before the last intent is sent.
 */
const killAfter = (name, k) => {
  const unit = createHash('sha256').update(`${seed}\u0000${name}\u0000kill ${k}`).digest().readUInt32BE(0) / 2 ** 32;
  return Math.max(3, Math.floor(intents / 6 + unit * (intents / 3 - intents / 6)));
};

const here = fileURLToPath(new URL('.', import.meta.url));
const dir = mkdtempSync(join(tmpdir(), 'idemdb-clients-'));
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

// The service.
const server = spawn(process.execPath, [join(here, 'server.mjs'), seed], { stdio: ['ignore', 'pipe', 'inherit'] });
const [port, controlPort] = await new Promise((resolve, reject) => {
  let out = '';
  server.stdout.on('data', (chunk) => {
    out += chunk;
    const found = /port (\d+) control (\d+)/.exec(out);
    if (found) resolve([found[1], found[2]]);
  });
  server.on('exit', (code) => reject(new Error(`the server exited (${code}) before listening`)));
});
const base = `http://127.0.0.1:${port}`;
const control = async (path) => {
  const response = await fetch(`http://127.0.0.1:${controlPort}${path}`);
  return response.status === 204 ? null : response.json();
};

/** Starts a client process; resolves with its exit and output. */
function start(client, store) {
  const [cmd, ...rest] = client.command;
  const child = spawn(cmd, [...rest, store, base, String(intents), client.name], { stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  child.stdout.on('data', (chunk) => (out += chunk));
  child.stderr.on('data', (chunk) => (out += chunk));
  const done = new Promise((resolve) => child.on('exit', (code, signal) => resolve({ code, signal, out })));
  return { child, done };
}

const sendsOf = (stats) => Object.values(stats.keys).reduce((sum, k) => sum + k.sends, 0);

async function runClient(client) {
  const store = join(dir, `${client.name}.idemdb`);
  const problems = [];
  await control('/reset');
  const started = Date.now();
  // Processes killed with SIGKILL once the service has seen `kill` of the run's sends, each
  // started again on the same store file.
  let restarts = 0;
  const kills = [];
  for (let k = 1; k <= KILLS; k++) {
    const kill = sendsOf(await control(`/stats?run=${client.name}`)) + killAfter(client.name, k);
    kills.push(kill);
    const killed = start(client, store);
    let exited = null;
    killed.done.then((result) => (exited = result));
    const since = Date.now();
    let hung = false;
    while (!exited) {
      hung = Date.now() - since > RUN_LIMIT_MS;
      if (hung || sendsOf(await control(`/stats?run=${client.name}`)) >= kill) {
        killed.child.kill('SIGKILL');
        restarts += hung ? 0 : 1;
        break;
      }
      await sleep(20);
    }
    const result = await killed.done;
    if (hung) {
      problems.push(`its process ${k} made fewer than ${kill} sends in ${RUN_LIMIT_MS / 1000} s (hangs):\n${result.out}`);
      break;
    }
    if (result.signal !== 'SIGKILL') {
      problems.push(`its process ${k} ended (code ${result.code}) before ${kill} sends, so it was never killed:\n${result.out}`);
      break;
    }
  }
  // The last process: the same store file, to its end.
  const second = start(client, store);
  const timer = setTimeout(() => second.child.kill('SIGKILL'), RUN_LIMIT_MS);
  const result = await second.done;
  clearTimeout(timer);
  const seconds = (Date.now() - started) / 1000;
  if (result.code !== 0) problems.push(`the resumed process ended with ${result.signal ?? `code ${result.code}`}${result.signal ? ` (over ${RUN_LIMIT_MS / 1000} s: hangs)` : ''}:\n${result.out}`);
  const line = result.out.split('\n').find((l) => l.startsWith('report '));
  const report = line ? JSON.parse(line.slice('report '.length)) : { intents: [] };
  if (!line && result.code === 0) problems.push(`no report line:\n${result.out}`);
  const stats = await control(`/stats?run=${client.name}`);

  const kinds = { created: 0, conflict: 0, refused: 0, attention: 0, other: 0, unfinished: 0 };
  let effects = 0;
  let doubles = 0;
  const mine = new Set(report.intents.map((intent) => intent.key));
  for (const [key, k] of Object.entries(stats.keys)) {
    effects += k.effects;
    if (k.effects > 1) problems.push(`${key} was performed ${k.effects} times`);
    if (!mine.has(key)) problems.push(`the service saw key ${key}, which is no intent of the client`);
    if (k.sends > MAX_SENDS_PER_KEY) problems.push(`${key} was sent ${k.sends} times (more than ${MAX_SENDS_PER_KEY})`);
  }
  if (stats.unkeyed > 0) problems.push(`${stats.unkeyed} sends came without an Idempotency-Key`);
  // A payment performed twice, under one key or two: a double.
  for (const [ref, n] of Object.entries(stats.refs)) {
    if (n > 1) {
      doubles += 1;
      problems.push(`payment ${ref} was performed ${n} times`);
    }
  }
  // Every send that reached the service was recorded in the store first (an attempt).
  const attempts = report.intents.reduce((sum, i) => sum + i.attempts, 0);
  if (attempts < sendsOf(stats)) problems.push(`the service saw ${sendsOf(stats)} sends, the store recorded ${attempts} attempts`);
  if (report.intents.length !== intents) problems.push(`the report lists ${report.intents.length} intents, not ${intents}`);
  for (const intent of report.intents) {
    const effectsOfKey = stats.keys[intent.key]?.effects ?? 0;
    if (intent.state === 'completed' && intent.status === 201) {
      kinds.created += 1;
      if (effectsOfKey !== 1) problems.push(`${intent.key} completed 201 with ${effectsOfKey} effects`);
      // The answer recorded is this key's, read whole.
      let ref;
      try {
        ref = JSON.parse(intent.body).ref;
      } catch {
        // not JSON: a truncated body
      }
      if (ref !== intent.key) problems.push(`${intent.key} recorded a 201 whose body is not its answer: ${JSON.stringify(intent.body)}`);
    } else if (intent.state === 'completed' && intent.status === 422) {
      kinds.conflict += 1;
      if (effectsOfKey !== 0) problems.push(`${intent.key} refused 422 with ${effectsOfKey} effects`);
      if (!stats.keys[intent.key]?.mismatch) problems.push(`${intent.key} recorded a 422 the service never sent it`);
    } else if (intent.state === 'completed' && intent.status === 400) {
      kinds.refused += 1;
      if (effectsOfKey !== 0) problems.push(`${intent.key} refused 400 with ${effectsOfKey} effects`);
      // Only the other service's 400 is expected: a 400 of this service's (no key sent) is not.
      if (!stats.keys[intent.key]?.foreign) problems.push(`${intent.key} recorded a 400 that is not the other service's: ${intent.body}`);
    } else if (intent.state === 'needs_attention') {
      kinds.attention += 1;
      const k = stats.keys[intent.key];
      if (intent.cause === 'needs_reconciliation' && !k?.reconcile) problems.push(`${intent.key} needs reconciliation, which the service never said`);
      if (intent.cause === 'retries_exhausted' && (k?.sends ?? 0) + stats.refused < 20 - KILLS) {
        problems.push(`${intent.key} gave up after ${k?.sends ?? 0} sends`);
      }
      if (effectsOfKey > 1) problems.push(`${intent.key} needs attention after ${effectsOfKey} effects`);
    } else if (intent.state === 'completed') {
      kinds.other += 1;
      problems.push(`${intent.key} completed with status ${intent.status}, which this service never answers finally`);
    } else {
      kinds.unfinished += 1;
      problems.push(`${intent.key} has no final answer (${intent.state}, ${intent.attempts} attempts)`);
    }
  }
  // A key sent again after its final answer went out whole: only a client killed between the
  // answer and its record may do that (the kill comes right after a send reaches the service, so
  // it often lands there), for the one key it was sending: at most one key per kill. (The resend
  // may then get another answer and more sends: the other service's 400 comes on a first send
  // only.)
  const resentKeys = Object.entries(stats.keys).filter(([, k]) => k.afterFinal > 0);
  const afterFinal = resentKeys.length;
  if (afterFinal > restarts) {
    problems.push(`${afterFinal} keys sent again after a final answer had been delivered (${restarts} kills): ${resentKeys.map(([key, k]) => `${key} [${k.history.join(' ')}]`).join('; ')}`);
  }
  const faults = { lost: 0, cut: 0, busy: 0, throttled: 0, stalled: 0, inProgress: 0, foreign: 0, mismatch: 0, reconcile: 0 };
  for (const k of Object.values(stats.keys)) {
    for (const fault of Object.keys(faults)) faults[fault] += k[fault];
  }
  const attention = report.intents.filter((i) => i.state === 'needs_attention').map((i) => i.cause);
  return {
    name: client.name,
    intents: report.intents.length,
    sends: sendsOf(stats),
    attempts,
    afterFinal,
    refusedConnections: stats.refused,
    faults,
    effects,
    doubles,
    kinds,
    attention,
    restarts,
    kills,
    maxSends: Math.max(0, ...Object.values(stats.keys).map((k) => k.sends)),
    seconds,
    problems,
  };
}

const rows = [];
let failed = 0;
try {
  for (const client of clients) {
    const row = await runClient(client);
    rows.push(row);
    if (row.problems.length > 0) {
      failed += 1;
      console.log(`FAIL ${row.name} (seed ${seed}):`);
      for (const problem of row.problems) console.log(`  ${problem}`);
    }
  }
} finally {
  server.kill();
  rmSync(dir, { recursive: true, force: true });
}

const header = [
  'client', 'intents', 'sends', 'max sends/key', 'attempts', 'refused conns', 'lost answers', 'cut answers', '503', '429', '409 in progress', 'effects', 'doubles', 'keys sent after final',
  '201', '422', '400 other service', 'needs attention', 'no final answer', 'kills (after sends)', 'seconds',
];
const table = [header, ...rows.map((r) => [
  r.name, r.intents, r.sends, r.maxSends, r.attempts, r.refusedConnections, r.faults.lost, r.faults.cut, r.faults.busy, r.faults.throttled, r.faults.inProgress,
  r.effects, r.doubles, r.afterFinal, r.kinds.created, r.kinds.conflict, r.kinds.refused,
  r.kinds.attention, r.kinds.unfinished + r.kinds.other, `${r.restarts} (${r.kills.join(', ')})`, r.seconds.toFixed(1),
].map(String))];
const widths = header.map((_, c) => Math.max(...table.map((row) => row[c].length)));
console.log(`seed ${seed}, ${intents} intents per client; each client killed with SIGKILL ${KILLS} times (once the service had seen the sends shown) and restarted on the same store`);
for (const row of table) console.log(`| ${row.map((cell, c) => (c === 0 ? cell.padEnd(widths[c]) : cell.padStart(widths[c]))).join(' | ')} |`);
for (const r of rows) if (r.attention.length > 0) console.log(`${r.name}: needs attention: ${r.attention.join(', ')}`);
console.log(`clients: ${rows.length - failed} passed, ${failed + (clients.length - rows.length)} failed`);
process.exit(failed === 0 && rows.length === clients.length && clients.length > 0 ? 0 : 1);
