import { openFileStore, idempotentFetch, StoreBusyError, type Intent, type Reservation, IdemdbError } from 'idemdb';
const store = await openFileStore('x.idemdb');
const intent: Intent = store.createIntent({ tenant: 'a', operation: 'b' }, { amount: 1 });
if (intent.state === 'completed') { const s: number = intent.response.status; void s; }
const r: Reservation = store.reserveRequest({ tenant: 'a', operation: 'b' }, 'k', {});
if (r.status === 'acquired') store.complete(r.lease, 'done');
const res: Response = await idempotentFetch(store, 'http://x', { scope: { tenant: 'a', operation: 'b' } });
try { } catch (e) { if (e instanceof StoreBusyError) { const c: string = e.code; void c; } }
const err: IdemdbError['code'] = 'IDEMDB_KEY_MISMATCH'; void err; void res;
// @ts-expect-error unknown outcome
store.recordAttempt({ tenant: 'a', operation: 'b' }, 'k', { outcome: 'nope' });
import { ready, openHostStore, type HostStorage, type ErrorCode, type FileStoreOptions } from 'idemdb';
await ready();
const host: HostStorage = { read: (_o, out) => out.fill(0), write: () => {}, size: () => 0, truncate: () => {}, flush: () => {} };
const hosted = await openHostStore(host, { durability: 'eventual' });
const waitOption: FileStoreOptions = { wait: 500 };
const code: ErrorCode = 'IDEMDB_NOT_READY';
void hosted; void waitOption; void code;
// @ts-expect-error a read that returns bytes is not a HostStorage
const wrong: HostStorage = { read: (_o: number, n: number) => new Uint8Array(n), write: () => {}, size: () => 0, truncate: () => {}, flush: () => {} };
void wrong;
// The README's replay: the engine's bytes are a BodyInit under TypeScript 5.9 (Uint8Array<ArrayBuffer>).
if (r.status === 'replay') { const replayed: Response = new Response(r.body); void replayed; }
if (intent.state === 'completed') { const recorded: Response = new Response(intent.response.body); void recorded; }
