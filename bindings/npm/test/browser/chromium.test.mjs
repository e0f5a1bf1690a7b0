// Real headless Chromium (Debian's, driven by playwright-core) against the installed tarball:
// OPFS durability across a reload, a killed worker and a browser restart; two tabs;
// idempotentFetch against a server that drops responses after the effect; resuming when the
// browser comes back online; store snapshots read natively and the other way round.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { cpSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';

import { readmeBlock } from '../readme.mjs';
import { call, launch, newProfile, openPage, project, startSite } from './launch.mjs';

let site;
let profile;
let context;

before(async () => {
  site = await startSite();
  profile = newProfile();
  context = await launch(profile);
});

after(async () => {
  await context?.close();
  await site?.close();
});

const spawn = (page, id) => page.evaluate((w) => window.spawn(w), id);
const kill = (page, id) => page.evaluate((w) => window.kill(w), id);
const ok = (value) => {
  assert.ok(!(value && value.error), `worker error: ${JSON.stringify(value?.error)}`);
  return value;
};

describe('OPFS durability', () => {
  test('intents persisted in OPFS survive a reload', async () => {
    const page = await openPage(context, site);
    await spawn(page, 'a');
    ok(await call(page, 'a', 'open', { name: 'reload.idemdb' }));
    const keys = [];
    for (let i = 0; i < 3; i++) keys.push(ok(await call(page, 'a', 'create', { request: { i } })));
    await page.reload();
    await page.waitForFunction(() => window.ready === true);
    await spawn(page, 'b');
    ok(await call(page, 'b', 'open', { name: 'reload.idemdb', wait: 10_000 }));
    assert.deepEqual(new Set(ok(await call(page, 'b', 'pending'))), new Set(keys));
    await page.close();
  });

  test('a worker killed without closing loses nothing; the next one takes over its lock', async () => {
    const page = await openPage(context, site);
    await spawn(page, 'a');
    ok(await call(page, 'a', 'open', { name: 'killed.idemdb' }));
    const keys = [];
    for (let i = 0; i < 5; i++) keys.push(ok(await call(page, 'a', 'create', { request: { i } })));
    await kill(page, 'a');
    await spawn(page, 'b');
    ok(await call(page, 'b', 'open', { name: 'killed.idemdb', wait: 10_000 }));
    assert.deepEqual(new Set(ok(await call(page, 'b', 'pending'))), new Set(keys));
    ok(await call(page, 'b', 'close'));
    await page.close();
  });

  test('a crash while a store was being created leaves nothing that stops it opening', async () => {
    const page = await openPage(context, site);
    await spawn(page, 'c');
    ok(await call(page, 'c', 'simulateCreationCrash', { name: 'created.idemdb' }));
    ok(await call(page, 'c', 'open', { name: 'created.idemdb' }));
    const key = ok(await call(page, 'c', 'create', { request: { created: true } }));
    assert.deepEqual(ok(await call(page, 'c', 'pending')), [key]);
    const names = ok(await call(page, 'c', 'entries'));
    assert.ok(names.includes('created.idemdb'));
    assert.ok(!names.some((n) => n.includes('.creating-')), `leftovers: ${names}`);
    ok(await call(page, 'c', 'close'));
    await page.close();
  });

  test('intents survive a browser restart (same profile, store never closed)', async () => {
    let page = await openPage(context, site);
    await spawn(page, 'a');
    ok(await call(page, 'a', 'open', { name: 'restart.idemdb' }));
    const key = ok(await call(page, 'a', 'create', { request: { restart: true } }));
    await context.close();
    context = await launch(profile);
    page = await openPage(context, site);
    await spawn(page, 'b');
    ok(await call(page, 'b', 'open', { name: 'restart.idemdb', wait: 10_000 }));
    assert.deepEqual(ok(await call(page, 'b', 'pending')), [key]);
    ok(await call(page, 'b', 'close'));
    await page.close();
  });
});

