/**
 * idemdb for browsers: OPFS stores in a dedicated worker (one tab at a time, or shared by every
 * tab through an elected writer), memory and host-callback stores anywhere. The engine is
 * fetched on first use (`ready()`; every open function awaits it), from beside this file unless
 * `ready(url)` says where the `.wasm` is.
 * @packageDocumentation
 */
import init, * as glue from '../wasm/idemdb_wasm.js';

import { toIdemdbError } from './errors.js';
import { loadEngine, setEngineLoader, type Engine } from './engine.js';
import { deleteOpfsStoreWith, importOpfsSnapshotWith, openOpfsStoreWith, type OpfsOptions } from './opfs.js';
import { openOpfsHeld, SharedStore, type SharedStoreOptions } from './shared.js';
import type { Store } from './store.js';

setEngineLoader(async (wasm) => {
  await init(wasm === undefined ? undefined : { module_or_path: wasm as never });
  return glue as unknown as Engine;
});

export * from './common.js';
export type { OpfsOptions, SharedStoreOptions };
export { SharedStore };

/** Opens (or creates) a store file in the origin private file system (dedicated worker only). */
export async function openOpfsStore(name: string, options?: OpfsOptions): Promise<Store> {
  await loadEngine();
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

/**
 * Opens an OPFS store shared by every tab: one writer holds the file (elected with a Web
 * Lock), the others work through it over a `BroadcastChannel` and take over when it goes away.
 * Resolves at once, as writer or follower (`store.isWriter`). Dedicated worker only.
 */
export async function openSharedStore(name: string, options: SharedStoreOptions = {}): Promise<SharedStore> {
  await loadEngine();
  const store = new SharedStore(name, options, () => openOpfsHeld(name, options));
  // A free lock makes this opener the writer at once: give the election a moment to settle.
  await Promise.race([store.whenWriter(), new Promise((resolve) => setTimeout(resolve, 200))]).catch((error) => {
    store.close();
    throw toIdemdbError(error);
  });
  return store;
}
