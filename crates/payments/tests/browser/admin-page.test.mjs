// The operator's page of the payments example in headless Chromium: a charge whose provider
// answer was lost waits in the queue; the operator opens the page, enters the admin token,
// opens the entry, reads the charge's amount and destination, asks the provider (which fills
// in the charge id) and confirms. The retry of the key then replays the 201 and the ledger has
// exactly one payment and one provider call. The page never shows the tenant (here the
// client's bearer token), shows readable times, and fits a 360 px wide phone.
//
//   node --test crates/payments/tests/browser/admin-page.test.mjs
//
// PAYMENTS_EXAMPLE: the binary (default target/debug/payments-example; build it first with
// `cargo build -p payments-example`). IDEMDB_CHROMIUM: Chromium (default /usr/bin/chromium).
// Chromium missing is a failure, not a skip.
import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { createInterface } from 'node:readline';
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { fileURLToPath } from 'node:url';

const repo = resolve(dirname(fileURLToPath(import.meta.url)), '..', '..', '..', '..');
// playwright-core lives in the npm package's development dependencies.
const { chromium } = createRequire(join(repo, 'bindings', 'npm', 'package.json'))('playwright-core');
const executablePath = process.env.IDEMDB_CHROMIUM ?? '/usr/bin/chromium';
const binary = process.env.PAYMENTS_EXAMPLE ?? join(repo, 'target', 'debug', 'payments-example');
const TOKEN = 'operator-secret-0123456789';
// The tenant is the client's bearer token: a credential the page must never show.
const TENANT = 'sk_tenant_bearer_5c2e91';
const FLAGS = [
  '--headless',
  '--no-sandbox',
  '--disable-gpu',
  '--disable-quic',
  '--no-first-run',
  '--disable-background-networking',
  '--disable-component-update',
  '--disable-sync',
];

/** Starts the example on port 0 and resolves with its URL once it listens. */
function startService(data) {
  const child = spawn(binary, [
    '--addr', '127.0.0.1:0', '--data', data, '--admin-token', TOKEN,
    '--provider-lose-responses-to', 'acct_lost', '--reconcile-interval-secs', '3600',
  ], { stdio: ['ignore', 'pipe', 'inherit'] });
  return new Promise((resolveUrl, reject) => {
    child.on('error', reject);
    child.on('exit', (code) => reject(new Error(`payments-example exited with ${code}`)));
    createInterface({ input: child.stdout }).once('line', (line) => {
      const url = line.trim().replace(/^listening on /, '');
      if (!url.startsWith('http://')) reject(new Error(`unexpected first line: ${line}`));
      else resolveUrl({ child, url });
    });
  });
}

async function pay(url, key) {
  const response = await fetch(`${url}/v1/payments`, {
    method: 'POST',
    headers: { authorization: `Bearer ${TENANT}`, 'idempotency-key': `"${key}"`, 'content-type': 'application/json' },
    body: JSON.stringify({ amount: '20.00', currency: 'BRL', destination: 'acct_lost' }),
  });
  return { status: response.status, replayed: response.headers.get('idempotent-replayed') === 'true', body: await response.json() };
}

async function ledger(url) {
  const response = await fetch(`${url}/v1/ledger`, { headers: { authorization: `Bearer ${TENANT}` } });
  assert.equal(response.status, 200);
  return response.json();
}