describe('two tabs', () => {
  test('one writer at a time: the other tab gets a clear StoreBusyError or waits; nothing is lost', async () => {
    const one = await openPage(context, site);
    const two = await openPage(context, site);
    await spawn(one, 'w');
    await spawn(two, 'w');
    ok(await call(one, 'w', 'open', { name: 'tabs.idemdb' }));
    const refused = await call(two, 'w', 'open', { name: 'tabs.idemdb' });
    assert.equal(refused.error?.code, 'IDEMDB_STORE_BUSY');
    assert.equal(refused.error?.name, 'StoreBusyError');
    assert.match(refused.error?.message, /another tab or worker/);
    // Tab two waits; tab one writes and closes; tab two then gets the store with tab one's data.
    const waiting = call(two, 'w', 'open', { name: 'tabs.idemdb', wait: true });
    const keys = [ok(await call(one, 'w', 'create', { request: { tab: 1 } }))];
    ok(await call(one, 'w', 'close'));
    ok(await waiting);
    keys.push(ok(await call(two, 'w', 'create', { request: { tab: 2 } })));
    // Hand the store back and forth: every intent of both tabs is there at the end.
    for (let round = 0; round < 4; round++) {
      const [from, to] = round % 2 === 0 ? [two, one] : [one, two];
      const next = call(to, 'w', 'open', { name: 'tabs.idemdb', wait: true });
      ok(await call(from, 'w', 'close'));
      ok(await next);
      keys.push(ok(await call(to, 'w', 'create', { request: { round } })));
    }
    assert.deepEqual(new Set(ok(await call(two, 'w', 'pending'))), new Set(keys));
    assert.equal(keys.length, 6);
    ok(await call(two, 'w', 'close'));
    await one.close();
    await two.close();
  });

  test('a second tab gets a clear answer: told at once that it is queued, a typed error when its wait runs out', async () => {
    const one = await openPage(context, site);
    const two = await openPage(context, site);
    await spawn(one, 'w');
    await spawn(two, 'w');
    const events = (page) => page.evaluate(() => window.events('w').filter((e) => e.event === 'queued').map((e) => e.info));
    // A free store: opened at once, nobody is told of a queue.
    ok(await call(one, 'w', 'open', { name: 'queued.idemdb', wait: 5000, queued: true }));
    assert.deepEqual(await events(one), []);
    ok(await call(one, 'w', 'create', { request: { tab: 1 } }));
    // Held by tab one: tab two is told it is queued, then gets StoreBusyError saying how long it waited.
    const refused = await call(two, 'w', 'open', { name: 'queued.idemdb', wait: 300, queued: true });
    assert.equal(refused.error?.name, 'StoreBusyError');
    assert.equal(refused.error?.code, 'IDEMDB_STORE_BUSY');
    assert.equal(refused.error?.waitedMs, 300);
    assert.match(refused.error?.message, /still held by another tab or worker after waiting 300 ms/);
    assert.deepEqual(await events(two), [{ name: 'queued.idemdb', waitMs: 300 }]);
    // An invalid bound is refused before anything waits.
    const invalid = await call(two, 'w', 'open', { name: 'queued.idemdb', wait: -1, queued: true });
    assert.equal(invalid.error?.code, 'IDEMDB_INVALID_ARGUMENT');
    assert.equal((await events(two)).length, 1);
    // Waiting without a bound: queued at once, opened when tab one closes, with its intent.
    const waiting = call(two, 'w', 'open', { name: 'queued.idemdb', wait: true, queued: true });
    await two.waitForFunction(() => window.events('w').filter((e) => e.event === 'queued').length === 2);
    const unbounded = (await events(two))[1];
    assert.equal(unbounded.name, 'queued.idemdb');
    assert.equal(unbounded.waitMs ?? 'none', 'none');
    ok(await call(one, 'w', 'close'));
    ok(await waiting);
    assert.equal(ok(await call(two, 'w', 'pending')).length, 1);
    ok(await call(two, 'w', 'close'));
    await one.close();
    await two.close();
  });

  test('shared store: one elected writer, the other tab works through it and takes over when it dies', async () => {
    const one = await openPage(context, site);
    const two = await openPage(context, site);
    await spawn(one, 'w');
    await spawn(two, 'w');
    // The election is asynchronous: openSharedStore waits up to 200 ms for it, and on a loaded
    // machine opening the file can take longer, so the first opener may answer before it is
    // elected. It is the writer once elected, whatever it answered.
    ok(await call(one, 'w', 'openShared', { name: 'shared.idemdb' }));
    await one.waitForFunction(async () => (await window.call('w', 'sharedIsWriter')) === true, null, { timeout: 10_000, polling: 50 });
    assert.equal(ok(await call(two, 'w', 'openShared', { name: 'shared.idemdb' })), false, 'second opener follows');
    const keys = [];
    for (let i = 0; i < 3; i++) keys.push(ok(await call(two, 'w', 'sharedCreate', { request: { via: 'follower', i } })));
    for (let i = 0; i < 2; i++) keys.push(ok(await call(one, 'w', 'sharedCreate', { request: { via: 'writer', i } })));
    assert.deepEqual(new Set(ok(await call(one, 'w', 'sharedPending'))), new Set(keys));
    assert.deepEqual(new Set(ok(await call(two, 'w', 'sharedPending'))), new Set(keys));
    // idempotentFetch from the follower tab, through the writer.
    site.reset();
    const paid = ok(await call(two, 'w', 'sharedFetch', { url: `${site.url}/api/pay?drop=1`, body: { amount: '4.00' } }));
    assert.equal(paid.status, 201);
    assert.equal(site.state.effects, 1);
    assert.equal(new Set(site.state.seen).size, 1);
    await kill(one, 'w'); // the writer's worker dies without closing
    await two.waitForFunction(async () => (await window.call('w', 'sharedIsWriter')) === true, null, { timeout: 10_000, polling: 100 });
    keys.push(ok(await call(two, 'w', 'sharedCreate', { request: { via: 'new writer' } })));
    assert.deepEqual(new Set(ok(await call(two, 'w', 'sharedPending'))), new Set(keys));
    assert.equal(keys.length, 6);
    ok(await call(two, 'w', 'sharedClose'));
    await one.close();
    await two.close();
  });

  test('OPFS on the main thread is refused with a typed error', async () => {
    const page = await openPage(context, site);
    const error = await page.evaluate(async () => {
      const { openOpfsStore } = await import('/node_modules/idemdb/dist/esm/browser.js');
      try {
        await openOpfsStore('main-thread.idemdb');
        return null;
      } catch (e) {
        return { name: e.name, code: e.code, isError: e instanceof Error };
      }
    });
    assert.deepEqual(error, { name: 'UnsupportedError', code: 'IDEMDB_UNSUPPORTED', isError: true });
    await page.close();
  });
});

