// Local test server (loopback, port 0): an API whose effect happens once per idempotency key
// and whose first responses can be dropped AFTER the effect, plus static files for the
// browser tests. Used by the Node and Chromium tests.
import { createServer } from 'node:http';
import { readFile } from 'node:fs/promises';
import { extname, join, normalize } from 'node:path';

const TYPES = { '.html': 'text/html', '.js': 'text/javascript', '.mjs': 'text/javascript', '.cjs': 'text/javascript', '.wasm': 'application/wasm', '.json': 'application/json' };

// The key of an Idempotency-Key header: an sf-string ("...", with \" and \\ escaped) is
// decoded; anything else is taken as it is (a bare token).
function decodeKey(raw) {
  const match = /^"((?:[^"\\]|\\["\\])*)"$/.exec(raw);
  return match ? match[1].replace(/\\(["\\])/g, '$1') : raw;
}

export async function startServer({ staticRoot } = {}) {
  const state = {
    effects: 0,
    effectsByKey: new Map(), // key -> response body
    seen: [], // every idempotency key received, in order (the sf-string decoded)
    rawKeys: [], // the Idempotency-Key header values as they arrived
    drops: new Map(), // key -> responses still to drop
    busy: new Map(), // key -> 503s still to send
    holdMs: 0, // how long a response waits after its effect (a slow network): reloads then land mid-flight
  };
  const server = createServer(async (req, res) => {
    const url = new URL(req.url, 'http://localhost');
    const chunks = [];
    for await (const chunk of req) chunks.push(chunk);
    const body = Buffer.concat(chunks).toString('utf8');
    const raw = req.headers['idempotency-key'];
    if (typeof raw === 'string') state.rawKeys.push(raw);
    const key = typeof raw === 'string' ? decodeKey(raw) : undefined;
    const json = (status, value, headers = {}) => {
      res.writeHead(status, { 'content-type': 'application/json', ...headers });
      res.end(JSON.stringify(value));
    };
    if (url.pathname === '/api/pay' || url.pathname === '/api/payments' || url.pathname === '/api/busy') {
      if (typeof key !== 'string') return json(400, { error: 'Idempotency-Key required' });
      state.seen.push(key);
      if (url.pathname === '/api/busy') {
        if (!state.busy.has(key)) state.busy.set(key, Number(url.searchParams.get('busy') ?? 1));
        if (state.busy.get(key) > 0) {
          state.busy.set(key, state.busy.get(key) - 1);
          return json(503, { error: 'try later' }, { 'retry-after': url.searchParams.get('retryAfter') ?? '1' });
        }
      }
      if (!state.effectsByKey.has(key)) {
        state.effects += 1; // the effect: performed once per key
        state.effectsByKey.set(key, JSON.stringify({ charge: `ch_${state.effects}`, request: body ? JSON.parse(body) : null }));
        state.drops.set(key, Number(url.searchParams.get('drop') ?? 0));
      }
      if (state.holdMs > 0) await new Promise((resolve) => setTimeout(resolve, state.holdMs));
      const toDrop = state.drops.get(key) ?? 0;
      if (toDrop > 0) {
        state.drops.set(key, toDrop - 1);
        req.socket.destroy(); // the effect happened, the response is lost
        return;
      }
      res.writeHead(201, { 'content-type': 'application/json', 'x-replayed': String(state.seen.filter((k) => k === key).length > 1) });
      return res.end(state.effectsByKey.get(key));
    }
    if (url.pathname === '/api/conflict') {
      state.seen.push(key);
      return json(422, { error: 'key reused with a different request' });
    }
    if (url.pathname === '/api/stats') return json(200, { effects: state.effects, seen: state.seen });
    if (url.pathname === '/api/down') {
      req.socket.destroy();
      return;
    }
    if (staticRoot) {
      const path = normalize(join(staticRoot, decodeURIComponent(url.pathname)));
      if (!path.startsWith(staticRoot)) return json(403, {});
      try {
        const data = await readFile(path);
        res.writeHead(200, { 'content-type': TYPES[extname(path)] ?? 'application/octet-stream', 'cache-control': 'no-store' });
        return res.end(data);
      } catch {
        return json(404, { error: 'not found' });
      }
    }
    json(404, { error: 'not found' });
  });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address();
  return {
    url: `http://127.0.0.1:${port}`,
    state,
    reset() {
      state.effects = 0;
      state.effectsByKey.clear();
      state.seen.length = 0;
      state.rawKeys.length = 0;
      state.drops.clear();
      state.busy.clear();
      state.holdMs = 0;
    },
    close: () => new Promise((resolve) => { server.closeAllConnections?.(); server.close(resolve); }),
  };
}
