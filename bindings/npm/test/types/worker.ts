// A Cloudflare Worker's view (lib WebWorker, bundler resolution): the Durable Object store
// with a storage of the shape `@cloudflare/workers-types` declares.
import { openDurableObjectStore, fingerprint, type DurableObjectStorageLike, type Reservation } from 'idemdb';

interface SqlStorageCursor<T> extends Iterable<T> { toArray(): T[]; one(): T; }
interface DurableObjectStorage {
  sql: { exec<T extends Record<string, string | number | null | ArrayBuffer>>(query: string, ...bindings: any[]): SqlStorageCursor<T> };
  transactionSync<T>(closure: () => T): T;
  get(key: string): Promise<unknown>;
}
declare const storage: DurableObjectStorage;
const accepted: DurableObjectStorageLike = storage;
const store = await openDurableObjectStore(storage, { table: 'payments', durability: 'immediate' });
const answer: Reservation = store.reserve({ tenant: 't', operation: 'o' }, 'k', fingerprint('{}'));
if (answer.status === 'acquired') store.complete(answer.lease, new Uint8Array([1]));
const response: Response = new Response(null);
void accepted; void response;
// The README's replay: the engine's bytes are a BodyInit under TypeScript 5.9 (Uint8Array<ArrayBuffer>).
if (answer.status === 'replay') { const replayed: Response = new Response(answer.body, { status: 201 }); void replayed; }