describe('idempotentFetch in a worker', () => {
  test('the server drops the first responses after the effect: same key every retry, one effect', async () => {
    site.reset();
    const page = await openPage(context, site);
    await spawn(page, 'f');
    ok(await call(page, 'f', 'open', { name: 'fetch.idemdb' }));
    const result = ok(await call(page, 'f', 'fetchPay', { url: `${site.url}/api/pay?drop=3`, body: { amount: '10.00' } }));
    assert.equal(result.status, 201);
    assert.equal(JSON.parse(result.body).charge, 'ch_1');
    // Four requests reached the server (three responses dropped), all with the same key, and
    // the effect ran once. Chromium itself resends a request whose reused connection was reset
    // (with the same headers, hence the same key), so some of the four may be the browser's own
    // retries rather than idempotentFetch's: the key protects both.
    assert.equal(site.state.seen.length, 4);
    assert.equal(new Set(site.state.seen).size, 1);
    assert.equal(site.state.effects, 1);
    const [intent] = ok(await call(page, 'f', 'list'));
    assert.equal(intent.key, site.state.seen[0]);
    assert.equal(intent.state, 'completed');
    assert.ok(intent.attempts >= 1 && intent.attempts <= 4, `attempts ${intent.attempts}`);
    ok(await call(page, 'f', 'close'));
    await page.close();
  });

  test('offline: the intent stays pending and is resumed when the browser comes back online', async () => {
    site.reset();
    const page = await openPage(context, site);
    await spawn(page, 'o');
    ok(await call(page, 'o', 'open', { name: 'offline.idemdb' }));
    await context.setOffline(true);
    const failed = await call(page, 'o', 'fetchPay', { url: `${site.url}/api/pay`, body: { amount: '3.00' }, retry: { maxAttempts: 2 } });
    assert.equal(failed.error?.code, 'IDEMDB_RETRIES_EXHAUSTED');
    assert.equal(site.state.effects, 0);
    assert.equal(ok(await call(page, 'o', 'list'))[0].attempts, 0, 'offline: nothing sent, nothing charged');
    const [pending] = ok(await call(page, 'o', 'pending'));
    ok(await call(page, 'o', 'autoResume'));
    // The start-up pass runs while still offline and gives up; the intent stays pending.
    await page.waitForFunction(() => window.events('o').some((e) => e.results.some((r) => r.error === 'IDEMDB_RETRIES_EXHAUSTED')), null, { timeout: 20_000 });
    assert.equal(site.state.effects, 0);
    // Back online: the worker notices (the `online` event, or navigator.onLine turning true:
    // Chromium's network emulation changes navigator.onLine in workers without the event).
    await context.setOffline(false);
    await page.waitForFunction(() => window.events('o').some((e) => e.results.some((r) => r.status === 201)), null, { timeout: 20_000 });
    assert.deepEqual(site.state.seen, [pending]);
    assert.equal(site.state.effects, 1);
    assert.deepEqual(ok(await call(page, 'o', 'pending')), []);
    assert.equal(ok(await call(page, 'o', 'list'))[0].attempts, 1, 'one attempt charged: the send that got through');
    ok(await call(page, 'o', 'close'));
    await page.close();
  });
});

