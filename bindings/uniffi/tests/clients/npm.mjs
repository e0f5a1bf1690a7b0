// The npm client of the cross-runtime client test (run.mjs): `idempotentFetch` with the
// package's Node file store.
//
//   node npm.mjs PACKAGE_ENTRY STORE BASE_URL N RUN
//
// Resumes what the store holds pending (a previous run killed with SIGKILL), then sends
// payments RUN-00 .. RUN-<N-1> (a finished one answers from the store, unsent), each until it
// has a final answer or needs attention, and prints one line "report <json>": every intent's
// state, status, attention cause and attempts, read back from the store.
import { pathToFileURL } from 'node:url';

const [entry, file, baseUrl, count, run] = process.argv.slice(2);
const { idempotentFetch, openFileStore, resumePending, RetriesExhaustedError } = await import(pathToFileURL(entry).href);

const scope = { tenant: 'acme', operation: 'create_payment' };
// 800 ms per attempt (the server's stalls are longer), Retry-After honoured up to 1 s, at most
// 20 attempts charged per intent (the default) and more per call, so one call ends final.
const retry = { maxAttempts: 40, baseDelayMs: 20, maxDelayMs: 1000, timeoutMs: 800 };
const keyOf = (i) => `${run}-${String(i).padStart(2, '0')}`;
const payment = (i) => ({ amount: `${i + 1}.00`, currency: 'EUR', ref: keyOf(i) });

const store = await openFileStore(file, { wait: 5000 });
const resumed = await resumePending(store, { baseUrl, retry });
console.log(`resumed ${resumed.length}`);
for (let i = 0; i < Number(count); i++) {
  const key = keyOf(i);
  for (let call = 0; call < 5 && store.getIntent(scope, key)?.state !== 'completed'; call++) {
    const before = store.getIntent(scope, key);
    if (before && before.state !== 'pending') break; // needs attention (or abandoned): a person's
    try {
      await idempotentFetch(store, '/payments', {
        scope,
        key,
        baseUrl,
        retry,
        init: { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(payment(i)) },
      });
    } catch (error) {
      // 422 (KeyMismatchError) and NeedsAttentionError are final here; the store says which.
      if (!(error instanceof RetriesExhaustedError) && error?.code !== 'IDEMDB_KEY_MISMATCH' && error?.code !== 'IDEMDB_NEEDS_ATTENTION') {
        throw error;
      }
    }
  }
}
const intents = [];
for (let i = 0; i < Number(count); i++) {
  const intent = store.getIntent(scope, keyOf(i));
  intents.push({
    key: keyOf(i),
    state: intent?.state ?? 'missing',
    status: intent?.response?.status ?? null,
    cause: intent?.cause ?? null,
    attempts: intent?.attempts ?? 0,
    body: intent?.response ? new TextDecoder().decode(intent.response.body) : null,
  });
}
store.close();
console.log(`report ${JSON.stringify({ intents })}`);
