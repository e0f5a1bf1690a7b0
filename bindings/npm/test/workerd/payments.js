// The payment endpoint of the test workers (worker.js: memory store; durable.js: Durable
// Object store): a POST with an Idempotency-Key runs `effect` once per key; retries get the
// stored response byte for byte; a different body under the same key gets 422; a duplicate
// while the effect runs gets 409; a bad key gets 400 with its code.
import { fingerprint, InvalidInputError } from 'idemdb';

const scope = { tenant: 'edge', operation: 'pay' };
const json = { 'content-type': 'application/json' };

/** Answers `request` through `store`; `effect(key, body)` performs the effect and returns the result (text). */
export async function pay(store, request, effect) {
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
      const result = await effect(key, body);
      store.complete(answer.lease, result);
      return new Response(result, { status: 201, headers: json });
    }
    case 'replay':
      return new Response(answer.body, { status: 201, headers: { ...json, 'idempotent-replayed': 'true' } });
    case 'in_progress':
      return Response.json({ error: 'in progress' }, { status: 409, headers: { 'retry-after': String(Math.ceil(answer.retryAfterMs / 1000)) } });
    case 'mismatch':
      return Response.json({ error: 'key reused with a different request' }, { status: 422 });
    default:
      return Response.json({ error: answer.status }, { status: 409 });
  }
}
