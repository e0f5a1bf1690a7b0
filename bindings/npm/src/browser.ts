/**
 * idemdb for browsers: memory stores anywhere, OPFS stores in a dedicated worker.
 * @packageDocumentation
 */
import init, * as glue from '../wasm/idemdb_wasm.js';

import { toIdemdbError } from './errors.js';
import { getEngine, setEngine, type Engine, type HostStorage } from './engine.js';
import { deleteOpfsStoreWith, importOpfsSnapshotWith, openOpfsStoreWith, type OpfsOptions } from './opfs.js';
import { openOpfsHeld, SharedStore, type SharedStoreOptions } from './shared.js';
import { openMemoryStoreSync, openRaw, type Store, type StoreOptions } from './store.js';

export * from './common.js';
export type { OpfsOptions, SharedStoreOptions };
export { SharedStore };

let loading: Promise<void> | undefined;

/**
 * Loads the WebAssembly engine (once). Every open function awaits it; call it yourself to use
 * `fingerprint` or `newKey` before opening a store. Pass a URL, `Response` or module to load the
 * `.wasm` from elsewhere than beside this file.
 */
export function ready(wasm?: URL | string | Response | BufferSource | WebAssembly.Module): Promise<void> {
  loading ??= init(wasm === undefined ? undefined : { module_or_path: wasm as never }).then(() => setEngine(glue as unknown as Engine));
  return loading;
}

/** Opens a store in memory: empty, or from snapshot bytes (`store.exportSnapshot()`). */
export async function openMemoryStore(options?: StoreOptions & { snapshot?: Uint8Array }): Promise<Store> {
  await ready();
  return openMemoryStoreSync(options);
}

/** Opens (or creates) a store file in the origin private file system (dedicated worker only). */
export async function openOpfsStore(name: string, options?: OpfsOptions): Promise<Store> {
  await ready();
  return openOpfsStoreWith(name, options);
}

/** Replaces an OPFS store file with snapshot bytes (the store must not be open). */
export async function importOpfsSnapshot(name: string, snapshot: Uint8Array): Promise<void> {
  return importOpfsSnapshotWith(name, snapshot);
}

/** Deletes an OPFS store file (the store must not be open). */
export async function deleteOpfsStore(name: string): Promise<void> {
  return deleteOpfsStoreWith(name);
}

/** Opens a store on host callbacks (your own storage). */
export async function openHostStore(host: HostStorage, options?: StoreOptions): Promise<Store> {
  await ready();
  return openRaw(() => getEngine().WasmStore.openHost(host, options ?? null));
}

/**
 * Opens an OPFS store shared by every tab: one writer holds the file (elected with a Web
 * Lock), the others work through it over a `BroadcastChannel` and take over when it goes away.
 * Resolves at once, as writer or follower (`store.isWriter`). Dedicated worker only.
 */
export async function openSharedStore(name: string, options: SharedStoreOptions = {}): Promise<SharedStore> {
  await ready();
  const store = new SharedStore(name, options, () => openOpfsHeld(name, options));
  // A free lock makes this opener the writer at once: give the election a moment to settle.
  await Promise.race([store.whenWriter(), new Promise((resolve) => setTimeout(resolve, 200))]).catch((error) => {
    store.close();
    throw toIdemdbError(error);
  });
  return store;
}
