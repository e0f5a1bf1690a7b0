// Node, CommonJS: require('idemdb') from the installed tarball.
const assert = require('node:assert/strict');
const { mkdtempSync } = require('node:fs');
const { tmpdir } = require('node:os');
const { join } = require('node:path');
const { test } = require('node:test');

const idemdb = require('idemdb');

test('require() gives the Node build with typed errors', async () => {
  assert.equal(typeof idemdb.openFileStore, 'function');
  const store = await idemdb.openMemoryStore();
  const intent = store.createIntent({ tenant: 'cjs', operation: 'pay' }, { amount: 1 });
  assert.equal(intent.state, 'pending');
  assert.throws(() => store.createIntent({ tenant: 'cjs', operation: 'pay' }, '{'), (e) => e instanceof idemdb.InvalidInputError && e.code === 'IDEMDB_INVALID_REQUEST');
  store.close();
});

test('file store from CommonJS', async () => {
  const file = join(mkdtempSync(join(tmpdir(), 'idemdb-cjs-')), 's.idemdb');
  let store = await idemdb.openFileStore(file);
  const key = store.createIntent({ tenant: 'cjs', operation: 'pay' }, {}).key;
  store.close();
  store = await idemdb.openFileStore(file);
  assert.equal(store.pendingIntents()[0].key, key);
  store.close();
});
