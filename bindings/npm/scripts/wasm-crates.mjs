#!/usr/bin/env node
// Where the bytes of a .wasm go: code bytes per crate, from the function bodies and the name
// section (build without `--remove-name-section`, e.g. cargo's own output in
// target/wasm32-unknown-unknown/wasm-release/idemdb_wasm.wasm). A measuring tool for the size
// work, not part of the build:
//
//   node bindings/npm/scripts/wasm-crates.mjs target/wasm32-unknown-unknown/wasm-release/idemdb_wasm.wasm [top]
import { readFileSync } from 'node:fs';

const [file, topArg] = process.argv.slice(2);
if (!file) {
  console.error('usage: wasm-crates.mjs FILE.wasm [top]');
  process.exit(2);
}
const bytes = readFileSync(file);
let pos = 8;

function leb() {
  let result = 0;
  let shift = 0;
  for (;;) {
    const byte = bytes[pos++];
    result += (byte & 0x7f) * 2 ** shift;
    shift += 7;
    if ((byte & 0x80) === 0) return result;
  }
}

const sections = [];
let imports = 0;
let bodies = [];
const names = new Map();
while (pos < bytes.length) {
  const id = bytes[pos++];
  const size = leb();
  const start = pos;
  let name = ['custom', 'type', 'import', 'function', 'table', 'memory', 'global', 'export', 'start', 'element', 'code', 'data', 'datacount'][id] ?? `id${id}`;
  if (id === 0) {
    const len = leb();
    name = `custom:${bytes.subarray(pos, pos + len).toString('utf8')}`;
    pos += len;
    if (name === 'custom:name') {
      while (pos < start + size) {
        const sub = bytes[pos++];
        const subSize = leb();
        const subEnd = pos + subSize;
        if (sub === 1) {
          const count = leb();
          for (let i = 0; i < count; i++) {
            const index = leb();
            const nameLen = leb();
            names.set(index, bytes.subarray(pos, pos + nameLen).toString('utf8'));
            pos += nameLen;
          }
        }
        pos = subEnd;
      }
    }
  } else if (id === 2) {
    const count = leb();
    for (let i = 0; i < count; i++) {
      pos += leb(); // module
      pos += leb(); // field
      const kind = bytes[pos++];
      if (kind === 0) {
        leb();
        imports++;
      } else if (kind === 1) {
        pos++;
        const flags = leb();
        leb();
        if (flags & 1) leb();
      } else if (kind === 2) {
        const flags = leb();
        leb();
        if (flags & 1) leb();
      } else if (kind === 3) {
        pos += 2;
      }
    }
  } else if (id === 10) {
    const count = leb();
    for (let i = 0; i < count; i++) {
      const bodySize = leb();
      bodies.push(bodySize);
      pos += bodySize;
    }
  }
  sections.push([name, size]);
  pos = start + size;
}

/** The crate of a (legacy-mangled or plain) symbol name. */
function crateOf(symbol) {
  let s = symbol;
  const generic = /^_ZN4core3ptr\d+drop_in_place\$LT\$(.*)/.exec(s);
  if (generic) return `drop_in_place<${generic[1].split('..')[0].replace(/^\$RF\$|^\$u5b\$/, '')}>`;
  if (s.startsWith('_R')) {
    // v0 mangling: the first crate root, `C` + optional disambiguator `s<base62>_` + length + name.
    const root = /C(?:s[0-9A-Za-z]*_)?(\d+)([A-Za-z_][A-Za-z0-9_]*)/.exec(s);
    if (root) return root[2].slice(0, Number(root[1]));
  }
  const mangled = /^_ZN(\d+)([A-Za-z0-9_$.]+)/.exec(s);
  if (mangled) {
    let crate = mangled[2].slice(0, Number(mangled[1]));
    if (crate.startsWith('_$LT$')) crate = `<${crate.slice(5).split('..')[0]}>`;
    return crate;
  }
  if (s.startsWith('__wbg') || s.startsWith('__wbindgen') || s.startsWith('__externref')) return 'wasm-bindgen glue';
  return s.split('::')[0].replace(/^<|>$/g, '') || '(unnamed)';
}

const byCrate = new Map();
bodies.forEach((size, i) => {
  const crate = crateOf(names.get(imports + i) ?? '(no name)');
  byCrate.set(crate, (byCrate.get(crate) ?? 0) + size);
});
const total = bodies.reduce((a, b) => a + b, 0);
console.log(`${file}: ${bytes.length} bytes, ${bodies.length} functions, ${total} code bytes`);
for (const [name, size] of sections) console.log(`  section ${name.padEnd(28)} ${String(size).padStart(8)}`);
console.log('code bytes by crate:');
const top = Number(topArg ?? 25);
for (const [crate, size] of [...byCrate].sort((a, b) => b[1] - a[1]).slice(0, top)) {
  console.log(`  ${crate.padEnd(40)} ${String(size).padStart(8)}  ${((100 * size) / total).toFixed(1)} %`);
}
