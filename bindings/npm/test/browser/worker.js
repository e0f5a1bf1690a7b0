// Worker side of the browser tests and the benchmark: uses the installed package exactly as an
// app's dedicated worker would.
import {
  autoResume,
  idempotentFetch,
  importOpfsSnapshot,
  openMemoryStore,
  openOpfsStore,
  openSharedStore,
  deleteOpfsStore,
  fingerprint,
} from '/node_modules/idemdb/dist/esm/browser.js';

let store;
const scope = { tenant: 'browser', operation: 'pay' };
const b64 = {
  encode(bytes) {
    let s = '';
    for (let i = 0; i < bytes.length; i += 0x8000) s += String.fromCharCode(...bytes.subarray(i, i + 0x8000));
    return btoa(s);
  },
  decode(text) {
    return Uint8Array.from(atob(text), (c) => c.charCodeAt(0));
  },
};
const fast = { maxAttempts: 6, baseDelayMs: 20, maxDelayMs: 200, timeoutMs: 3000 };

let shared;
const commands = {
  async openShared({ name }) {
    shared = await openSharedStore(name, { timeoutMs: 5000 });
    return shared.isWriter;
  },
  async sharedIsWriter() {
    return shared.isWriter;
  },
  async sharedCreate({ request }) {
    return (await shared.createIntent(scope, request)).key;
  },
  async sharedPending() {
    return (await shared.pendingIntents()).map((i) => i.key);
  },
  async sharedFetch({ url, body }) {
    const response = await idempotentFetch(shared, url, {
      scope,
      init: { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) },
      retry: fast,
    });
    return { status: response.status, body: await response.text() };
  },
  async sharedClose() {
    shared.close();
    return true;
  },
  async open({ name, wait, queued }) {
    const onQueued = queued ? (info) => postMessage({ event: 'queued', info }) : undefined;
    store = await openOpfsStore(name, { wait, onQueued });
    return true;
  },
  async close() {
    store?.close();
    store = undefined;
    return true;
  },
  async create({ request, key }) {
    return store.createIntent(scope, request, { key }).key;
  },
  async pending() {
    return store.pendingIntents().map((i) => i.key);
  },
  async list() {
    return store.listIntents().map((i) => ({ key: i.key, state: i.state, attempts: i.attempts, tenant: i.tenant }));
  },
  async fetchPay({ url, body, retry }) {
    try {
      const response = await idempotentFetch(store, url, {
        scope,
        init: { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) },
        retry: { ...fast, ...retry },
      });
      return { status: response.status, body: await response.text() };
    } catch (error) {
      return { error: { name: error.name, code: error.code, message: error.message } };
    }
  },
  async autoResume() {
    autoResume(store, { retry: fast, onResumed: (results) => postMessage({ event: 'resumed', results: results.map((r) => ({ key: r.intent.key, status: r.response?.status, error: r.error?.code })) }) });
    return true;
  },
  async fixture() {
    const key = store.createIntent({ tenant: 'browser', operation: 'pay' }, { from: 'browser' }, { key: 'browser-intent-1' }).key;
    const answer = store.reserve({ tenant: 'browser', operation: 'pay' }, 'browser-record-1', fingerprint({ from: 'browser' }));
    store.complete(answer.lease, 'browser-body');
    return key;
  },
  async exportSnapshot() {
    return b64.encode(store.exportSnapshot());
  },
  async importSnapshot({ name, base64 }) {
    await importOpfsSnapshot(name, b64.decode(base64));
    return true;
  },
  async record({ tenant, operation, key }) {
    const record = store.get({ tenant, operation }, key);
    return record && { state: record.state, body: record.body && new TextDecoder().decode(record.body) };
  },
  async memoryFromSnapshot({ base64 }) {
    const copy = await openMemoryStore({ snapshot: b64.decode(base64) });
    return copy.listIntents().map((i) => i.key);
  },
  // What a crash during creation leaves: a half-written temporary file and an empty target.
  async simulateCreationCrash({ name }) {
    const root = await navigator.storage.getDirectory();
    const temp = await (await root.getFileHandle(`${name}.creating-deadbeef`, { create: true })).createSyncAccessHandle();
    temp.write(new Uint8Array(4096).fill(7), { at: 0 });
    temp.close();
    await root.getFileHandle(name, { create: true });
    return true;
  },
  async entries() {
    const root = await navigator.storage.getDirectory();
    const names = [];
    for await (const name of root.keys()) names.push(name);
    return names.sort();
  },
  async delete({ name }) {
    await deleteOpfsStore(name);
    return true;
  },
  // Benchmark: durable intent creations per second through OPFS, one commit (one flush) each,
  // and batched (`createIntents`: one transaction, one durable commit per batch).
  async benchOpfs({ name, count, batch }) {
    await deleteOpfsStore(name);
    const s = await openOpfsStore(name);
    const t0 = performance.now();
    if (batch) {
      for (let i = 0; i < count; i += batch) {
        const requests = [];
        for (let j = i; j < Math.min(count, i + batch); j++) requests.push({ i: j, amount: '10.00' });
        s.createIntents(scope, requests);
      }
    } else {
      for (let i = 0; i < count; i++) s.createIntent(scope, { i, amount: '10.00' });
    }
    const ms = performance.now() - t0;
    s.close();
    return { perSecond: (count / ms) * 1000, ms };
  },
  async benchIdb({ count, batch }) {
    const db = await new Promise((resolve, reject) => {
      const request = indexedDB.open(`bench-${Math.random()}`, 1);
      request.onupgradeneeded = () => request.result.createObjectStore('intents');
      request.onsuccess = () => resolve(request.result);
      request.onerror = () => reject(request.error);
    });
    const put = (items) =>
      new Promise((resolve, reject) => {
        const tx = db.transaction('intents', 'readwrite', { durability: 'strict' });
        for (const [key, value] of items) tx.objectStore('intents').put(value, key);
        tx.oncomplete = resolve;
        tx.onerror = () => reject(tx.error);
      });
    const t0 = performance.now();
    let items = [];
    for (let i = 0; i < count; i++) {
      items.push([crypto.randomUUID(), { request: JSON.stringify({ i, amount: '10.00' }), state: 'pending', createdAt: Date.now() }]);
      if (items.length === (batch || 1)) {
        await put(items);
        items = [];
      }
    }
    if (items.length) await put(items);
    const ms = performance.now() - t0;
    db.close();
    return { perSecond: (count / ms) * 1000, ms };
  },
};

onmessage = async ({ data }) => {
  try {
    postMessage({ id: data.id, ok: true, value: await commands[data.command](data.args) });
  } catch (error) {
    postMessage({ id: data.id, ok: false, error: { name: error.name, code: error.code, message: error.message, waitedMs: error.waitedMs } });
  }
};
