// A worker with a memory store in its isolate (payments.js serves POST /pay): the effect runs
// once per key while the isolate lives. GET /stats counts effects; GET /snapshot exports the store.
import { openMemoryStore } from 'idemdb';

import { pay } from './payments.js';

let opening;
let effects = 0;

export default {
  async fetch(request) {
    opening ??= openMemoryStore(); // one store, even for concurrent first requests
    const store = await opening;
    const url = new URL(request.url);
    if (url.pathname === '/stats') return Response.json({ effects });
    if (url.pathname === '/snapshot') return new Response(store.exportSnapshot());
    return pay(store, request, (key, body) => {
      effects += 1; // the effect
      return JSON.stringify({ charge: `ch_${effects}`, amount: JSON.parse(body).amount });
    });
  },
};
