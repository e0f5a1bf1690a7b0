// The package's .d.ts files as TypeScript users get them from the installed tarball, each with
// only the setup the README documents for its platform (strict, no skipLibCheck): Node ESM and
// CommonJS with @types/node and no DOM library; a browser page with the DOM library and no
// @types/node; a worker (Cloudflare Workers) with the WebWorker library and bundler resolution.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { cpSync, mkdtempSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';

const setups = {
  'Node (ESM and CommonJS): @types/node, no DOM': {
    files: ['node.ts', 'node-cjs.cts'],
    compilerOptions: { module: 'NodeNext', moduleResolution: 'NodeNext', lib: ['ES2022'], types: ['node'] },
  },
  'browser: lib DOM, no @types/node': {
    files: ['browser.ts'],
    compilerOptions: { module: 'NodeNext', moduleResolution: 'NodeNext', lib: ['ES2022', 'DOM', 'DOM.Iterable'], types: [] },
  },
  'TypeScript 5.9 `using` (lib esnext.disposable), @types/node': {
    files: ['using.ts'],
    compilerOptions: { module: 'NodeNext', moduleResolution: 'NodeNext', lib: ['ES2022', 'esnext.disposable'], types: ['node'] },
  },
  'TypeScript 5.9 `using` in a browser page (lib ESNext, DOM), no @types/node': {
    files: ['using.ts'],
    compilerOptions: { module: 'NodeNext', moduleResolution: 'NodeNext', lib: ['ESNext', 'DOM', 'DOM.Iterable'], types: [] },
  },
  'worker: lib WebWorker, bundler resolution, no @types/node': {
    files: ['worker.ts'],
    compilerOptions: { module: 'ESNext', moduleResolution: 'Bundler', lib: ['ES2022', 'WebWorker'], types: [] },
  },
};

for (const [name, setup] of Object.entries(setups)) {
  test(`the typings compile for ${name}`, { skip: !process.env.IDEMDB_TSC && 'IDEMDB_TSC not set' }, () => {
    const dir = mkdtempSync(join(process.cwd(), 'types-'));
    for (const file of setup.files) cpSync(join(process.cwd(), 'test', 'types', file), join(dir, file));
    writeFileSync(join(dir, 'package.json'), '{ "type": "module" }\n');
    writeFileSync(
      join(dir, 'tsconfig.json'),
      JSON.stringify({
        compilerOptions: { target: 'ES2022', strict: true, noEmit: true, skipLibCheck: false, typeRoots: [process.env.IDEMDB_TYPE_ROOTS], ...setup.compilerOptions },
        files: setup.files,
      }),
    );
    const run = spawnSync(process.execPath, [process.env.IDEMDB_TSC, '-p', dir], { encoding: 'utf8' });
    assert.equal(run.status, 0, run.stdout + run.stderr);
  });
}
