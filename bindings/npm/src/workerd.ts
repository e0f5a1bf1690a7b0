/**
 * idemdb for edge workers (workerd / Cloudflare Workers and runtimes that import `.wasm`
 * files as modules): memory stores with snapshots, and host-callback stores.
 * @packageDocumentation
 */
import * as glue from '../wasm/idemdb_wasm.js';
// @ts-ignore -- a compiled WebAssembly.Module under workerd's (and wrangler's) module rules
import wasmModule from '../wasm/idemdb_wasm_bg.wasm';

import { getEngine, setEngine, type Engine, type HostStorage } from './engine.js';
import { openMemoryStoreSync, openRaw, type Store, type StoreOptions } from './store.js';

glue.initSync({ module: wasmModule as WebAssembly.Module });
setEngine(glue as unknown as Engine);

export * from './common.js';

/** Already loaded on this platform; kept for symmetry with the browser entry. */
export function ready(): Promise<void> {
  return Promise.resolve();
}

/** Opens a store in memory: empty, or from snapshot bytes (`store.exportSnapshot()`). */
export async function openMemoryStore(options?: StoreOptions & { snapshot?: Uint8Array }): Promise<Store> {
  return openMemoryStoreSync(options);
}

/** Opens a store on host callbacks (your own storage). */
export async function openHostStore(host: HostStorage, options?: StoreOptions): Promise<Store> {
  return openRaw(() => getEngine().WasmStore.openHost(host, options ?? null));
}
