import { openFileStore, idempotentFetch, StoreBusyError, type Intent, type Reservation, IdemdbError } from 'idemdb';
const store = await openFileStore('x.idemdb');
const intent: Intent = store.createIntent({ tenant: 'a', operation: 'b' }, { amount: 1 });
if (intent.state === 'completed') { const s: number = intent.response.status; void s; }
const r: Reservation = store.reserveRequest({ tenant: 'a', operation: 'b' }, 'k', {});
if (r.status === 'acquired') store.complete(r.lease, 'done');
const res: Response = await idempotentFetch(store, 'http://x', { scope: { tenant: 'a', operation: 'b' } });
try { } catch (e) { if (e instanceof StoreBusyError) { const c: string = e.code; void c; } }
const err: IdemdbError['code'] = 'IDEMDB_CONFLICT'; void err; void res;
// @ts-expect-error unknown outcome
store.recordAttempt({ tenant: 'a', operation: 'b' }, 'k', { outcome: 'nope' });
