/**
 * idemdb for edge workers (workerd / Cloudflare Workers, and runtimes that import `.wasm` files
 * as compiled modules): Durable Object stores, memory stores with snapshots, host-callback
 * stores. The engine is instantiated at import, synchronously.
 * @packageDocumentation
 */
import * as glue from '../wasm/idemdb_wasm.js';
// @ts-ignore -- a compiled WebAssembly.Module under workerd's (and wrangler's) module rules
import wasmModule from '../wasm/idemdb_wasm_bg.wasm';

import { setEngine, type Engine } from './engine.js';

glue.initSync({ module: wasmModule as WebAssembly.Module });
setEngine(glue as unknown as Engine);

export * from './common.js';
