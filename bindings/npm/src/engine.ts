/**
 * The raw WebAssembly engine, typed from the declarations wasm-bindgen generates for
 * `bindings/wasm` (`wasm/idemdb_wasm_node.d.cts`: the classes, functions and the value types of
 * its TypeScript section). Each entry file (node, browser, workerd) loads the engine its own
 * way and registers it here; the rest of the package reaches it through `getEngine()`
 * (synchronous) or `loadEngine()` (waits for the browser's fetch of the `.wasm`).
 * @internal
 */
import type * as Generated from '../wasm/idemdb_wasm_node.cjs';

import { NotReadyError, toIdemdbError } from './errors.js';

/** @internal The engine's store object. */
export type RawStore = Generated.WasmStore;
/** @internal The engine's lease object. */
export type RawLease = Generated.WasmLease;

/** @internal The engine's exports that this package uses. */
export interface Engine {
  WasmStore: typeof Generated.WasmStore;
  fingerprint: typeof Generated.fingerprint;
  canonicalize: typeof Generated.canonicalize;
  newKey: typeof Generated.newKey;
}

/**
 * Where `ready()` loads the `.wasm` from (browser entry): a URL, a `Response`, the bytes, or a
 * compiled `WebAssembly.Module`. Node and workerd load it at import and ignore this.
 */
export type WasmSource = string | URL | Response | ArrayBuffer | ArrayBufferView | object;

let engine: Engine | undefined;
let loader: ((source?: WasmSource) => Promise<Engine>) | undefined;
let loading: Promise<Engine> | undefined;

/** @internal Registers an engine that is already loaded (Node, workerd). */
export function setEngine(loaded: Engine): void {
  engine = loaded;
}

/** @internal Registers how to load the engine (browser: fetch and instantiate the `.wasm`). */
export function setEngineLoader(load: (source?: WasmSource) => Promise<Engine>): void {
  loader = load;
}

/**
 * @internal The engine, loaded once. A failed load is not kept: the next call tries again
 * (with a corrected URL, or after the network came back).
 */
export function loadEngine(source?: WasmSource): Promise<Engine> {
  if (engine) return Promise.resolve(engine);
  if (!loader) return Promise.reject(new NotReadyError('IDEMDB_NOT_READY', 'idemdb: no WebAssembly engine was registered by this entry file'));
  loading ??= loader(source).then(
    (loaded) => (engine = loaded),
    (error: unknown) => {
      loading = undefined;
      const typed = toIdemdbError(error);
      throw new NotReadyError(
        'IDEMDB_NOT_READY',
        `idemdb: could not load its WebAssembly engine${typeof source === 'string' || source instanceof URL ? ` from ${String(source)}` : ''} (${typed.message}). If your bundler did not copy ` +
          "the .wasm beside the bundle, copy node_modules/idemdb/dist/wasm/idemdb_wasm_bg.wasm there, or pass its URL: " +
          "await ready(new URL('./idemdb_wasm_bg.wasm', import.meta.url)) (the file is also exported as 'idemdb/idemdb.wasm')",
        { cause: error },
      );
    },
  );
  return loading;
}

/** @internal The loaded engine, or a `NotReadyError` that says what to do. */
export function getEngine(): Engine {
  if (!engine) {
    throw new NotReadyError(
      'IDEMDB_NOT_READY',
      "idemdb: the WebAssembly engine is not loaded yet: `await ready()` (exported by 'idemdb') once before " +
        'calling fingerprint(), canonicalize() or newKey() in a browser; every open function awaits it for you',
    );
  }
  return engine;
}
