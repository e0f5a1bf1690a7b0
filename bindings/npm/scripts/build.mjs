#!/usr/bin/env node
// Builds the npm package: the wasm crate (release profile `wasm-release`), wasm-bindgen glue
// for the web/ESM and Node/CommonJS targets over ONE .wasm file, then the TypeScript (ESM and
// CommonJS). Prints the .wasm size raw and gzipped. Run from anywhere: `npm run build`.
import { execFileSync } from 'node:child_process';
import { createRequire } from 'node:module';
import { cpSync, mkdirSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { gzipSync } from 'node:zlib';

/**
 * The most the .wasm may weigh gzipped (level 9); scripts/test-all.sh fails above it. Set from
 * the size the levers that paid reach (README "Size"), with a little room; raised from 316,000
 * once, for the engine's shared refusal types and its write transaction's split (README "Size").
 */
const WASM_GZIP_BUDGET = 330_000;

const pkgDir = join(dirname(fileURLToPath(import.meta.url)), '..');
const root = join(pkgDir, '..', '..');
const run = (cmd, args, cwd = pkgDir) => execFileSync(cmd, args, { cwd, stdio: 'inherit' });

// The package version is the crate version.
const cargoToml = readFileSync(join(root, 'Cargo.toml'), 'utf8');
const crateVersion = /\[workspace\.package\][^[]*?\bversion\s*=\s*"([^"]+)"/s.exec(cargoToml)?.[1];
const pkg = JSON.parse(readFileSync(join(pkgDir, 'package.json'), 'utf8'));
if (pkg.version !== crateVersion) {
  console.error(`package.json version ${pkg.version} differs from the crate version ${crateVersion}`);
  process.exit(1);
}

// The levers that paid (README "Size", measured by scripts/size-levers.sh): the engine's tracing
// events compiled out (nothing can subscribe to them through these bindings), and, with the
// nightly toolchain, std rebuilt so that a panic traps at once (-Cpanic=immediate-abort: no panic
// message formatting, no panic hook; a panic trapped before too) and without panic locations.
// Neither changes what the engine does or how fast. IDEMDB_WASM_TOOLCHAIN=stable builds without
// the nightly levers (bigger; the size budget then fails).
const targetDir = process.env.CARGO_TARGET_DIR ?? join(root, 'target');
const nightly = (process.env.IDEMDB_WASM_TOOLCHAIN ?? 'nightly') === 'nightly';
const cargoArgs = ['build', '--quiet', '-p', 'idemdb-wasm', '--features', 'tracing-off', '--target', 'wasm32-unknown-unknown', '--profile', 'wasm-release'];
let wasmDir = targetDir;
if (nightly) {
  wasmDir = join(targetDir, 'wasm-nightly');
  // std, core and alloc at opt-level 3, as the prebuilt std is: at the profile's "z" they cost
  // 12-16 % of fingerprint and intent speed (bench/engine-speed.mjs) for 3 KB less.
  const stdAtO3 = ['std', 'core', 'alloc'].flatMap((crate) => ['--config', `profile.wasm-release.package.${crate}.opt-level=3`]);
  execFileSync('cargo', ['+nightly', ...cargoArgs, '-Zbuild-std=std,panic_abort', ...stdAtO3], {
    cwd: root,
    stdio: 'inherit',
    env: { ...process.env, CARGO_TARGET_DIR: wasmDir, RUSTFLAGS: '-Zunstable-options -Cpanic=immediate-abort -Zlocation-detail=none' },
  });
} else {
  run('cargo', cargoArgs, root);
}
const wasmIn = join(wasmDir, 'wasm32-unknown-unknown', 'wasm-release', 'idemdb_wasm.wasm');
console.log(`engine built with ${nightly ? 'nightly (build-std at opt-level 3, immediate-abort, no panic locations)' : 'stable'}, tracing compiled out`);

const out = join(pkgDir, 'wasm');
const tmp = join(pkgDir, 'wasm-node-tmp');
rmSync(out, { recursive: true, force: true });
rmSync(tmp, { recursive: true, force: true });
const strip = ['--remove-name-section', '--remove-producers-section'];
run('wasm-bindgen', ['--target', 'web', '--weak-refs', ...strip, '--out-dir', out, wasmIn]);
run('wasm-bindgen', ['--target', 'nodejs', '--weak-refs', ...strip, '--out-dir', tmp, wasmIn]);
const web = readFileSync(join(out, 'idemdb_wasm_bg.wasm'));
if (!web.equals(readFileSync(join(tmp, 'idemdb_wasm_bg.wasm')))) {
  console.error('wasm-bindgen produced different .wasm files for the web and nodejs targets');
  process.exit(1);
}
renameSync(join(tmp, 'idemdb_wasm.js'), join(out, 'idemdb_wasm_node.cjs'));
// The declarations of the engine (its classes and the value types of its TypeScript section),
// without the web target's loader types, which need the DOM library.
// wasm-bindgen also declares `[Symbol.dispose]()` on its classes, which needs the
// `esnext.disposable` library; the package never calls it, so the declaration is dropped and
// the typings compile with each platform's ordinary library (test/node/types.test.mjs).
const declarations = readFileSync(join(tmp, 'idemdb_wasm.d.ts'), 'utf8').replace(/^\s*\[Symbol\.dispose\]\(\): void;\n/gm, '');
writeFileSync(join(out, 'idemdb_wasm_node.d.cts'), declarations);
rmSync(tmp, { recursive: true, force: true });

rmSync(join(pkgDir, 'dist'), { recursive: true, force: true });
const tsc = join(pkgDir, 'node_modules', 'typescript', 'bin', 'tsc');
run(process.execPath, [tsc, '-p', 'tsconfig.json']);
run(process.execPath, [tsc, '-p', 'tsconfig.cjs.json']);
writeFileSync(join(pkgDir, 'dist', 'cjs', 'package.json'), '{ "type": "commonjs" }\n');
mkdirSync(join(pkgDir, 'dist', 'wasm'), { recursive: true });
for (const file of ['idemdb_wasm.js', 'idemdb_wasm.d.ts', 'idemdb_wasm_bg.wasm', 'idemdb_wasm_node.cjs', 'idemdb_wasm_node.d.cts']) {
  cpSync(join(out, file), join(pkgDir, 'dist', 'wasm', file));
}

// Node: the ESM entry re-exports the CommonJS build, so that `import` and `require` in one
// process share one copy of the package (one engine; `instanceof IdemdbError` holds across both).
const cjsNames = Object.keys(createRequire(import.meta.url)(join(pkgDir, 'dist', 'cjs', 'node.js'))).filter((name) => name !== '__esModule');
writeFileSync(
  join(pkgDir, 'dist', 'esm', 'node.js'),
  `// The Node ESM entry: the CommonJS build (../cjs/node.js), re-exported, so that import and\n` +
    `// require share one copy of the package. Written by scripts/build.mjs.\n` +
    `import cjs from '../cjs/node.js';\n\n` +
    `export const {\n${cjsNames.map((name) => `  ${name},`).join('\n')}\n} = cjs;\n`,
);

const gz = gzipSync(web, { level: 9 }).length;
const kib = (n) => `${(n / 1024).toFixed(1)} KiB`;
console.log(`wasm size: ${web.length} bytes raw (${kib(web.length)}), ${gz} bytes gzipped (${kib(gz)}); budget ${WASM_GZIP_BUDGET} bytes gzipped`);
writeFileSync(join(pkgDir, 'dist', 'wasm-size.json'), JSON.stringify({ raw: web.length, gzip: gz, budget: WASM_GZIP_BUDGET }) + '\n');
