// A worker whose idempotency records live in a Durable Object's storage
// (openDurableObjectStore): one object per tenant. POST /pay with an Idempotency-Key performs
// its effect once per key; the effect takes a while (a timer), so duplicates arriving meanwhile
// find the key in progress; every effect is also written to the object's own `effects` table,
// so the test counts effects across restarts, not responses. GET /effects, GET /snapshot.
// `?store=memory` uses a memory store in the same object instead (the benchmark's baseline);
// POST /bench?n=N runs N reserve+complete pairs inside the object and reports the time.
import { DurableObject } from 'cloudflare:workers';
import { fingerprint, openDurableObjectStore, openMemoryStore, InvalidInputError } from 'idemdb';

const scope = { tenant: 'edge', operation: 'pay' };

export class Payments extends DurableObject {
  constructor(ctx, env) {
    super(ctx, env);
    ctx.blockConcurrencyWhile(async () => {
      ctx.storage.sql.exec('CREATE TABLE IF NOT EXISTS effects (key TEXT NOT NULL, charge TEXT NOT NULL)');
      this.durable = await openDurableObjectStore(ctx.storage);
      this.memory = await openMemoryStore();
    });
  }

  async fetch(request) {
    const url = new URL(request.url);
    const store = url.searchParams.get('store') === 'memory' ? this.memory : this.durable;
    const sql = this.ctx.storage.sql;
    if (url.pathname === '/effects') {
      return Response.json({ effects: sql.exec('SELECT count(*) AS n FROM effects').one().n });
    }
    if (url.pathname === '/snapshot') return new Response(store.exportSnapshot());
    if (url.pathname === '/bench') {
      const n = Number(url.searchParams.get('n') ?? 1000);
      const run = `${url.searchParams.get('run') ?? 'r'}-${Date.now()}`;
      const fp = fingerprint({ amount: '1.00' });
      const started = Date.now();
      for (let i = 0; i < n; i++) {
        const answer = store.reserve(scope, `${run}-${i}`, fp);
        store.complete(answer.lease, '{"charge":"bench"}');
      }
      return Response.json({ n, ms: Date.now() - started });
    }
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
        const delay = Number(url.searchParams.get('effectMs') ?? 0);
        if (delay > 0) await new Promise((resolve) => setTimeout(resolve, delay)); // the effect takes time
        const charge = `ch_${sql.exec('SELECT count(*) AS n FROM effects').one().n + 1}`;
        sql.exec('INSERT INTO effects (key, charge) VALUES (?, ?)', key, charge); // the effect, counted
        const result = JSON.stringify({ charge, amount: JSON.parse(body).amount });
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
  }
}

export default {
  async fetch(request, env) {
    // One object per tenant: every request of a tenant reaches the same object, hence the same store.
    const tenant = request.headers.get('x-tenant') ?? 'acme';
    return env.PAYMENTS.get(env.PAYMENTS.idFromName(tenant)).fetch(request);
  },
};
