/**
 * The open functions every entry file (node, browser, workerd) exports, written once: each
 * awaits the engine (`loadEngine`: at once where the entry loaded it at import, a fetch of the
 * `.wasm` in a browser) and opens a `Store` on memory, host callbacks or a Durable Object.
 */
import { durableObjectBackend, type DurableObjectStorageLike, type DurableObjectStoreOptions } from './durable-object.js';
import { loadEngine, type WasmSource } from './engine.js';
import { checkHost } from './host.js';
import { openRaw, type HostStorage, type Store, type StoreOptions } from './store.js';

export type { DurableObjectStorageLike, DurableObjectStoreOptions, WasmSource };

/**
 * Loads the WebAssembly engine (once; a failed load is tried again on the next call). Every
 * open function awaits it; await it yourself before `fingerprint`, `canonicalize` or `newKey`
 * in a browser. In a browser, `wasm` says where the `.wasm` is when it is not beside the
 * package's JS (a bundler that does not copy it): a URL, a `Response`, the bytes or a
 * `WebAssembly.Module`. Node and workerd load the engine at import: it resolves at once.
 * @throws NotReadyError (`IDEMDB_NOT_READY`) when the `.wasm` cannot be loaded.
 */
export async function ready(wasm?: WasmSource): Promise<void> {
  await loadEngine(wasm);
}

/** Opens a store in memory: empty, or from snapshot bytes (`store.exportSnapshot()`). */
export async function openMemoryStore(options?: StoreOptions & { snapshot?: Uint8Array }): Promise<Store> {
  const engine = await loadEngine();
  return openRaw(() => engine.WasmStore.openMemory(options?.snapshot ?? null, options ?? null));
}

/**
 * Opens a store on your own storage: five synchronous callbacks over one growable byte array
 * (`HostStorage`: `read(offset, out)` fills `out`, `write(offset, data)`, `size()`,
 * `truncate(length)`, `flush()`). What they return is checked: a broken callback is reported
 * as an `InvalidInputError` naming it.
 */
export async function openHostStore(host: HostStorage, options?: StoreOptions): Promise<Store> {
  const checked = checkHost(host);
  const engine = await loadEngine();
  return openRaw(() => engine.WasmStore.openHost(checked.storage, options ?? null), { explain: checked.violation });
}

/**
 * Opens (or creates) a store in a Durable Object's storage (`ctx.storage` of a SQLite-backed
 * class): records survive restarts, deploys and evictions, and every call is one transaction
 * of the object. Open it once per object, e.g. in the constructor under
 * `ctx.blockConcurrencyWhile`.
 * @throws UnsupportedError when the storage has no SQL API (a key-value-backed class).
 */
export async function openDurableObjectStore(storage: DurableObjectStorageLike, options: DurableObjectStoreOptions = {}): Promise<Store> {
  const engine = await loadEngine();
  const { host, around } = durableObjectBackend(storage, options);
  return openRaw(() => engine.WasmStore.openHost(host, options), { around });
}
