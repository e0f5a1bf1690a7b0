// The child of kill.test.mjs: resumes what is pending in the store file, then sends every
// payment with its own key (a finished one answers from the store, unsent). Killed at random.
import { idempotentFetch, openFileStore, resumePending } from 'idemdb';

const [file, base, count] = process.argv.slice(2);
const scope = { tenant: 'me', operation: 'pay' };
const retry = { maxAttempts: 6, baseDelayMs: 5, maxDelayMs: 40, timeoutMs: 2000 };
const store = await openFileStore(file, { wait: true });
// The parent times its kill from here, so a slow start on a loaded machine cannot use it up.
process.stdout.write('open\n');
await resumePending(store, { retry });
for (let n = 0; n < Number(count); n++) {
  const key = `pay-${String(n).padStart(2, '0')}`;
  // The parent may time its kill from the start of a call, so that kills land mid-flight
  // however fast this machine is.
  process.stdout.write(`call ${key}\n`);
  await idempotentFetch(store, `${base}/api/pay?drop=1`, {
    scope,
    key,
    init: { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ n }) },
    retry,
  }).catch(() => undefined); // stays pending (resumed by the next run) or is final
}
store.close();
