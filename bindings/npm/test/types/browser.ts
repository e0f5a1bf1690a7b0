import { openOpfsStore, openSharedStore, type SharedStore } from 'idemdb/browser';
const s = await openOpfsStore('a', { wait: 1000 });
const shared: SharedStore = await openSharedStore('b');
void s; void shared;
import { ready, fingerprint, NotReadyError } from 'idemdb/browser';
await ready(new URL('./idemdb_wasm_bg.wasm', import.meta.url));
const fp: string = fingerprint({ a: 1 });
void fp; void NotReadyError;
// An OPFS open's wait takes a signal; an intent's recorded bytes are a BodyInit.
const waited = await openOpfsStore('c', { wait: true, signal: AbortSignal.timeout(1000) });
const [first] = waited.listIntents();
if (first?.state === 'completed') { const recorded: Response = new Response(first.response.body); void recorded; }
