// The Node side of the cross-runtime test (bindings/uniffi/scripts/test.sh, part "cross"),
// through the npm package's Node API:
//   node node.mjs PACKAGE_ENTRY read-kotlin FILE   reads the store the Kotlin bindings wrote
//   node node.mjs PACKAGE_ENTRY write FILE         writes the store the Kotlin bindings read
import assert from 'node:assert/strict';
import { pathToFileURL } from 'node:url';

const [entry, mode, file] = process.argv.slice(2);
const { openFileStore, fingerprint } = await import(pathToFileURL(entry).href);
const text = (bytes) => new TextDecoder().decode(bytes);
const scope = { tenant: 'acme', operation: 'create_payment' };

const store = await openFileStore(file);
if (mode === 'read-kotlin') {
  const fp = fingerprint({ amount: '10.50', currency: 'BRL' }, { exclude: ['/trace_id'], normalise: { '/currency': 'uppercase' } });
  const replay = store.reserve(scope, 'from-kotlin', fp);
  assert.equal(replay.status, 'replay');
  assert.equal(text(replay.body), '{"charge":"ch_kotlin"}');
  assert.deepEqual(store.pendingIntents().map((i) => i.key), ['intent-from-kotlin']);
  assert.equal(text(store.pendingIntents()[0].request), '{"amount":"1.00"}');
} else if (mode === 'write') {
  const answer = store.reserve(scope, 'from-node', '05'.repeat(32));
  assert.equal(answer.status, 'acquired');
  store.complete(answer.lease, new TextEncoder().encode('{"charge":"ch_node"}'));
  store.createIntent(scope, { amount: '2.00' }, { key: 'intent-from-node' });
} else {
  throw new Error(`unknown mode ${mode}`);
}
store.close();
console.log(`node ${mode} ok`);
