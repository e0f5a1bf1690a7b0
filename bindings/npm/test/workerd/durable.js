// A worker whose idempotency records live in a Durable Object's storage
// (openDurableObjectStore): one object per tenant. POST /pay (payments.js) performs its effect
// once per key; with ?effectMs= the effect takes a while (a timer), so duplicates arriving
// meanwhile find the key in progress; every effect is also written to the object's own `effects` table,
// so the test counts effects across restarts, not responses. GET /effects, GET /snapshot.
import { DurableObject } from 'cloudflare:workers';
import { openDurableObjectStore } from 'idemdb';

import { pay } from './payments.js';

export class Payments extends DurableObject {
  constructor(ctx, env) {
    super(ctx, env);
    ctx.blockConcurrencyWhile(async () => {
      ctx.storage.sql.exec('CREATE TABLE IF NOT EXISTS effects (key TEXT NOT NULL, charge TEXT NOT NULL)');
      this.store = await openDurableObjectStore(ctx.storage);
    });
  }

  async fetch(request) {
    const url = new URL(request.url);
    const store = this.store;
    const sql = this.ctx.storage.sql;
    if (url.pathname === '/effects') {
      return Response.json({ effects: sql.exec('SELECT count(*) AS n FROM effects').one().n });
    }
    if (url.pathname === '/snapshot') return new Response(store.exportSnapshot());
    return pay(store, request, async (key, body) => {
      const delay = Number(url.searchParams.get('effectMs') ?? 0);
      if (delay > 0) await new Promise((resolve) => setTimeout(resolve, delay)); // the effect takes time
      const charge = `ch_${sql.exec('SELECT count(*) AS n FROM effects').one().n + 1}`;
      sql.exec('INSERT INTO effects (key, charge) VALUES (?, ?)', key, charge); // the effect, counted
      return JSON.stringify({ charge, amount: JSON.parse(body).amount });
    });
  }
}

export default {
  async fetch(request, env) {
    // One object per tenant: every request of a tenant reaches the same object, hence the same store.
    const tenant = request.headers.get('x-tenant') ?? 'acme';
    return env.PAYMENTS.get(env.PAYMENTS.idFromName(tenant)).fetch(request);
  },
};
