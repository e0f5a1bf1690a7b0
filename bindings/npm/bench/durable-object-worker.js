// The Durable Object benchmark's worker (bench/durable-object.mjs): one object holding one
// store per variant — the Durable Object store with 4, 16 or 64 KiB rows, and a memory store
// (the baseline) — each opened on first use. POST /bench?variant=V&n=N runs N reserve+complete
// pairs inside the object (the client times it); POST /pay?variant=V does one pair per request
// (one commit of the object per request); GET /size?variant=V answers the rows and bytes of its pages table.
import { DurableObject } from 'cloudflare:workers';
import { fingerprint, openDurableObjectStore, openMemoryStore } from 'idemdb';

const scope = { tenant: 'bench', operation: 'pay' };
const VARIANTS = {
  'pages-4k': (storage) => openDurableObjectStore(storage, { table: 'p4k', pageBytes: 4096 }),
  'pages-16k': (storage) => openDurableObjectStore(storage, { table: 'p16k', pageBytes: 16384 }),
  'pages-64k': (storage) => openDurableObjectStore(storage, { table: 'p64k', pageBytes: 65536 }),
  memory: () => openMemoryStore(),
};

export class Bench extends DurableObject {
  stores = new Map();

  async store(variant) {
    if (!this.stores.has(variant)) this.stores.set(variant, await VARIANTS[variant](this.ctx.storage));
    return this.stores.get(variant);
  }

  async fetch(request) {
    const url = new URL(request.url);
    const variant = url.searchParams.get('variant') ?? 'pages-4k';
    if (!(variant in VARIANTS)) return new Response(`unknown variant ${variant}`, { status: 400 });
    const store = await this.store(variant);
    const fp = fingerprint({ amount: '1.00' });
    if (url.pathname === '/size') {
      const table = { 'pages-4k': 'p4k', 'pages-16k': 'p16k', 'pages-64k': 'p64k' }[variant];
      if (!table) return Response.json({ rows: 0, bytes: 0 });
      const { rows, bytes } = this.ctx.storage.sql.exec(`SELECT count(*) AS rows, sum(length(bytes)) AS bytes FROM ${table}_pages`).one();
      return Response.json({ rows, bytes });
    }
    if (url.pathname === '/bench') {
      const n = Number(url.searchParams.get('n') ?? 1000);
      const run = url.searchParams.get('run') ?? 'r';
      // Timed by the client: workerd's clock does not advance while JavaScript runs.
      for (let i = 0; i < n; i++) {
        const answer = store.reserve(scope, `${run}-${i}`, fp);
        store.complete(answer.lease, '{"charge":"ch_bench","amount":"1.00"}');
      }
      return Response.json({ n });
    }
    const key = request.headers.get('idempotency-key');
    const answer = store.reserve(scope, key, fp);
    if (answer.status !== 'acquired') return new Response(answer.status, { status: 409 });
    store.complete(answer.lease, '{"charge":"ch_bench","amount":"1.00"}');
    return new Response('ok', { status: 201 });
  }
}

export default {
  fetch(request, env) {
    return env.BENCH.get(env.BENCH.idFromName('bench')).fetch(request);
  },
};