describe('the same store bytes natively', { skip: !process.env.IDEMDB_SNAPSHOT_TOOL }, () => {
  const tool = process.env.IDEMDB_SNAPSHOT_TOOL;
  const dir = mkdtempSync(join(tmpdir(), 'idemdb-cross-'));

  test('a snapshot exported in the browser opens with the Rust crate', async () => {
    const page = await openPage(context, site);
    await spawn(page, 's');
    ok(await call(page, 's', 'open', { name: 'export.idemdb' }));
    ok(await call(page, 's', 'fixture'));
    const base64 = ok(await call(page, 's', 'exportSnapshot'));
    const file = join(dir, 'from-browser.idemdb');
    writeFileSync(file, Buffer.from(base64, 'base64'));
    const read = spawnSync(tool, ['read', file], { encoding: 'utf8' });
    assert.equal(read.status, 0, read.stderr);
    assert.match(read.stdout, /^verify ok$/m);
    assert.match(read.stdout, /^intent browser pay browser-intent-1 pending attempts=0 request=\{"from":"browser"\}$/m);
    assert.match(read.stdout, /^record browser pay browser-record-1 completed body=browser-body$/m);
    ok(await call(page, 's', 'close'));
    await page.close();
  });

  test('a store written by the Rust crate opens in the browser (OPFS and memory)', async () => {
    const file = join(dir, 'from-native.idemdb');
    const write = spawnSync(tool, ['write', file], { encoding: 'utf8' });
    assert.equal(write.status, 0, write.stderr);
    const base64 = readFileSync(file).toString('base64');
    const page = await openPage(context, site);
    await spawn(page, 'n');
    assert.deepEqual(ok(await call(page, 'n', 'memoryFromSnapshot', { base64 })), ['native-intent-1']);
    ok(await call(page, 'n', 'importSnapshot', { name: 'native.idemdb', base64 }));
    ok(await call(page, 'n', 'open', { name: 'native.idemdb' }));
    assert.deepEqual(ok(await call(page, 'n', 'list')), [{ key: 'native-intent-1', state: 'pending', attempts: 1, tenant: 'native' }]);
    assert.deepEqual(ok(await call(page, 'n', 'record', { tenant: 'native', operation: 'pay', key: 'native-record-1' })), { state: 'completed', body: 'native-body' });
    ok(await call(page, 'n', 'close'));
    await page.close();
  });
});

