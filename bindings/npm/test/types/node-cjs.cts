import idemdb = require('idemdb');
async function main() { const s = await idemdb.openMemoryStore(); const i: idemdb.Intent = s.createIntent({ tenant: 'a', operation: 'b' }, {}); void i; }
void main;
