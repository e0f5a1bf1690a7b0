// A worker that reserves and replays through the package: POST /pay with an Idempotency-Key
// performs its effect once per key; retries get the stored response byte for byte; a different
// body under the same key is refused with 422; a duplicate while running gets 409.
import { fingerprint, openMemoryStore, InvalidInputError } from 'idemdb';

const scope = { tenant: 'edge', operation: 'pay' };
let opening;
let effects = 0;

export default {
  async fetch(request) {
    opening ??= openMemoryStore(); // one store, even for concurrent first requests
    const store = await opening;
    const url = new URL(request.url);
    if (url.pathname === '/stats') return Response.json({ effects });
    if (url.pathname === '/snapshot') return new Response(store.exportSnapshot());
    const key = request.headers.get('idempotency-key');
    if (!key) return Response.json({ error: 'Idempotency-Key required' }, { status: 400 });
    const body = await request.text();
    let answer;
    try {
      answer = store.reserve(scope, key, fingerprint(body, { exclude: ['/trace_id'] }));
    } catch (error) {
      if (error instanceof InvalidInputError) return Response.json({ error: error.message, code: error.code }, { status: 400 });
      throw error;
    }
    switch (answer.status) {
      case 'acquired': {
        effects += 1; // the effect
        const result = JSON.stringify({ charge: `ch_${effects}`, amount: JSON.parse(body).amount });
        store.complete(answer.lease, result);
        return new Response(result, { status: 201, headers: { 'content-type': 'application/json' } });
      }
      case 'replay':
        return new Response(answer.body, { status: 201, headers: { 'content-type': 'application/json', 'idempotent-replayed': 'true' } });
      case 'in_progress':
        return Response.json({ error: 'in progress' }, { status: 409, headers: { 'retry-after': String(Math.ceil(answer.retryAfterMs / 1000)) } });
      case 'mismatch':
        return Response.json({ error: 'key reused with a different request' }, { status: 422 });
      default:
        return Response.json({ error: answer.status }, { status: 409 });
    }
  },
};