describe('README: the browser worker example as written', () => {
  /** Starts `url` as a module worker, posts a payment at once (no waiting for a ready message), and answers its reply. */
  const payAtOnce = (page, url) =>
    page.evaluate(
      (workerUrl) =>
        new Promise((resolve, reject) => {
          const worker = new Worker(workerUrl, { type: 'module' });
          worker.onerror = (e) => reject(new Error(e.message));
          const id = crypto.randomUUID();
          let stored = false;
          worker.onmessage = ({ data }) => {
            if ('resumed' in data) return; // autoResume's start-up pass
            if (data.id === id && data.stored === true) return void (stored = true);
            resolve({ ...data, stored, sameId: data.id === id });
            worker.terminate();
          };
          worker.postMessage({ id, payment: { amount: '7.00' } }); // right after new Worker(...)
        }),
      url,
    );
  const example = () => readmeBlock(project, '// payments.worker.js');
  /** Runs shell `commands` in the project, beside the README worker saved as payments.worker.js. */
  const bundle = (commands) => {
    site.reset();
    linkEsbuild();
    writeFileSync(join(project, 'payments.worker.js'), example());
    rmSync(join(project, 'public'), { recursive: true, force: true });
    const build = spawnSync('bash', ['-euc', commands], { cwd: project, encoding: 'utf8' });
    assert.equal(build.status, 0, build.stdout + build.stderr);
  };

  test('without a bundler: the documented path instead of the bare specifier; a message posted at once is answered', async () => {
    site.reset();
    const documented = "'/node_modules/idemdb/dist/esm/browser.js'";
    assert.ok(readmeBlock(project, '// payments.worker.js') && readFileSync(join(project, 'node_modules', 'idemdb', 'README.md'), 'utf8').includes(`from ${documented}`));
    writeFileSync(join(project, 'browser', 'readme.worker.js'), example().replaceAll("from 'idemdb'", `from ${documented}`));
    const page = await openPage(context, site);
    const answer = await payAtOnce(page, '/browser/readme.worker.js');
    assert.equal(answer.status, 201, JSON.stringify(answer));
    assert.equal(answer.body.charge, 'ch_1');
    assert.ok(answer.stored && answer.sameId, 'told "stored" before the answer, by the id it posted');
    assert.equal(site.state.effects, 1);
    await page.close();
  });

  test('120 payments through the README worker, page reloads at random points: each told "stored" is sent exactly once, and reposting the others is safe', async () => {
    site.reset();
    const documented = "'/node_modules/idemdb/dist/esm/browser.js'";
    writeFileSync(join(project, 'browser', 'readme.worker.js'), example().replaceAll("from 'idemdb'", `from ${documented}`));
    site.state.holdMs = 60; // each effect's response comes 60 ms after it: reloads cut answers off
    const page = await openPage(context, site);
    const stored = new Set(); // ids the page was told are on disk
    const answered = new Map(); // id -> status
    await page.exposeFunction('report', (data) => {
      if (data.stored === true) stored.add(data.id);
      else if (data.id && typeof data.status === 'number') answered.set(data.id, data.status);
    });
    const start = () => page.evaluate(() => {
      window.payments = new Worker('/browser/readme.worker.js', { type: 'module' });
      window.payments.onmessage = ({ data }) => window.report(data);
    });
    const post = (messages) => page.evaluate((list) => list.forEach((m) => window.payments.postMessage(m)), messages);
    // A fixed seed: the same reload points on every run.
    let seed = 20261202;
    const random = () => ((seed = (seed * 1103515245 + 12345) % 2147483648) / 2147483648);
    const ids = Array.from({ length: 120 }, (_, n) => `pay-${String(n).padStart(3, '0')}-${randomUUID()}`);
    const payment = (id) => ({ id, payment: { n: Number(id.slice(4, 7)), amount: '10.00' } });
    await start();
    let reloads = 0;
    let toldBeforeAReload = 0;
    for (let i = 0; i < ids.length; ) {
      const burst = ids.slice(i, i + 1 + Math.floor(random() * 6));
      i += burst.length;
      await post(burst.map(payment));
      if (random() < 0.3) {
        // Reload at a random point after the burst was posted: mid-flight.
        await new Promise((resolve) => setTimeout(resolve, Math.floor(random() * 400)));
        const toldNow = ids.filter((id) => stored.has(id) && !answered.has(id)).length;
        toldBeforeAReload += toldNow;
        await page.reload();
        await page.waitForFunction(() => window.ready === true);
        await start();
        reloads += 1;
      }
    }
    // The last page stays: its worker resumes what the reloads cut off. The page reposts, with
    // the same id, every payment it got no answer for (told "stored" or not).
    const unanswered = () => ids.filter((id) => !answered.has(id));
    await post(unanswered().map(payment));
    for (let round = 0; round < 1200 && unanswered().length > 0; round++) await new Promise((resolve) => setTimeout(resolve, 50));
    assert.deepEqual(unanswered(), [], 'every payment answered in the end');
    assert.ok(reloads >= 3, `reloads: ${reloads}`);
    assert.ok(toldBeforeAReload >= 1, 'some reload came between "stored" and the answer');
    site.state.holdMs = 0;
    // The server's effects, counted per payment (the request's n) and per key.
    const effects = new Map();
    for (const [key, body] of site.state.effectsByKey) {
      const n = JSON.parse(body).request.n;
      effects.set(n, [...(effects.get(n) ?? []), key]);
    }
    for (const id of ids) {
      const n = payment(id).payment.n;
      assert.deepEqual(effects.get(n), [id], `payment ${n}: one effect, under its own id`);
    }
    assert.equal(site.state.effects, 120);
    assert.ok(stored.size >= 1 && [...stored].every((id) => answered.get(id) === 201));
    console.log(`# README worker: ${reloads} reloads, ${stored.size} told stored, ${toldBeforeAReload} told stored but unanswered when a reload came, ${site.state.seen.length} sends for 120 effects`);
    await page.close();
  });

  test('with esbuild: the README commands as written bundle it, and it runs', { skip: !process.env.IDEMDB_ESBUILD && 'IDEMDB_ESBUILD not set' }, async () => {
    bundle(readmeBlock(project, '# esbuild'));
    const page = await openPage(context, site);
    const answer = await payAtOnce(page, '/public/payments.worker.js');
    assert.equal(answer.status, 201, JSON.stringify(answer));
    assert.equal(site.state.effects, 1);
    await page.close();
  });

  test('with esbuild but no copied .wasm: a NotReadyError that says what to do', { skip: !process.env.IDEMDB_ESBUILD && 'IDEMDB_ESBUILD not set' }, async () => {
    bundle(readmeBlock(project, '# esbuild').split('\n').find((line) => line.startsWith('npx esbuild')).replace('--outdir=public', '--outdir=public-no-wasm'));
    const page = await openPage(context, site);
    const answer = await payAtOnce(page, '/public-no-wasm/payments.worker.js');
    assert.equal(answer.error, 'IDEMDB_NOT_READY', JSON.stringify(answer));
    assert.match(answer.message, /idemdb_wasm_bg\.wasm/);
    assert.match(answer.message, /ready\(/);
    assert.equal(site.state.effects, 0);
    await page.close();
  });
});

describe('loading the engine', () => {
  test('fingerprint() before ready() says to await ready(); a failed load is retried; ready(url) loads from elsewhere', async () => {
    cpSync(join(project, 'node_modules', 'idemdb', 'dist', 'wasm', 'idemdb_wasm_bg.wasm'), join(project, 'browser', 'elsewhere.wasm'));
    const page = await openPage(context, site);
    const seen = await page.evaluate(async () => {
      const idemdb = await import('/node_modules/idemdb/dist/esm/browser.js');
      const caught = (f) => {
        try {
          f();
          return null;
        } catch (e) {
          return { name: e.name, code: e.code, message: e.message, isError: e instanceof idemdb.IdemdbError };
        }
      };
      const early = caught(() => idemdb.fingerprint({ a: 1 }));
      const missing = await idemdb.ready('/browser/missing.wasm').then(() => null, (e) => ({ name: e.name, code: e.code, message: e.message }));
      await idemdb.ready('/browser/elsewhere.wasm');
      return { early, missing, fingerprint: idemdb.fingerprint({ a: 1 }), key: idemdb.newKey() };
    });
    assert.deepEqual({ ...seen.early, message: undefined }, { name: 'NotReadyError', code: 'IDEMDB_NOT_READY', message: undefined, isError: true });
    assert.match(seen.early.message, /await ready\(\)/);
    assert.equal(seen.missing.name, 'NotReadyError');
    assert.equal(seen.missing.code, 'IDEMDB_NOT_READY');
    assert.match(seen.fingerprint, /^[0-9a-f]{64}$/);
    assert.match(seen.key, /^[0-9a-f-]{36}$/);
    await page.close();
  });
});

/** esbuild in the scratch project, as `npm install esbuild` would put it (linked from the package's dev dependencies). */
function linkEsbuild() {
  const modules = join(project, 'node_modules');
  const from = process.env.IDEMDB_ESBUILD;
  for (const name of ['esbuild', '@esbuild']) {
    if (!existsSync(join(modules, name))) symlinkSync(join(from, name), join(modules, name));
  }
  mkdirSync(join(modules, '.bin'), { recursive: true });
  if (!existsSync(join(modules, '.bin', 'esbuild'))) symlinkSync('../esbuild/bin/esbuild', join(modules, '.bin', 'esbuild'));
}
