#!/usr/bin/env node
// Benchmark (not a test): durable intent creation per second in one Chromium page's
// dedicated worker, through the package's OPFS store, against IndexedDB puts with
// `durability: 'strict'`, each in its own transaction; then a batched variant of each (OPFS:
// `createIntents`, one transaction and one durable flush per batch; IndexedDB: one strict
// transaction per batch).
// Prints the OPFS / IndexedDB ratios.
//
//   bash scripts/test-all.sh   # once: builds, packs and installs the tarball in .scratch/
//   node bench/opfs-vs-idb.mjs [single-count] [batched-count] [batch-size]
import { existsSync } from 'node:fs';
import { join } from 'node:path';

import { launch, newProfile, openPage, project, startSite } from '../test/browser/launch.mjs';

if (!existsSync(join(project, 'node_modules', 'idemdb', 'package.json'))) {
  console.error(`no installed package in ${project}: run bash scripts/test-all.sh first`);
  process.exit(1);
}
const [single = 300, batched = 3000, batch = 100] = process.argv.slice(2).map(Number);

const site = await startSite();
const context = await launch(newProfile());
try {
  const page = await openPage(context, site);
  await page.evaluate(() => window.spawn('bench'));
  const run = async (command, args) => {
    const result = await page.evaluate(([c, a]) => window.call('bench', c, a), [command, args]);
    if (result?.error) throw new Error(`${command}: ${result.error.message}`);
    return result;
  };
  // Warm-up: compile paths, create the OPFS file and an IndexedDB database once.
  await run('benchOpfs', { name: 'bench-warm.idemdb', count: 20 });
  await run('benchIdb', { count: 20 });

  const rows = [];
  const measure = async (label, opfsArgs, idbArgs) => {
    const opfs = await run('benchOpfs', opfsArgs);
    const idb = await run('benchIdb', idbArgs);
    rows.push({ label, opfs: opfs.perSecond, idb: idb.perSecond, ratio: opfs.perSecond / idb.perSecond });
  };
  await measure(`one durable commit per intent (${single} intents)`, { name: 'bench-single.idemdb', count: single }, { count: single });
  await measure(`batched, ${batch} per durable commit (${batched} intents)`, { name: 'bench-batch.idemdb', count: batched, batch }, { count: batched, batch });

  const version = await page.evaluate(() => navigator.userAgent.match(/Chrome\/[\d.]+/)?.[0]);
  console.log(`Chromium ${version} headless, dedicated worker, 2 cores`);
  for (const row of rows) {
    console.log(
      `${row.label}: OPFS (idemdb) ${row.opfs.toFixed(0)}/s, IndexedDB strict ${row.idb.toFixed(0)}/s, ratio OPFS/IndexedDB = ${row.ratio.toFixed(2)}`,
    );
  }
} finally {
  await context.close();
  await site.close();
}
