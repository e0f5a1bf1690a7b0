// The package's .d.ts files, as a TypeScript user gets them from the installed tarball:
// ESM and CommonJS (`node` conditions) and the browser subpath, with strict checks and no
// skipLibCheck.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { cpSync, mkdtempSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';

test('the typings compile for ESM, CommonJS and browser consumers', { skip: !process.env.IDEMDB_TSC && 'IDEMDB_TSC not set' }, () => {
  const dir = mkdtempSync(join(process.cwd(), 'types-'));
  for (const file of ['esm.ts', 'cjs.cts', 'browser.ts']) cpSync(join(process.cwd(), 'test', 'types', file), join(dir, file));
  writeFileSync(join(dir, 'package.json'), '{ "type": "module" }\n');
  writeFileSync(
    join(dir, 'tsconfig.json'),
    JSON.stringify({
      compilerOptions: {
        target: 'ES2022', module: 'NodeNext', moduleResolution: 'NodeNext', strict: true, noEmit: true,
        lib: ['ES2022', 'DOM'], types: ['node'], typeRoots: [process.env.IDEMDB_TYPE_ROOTS], skipLibCheck: false,
      },
      files: ['esm.ts', 'cjs.cts', 'browser.ts'],
    }),
  );
  const run = spawnSync(process.execPath, [process.env.IDEMDB_TSC, '-p', dir], { encoding: 'utf8' });
  assert.equal(run.status, 0, run.stdout + run.stderr);
});