test('an operator resolves a lost charge from the page', { timeout: 120_000 }, async () => {
  assert.ok(existsSync(executablePath), `Chromium is required at ${executablePath} (IDEMDB_CHROMIUM)`);
  assert.ok(existsSync(binary), `build the example first: cargo build -p payments-example (${binary})`);
  const data = mkdtempSync(join(tmpdir(), 'payments-admin-page-'));
  const profile = mkdtempSync(join(tmpdir(), 'idemdb-chromium-'));
  const { child, url } = await startService(data);
  let context;
  try {
    const first = await pay(url, 'order-900');
    assert.equal(first.status, 502, JSON.stringify(first.body));
    const before = await ledger(url);
    assert.equal(before.payments.length, 0);
    assert.equal(before.provider_charges.length, 1, 'the provider charged, the answer was lost');
    const chargeId = before.provider_charges[0].id;

    context = await chromium.launchPersistentContext(profile, { executablePath, headless: true, args: FLAGS });
    const page = await context.newPage();
    const errors = [];
    page.on('pageerror', (error) => errors.push(String(error)));
    await page.goto(`${url}/v1/admin`);
    // Without the token the page says so and lists nothing.
    await page.locator('#status.error').waitFor();
    assert.match(await page.locator('#status').textContent(), /^401/);
    await page.fill('#token', TOKEN);
    await page.click('#refresh');
    const row = page.locator('#queue tr', { hasText: 'order-900' });
    await row.waitFor();
    assert.equal(await page.locator('#queue tr').count(), 1, 'one entry waits');
    assert.match(await row.textContent(), /effect charge \(uncertain/);

    await row.locator('button.open').click();
    await page.locator('#detail').waitFor();
    assert.match(await page.locator('#detail-record').textContent(), /"state": "uncertain"/);
    await page.locator('#history tr', { hasText: 'effect_reported' }).waitFor();
    // The charge in the business's words, and times as people read them (old page: raw JSON
    // with millisecond timestamps, no amount or destination).
    const facts = await page.locator('#detail-facts').innerText();
    const effect = await page.locator('#detail-effects').innerText();
    assert.match(effect, /20\.00 BRL/);
    assert.match(effect, /acct_lost/);
    // (A fence may be as long as a timestamp: only the history's times are checked there.)
    const at = (await page.locator('#history tr td:first-child').allInnerTexts()).join('\n');
    for (const text of [facts, effect, at]) {
      assert.doesNotMatch(text, /\b1\d{12}\b/, `no millisecond timestamps: ${text}`);
    }
    assert.match(facts, /created\s+\S+/);
    // The tenant is never on the page (old page: in the queue and the record).
    assert.ok(!(await page.content()).includes(TENANT), 'the tenant is not on the page');
    // Ask the provider: it made the charge, and its id fills the reference (old page: no button).
    await page.click('#ask');
    await page.locator('#provider-says', { hasText: chargeId }).waitFor();
    assert.equal(await page.inputValue('#reference'), chargeId);
    // A phone: nothing is wider than 360 px (old page: the queue table and the raw record overflowed).
    await page.setViewportSize({ width: 360, height: 740 });
    const overflow = await page.evaluate(() => document.documentElement.scrollWidth);
    assert.ok(overflow <= 360, `the page is ${overflow} px wide at 360`);
    await page.setViewportSize({ width: 1280, height: 800 });
    await page.fill('#note', 'seen on the provider dashboard');
    await page.click('#buttons button[data-action="confirmed"]');
    await page.locator('#status.ok', { hasText: 'resolved: effect charge confirmed' }).waitFor();
    await page.locator('#empty:not([hidden])').waitFor();
    assert.equal(await page.locator('#queue tr').count(), 0, 'the queue is empty');
    assert.deepEqual(errors, [], 'no script errors');

    const retry = await pay(url, 'order-900');
    assert.equal(retry.status, 201, JSON.stringify(retry.body));
    assert.equal(retry.replayed, true);
    assert.equal(retry.body.provider_charge, chargeId);
    const after = await ledger(url);
    const payments = after.payments.filter((p) => p.idempotency_key === 'order-900');
    assert.equal(payments.length, 1, 'exactly one payment row');
    assert.equal(payments[0].provider_charge, chargeId);
    assert.equal(after.provider_charges.length, 1);
    assert.equal(after.provider_charges[0].calls, 1, 'the provider was called once');
  } finally {
    if (context) await context.close();
    child.kill('SIGTERM');
    rmSync(profile, { recursive: true, force: true });
    rmSync(data, { recursive: true, force: true });
  }
});
