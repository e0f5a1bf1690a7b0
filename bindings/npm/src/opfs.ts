/**
 * OPFS stores (browser, dedicated worker): the store file opened through a
 * `FileSystemSyncAccessHandle`, one holder at a time (Web Lock `idemdb:<name>`), created under a
 * temporary name and moved into place; snapshot import and deletion.
 */
import { AbortedError, InvalidInputError, StoreBusyError, UnsupportedError, toIdemdbError } from './errors.js';
import { getEngine } from './engine.js';
import { newKey, openRaw, type Store, type StoreOptions } from './store.js';
import type { SyncAccessHandle } from '../wasm/idemdb_wasm_node.cjs';

/** Options of `openOpfsStore`. */
export interface OpfsOptions extends StoreOptions {
  /**
   * When another tab or worker holds the store: `false` (default) throws `StoreBusyError` at
   * once; `true` waits until it is released; a number waits at most that many milliseconds.
   */
  wait?: boolean | number;
  /**
   * Called once, at once, when another tab or worker holds the store and this open starts to
   * wait for it (`wait` is `true` or a number): the page can say "open in another tab" instead
   * of showing nothing. Not called when the store is free, nor with `wait: false`.
   */
  onQueued?: (info: { name: string; waitMs: number | undefined }) => void;
  /** Stops waiting: the open rejects with `AbortedError` (already aborted: it does not start). */
  signal?: AbortSignal;
}

interface LockManagerLike {
  request(name: string, options: { ifAvailable?: boolean; signal?: AbortSignal; mode?: string }, callback: (lock: unknown) => Promise<void>): Promise<void>;
}

/** An OPFS sync access handle: what the engine uses, and `close()`. */
type SyncHandleLike = SyncAccessHandle & { close(): void };

function busy(name: string, cause?: unknown): StoreBusyError {
  return new StoreBusyError(
    'IDEMDB_STORE_BUSY',
    `the OPFS store "${name}" is open in another tab or worker (one writer at a time); retry later, open with { wait: true }, or send the work through the tab that holds it`,
    { cause },
  );
}

/**
 * Opens (or creates) a store in the origin private file system, in a **dedicated worker**
 * (synchronous access handles exist only there). One tab or worker holds a store at a time:
 * the holder is elected with the Web Lock `idemdb:<name>`, kept until `close()` or until the
 * worker ends (a killed worker releases it). Other openers get `StoreBusyError` or wait.
 * Every durable commit ends with one `FileSystemSyncAccessHandle.flush()`.
 */
export async function openOpfsStoreWith(name: string, options: OpfsOptions = {}): Promise<Store> {
  const nav = (globalThis as { navigator?: { storage?: { getDirectory?: () => Promise<any> }; locks?: LockManagerLike } }).navigator;
  if (!nav?.storage?.getDirectory) throw new UnsupportedError('IDEMDB_UNSUPPORTED', 'OPFS is not available here (navigator.storage.getDirectory)');
  if (!nav.locks) throw new UnsupportedError('IDEMDB_UNSUPPORTED', 'Web Locks are not available here (navigator.locks)');
  const locks = nav.locks;

  let release!: () => void;
  const held = new Promise<void>((resolve) => (release = resolve));
  const aborted = () => new AbortedError('IDEMDB_ABORTED', `opening the OPFS store "${name}" was aborted`);
  if (options.signal?.aborted) throw aborted();
  const wait = options.wait ?? false;
  if (typeof wait !== 'boolean' && !(typeof wait === 'number' && wait >= 0 && Number.isFinite(wait))) {
    throw new InvalidInputError('IDEMDB_INVALID_ARGUMENT', 'wait must be true, false or a number of milliseconds');
  }
  // Held from acquisition until close: the callback's promise settles on release.
  const lock = (request: { ifAvailable?: boolean; signal?: AbortSignal }) =>
    new Promise<boolean>((resolve, reject) => {
      locks
        .request(`idemdb:${name}`, request, async (granted) => {
          if (!granted) return resolve(false);
          resolve(true);
          await held;
        })
        .catch((error: unknown) => {
          if ((error as { name?: string })?.name === 'AbortError') resolve(false);
          else reject(toIdemdbError(error));
        });
    });
  // First without waiting, so that a page learns at once that another holder has the store.
  let acquired = await lock({ ifAvailable: true });
  if (!acquired && wait !== false) {
    if (options.signal?.aborted) throw aborted();
    const waitMs = wait === true ? undefined : wait;
    options.onQueued?.({ name, waitMs });
    const controller = new AbortController();
    const timer = waitMs === undefined ? undefined : setTimeout(() => controller.abort(), waitMs);
    const onAbort = () => controller.abort();
    options.signal?.addEventListener('abort', onAbort, { once: true });
    try {
      acquired = await lock({ signal: controller.signal });
    } finally {
      if (timer) clearTimeout(timer);
      options.signal?.removeEventListener('abort', onAbort);
    }
    if (!acquired && options.signal?.aborted) throw aborted();
    if (!acquired) {
      throw new StoreBusyError(
        'IDEMDB_STORE_BUSY',
        `the OPFS store "${name}" is still held by another tab or worker after waiting ${waitMs} ms (one writer at a time); tell the user it is open elsewhere, wait again, or send the work through the tab that holds it`,
        { waitedMs: waitMs },
      );
    }
  }
  if (!acquired) throw busy(name);

  let handle: SyncHandleLike;
  try {
    handle = await syncHandleFor(await nav.storage.getDirectory(), name, options);
  } catch (error) {
    release();
    if ((error as { name?: string })?.name === 'NoModificationAllowedError') throw busy(name, error);
    throw toIdemdbError(error);
  }
  return openRaw(() => getEngine().WasmStore.openOpfs(handle, options), {
    onClose: () => {
      try {
        handle.close();
      } finally {
        release();
      }
    },
  });
}

function syncHandlesAvailable(): boolean {
  const ctor = (globalThis as { FileSystemFileHandle?: { prototype: object } }).FileSystemFileHandle;
  return !!ctor && 'createSyncAccessHandle' in ctor.prototype;
}

/**
 * A sync access handle on the store file `name`, creating the store first when the file is
 * missing or empty: under a temporary name, initialised and flushed, then moved into place, so
 * a crash during creation never leaves a half-made store under `name` (leftovers are removed
 * here). The caller holds the store's Web Lock.
 * @internal
 */
export async function syncHandleFor(root: any, name: string, options: StoreOptions): Promise<any> {
  if (!syncHandlesAvailable()) {
    throw new UnsupportedError('IDEMDB_UNSUPPORTED', 'createSyncAccessHandle is only available in a dedicated worker; open the store there');
  }
  const prefix = `${name}.creating-`;
  for await (const entry of root.keys() as AsyncIterable<string>) {
    if (entry.startsWith(prefix)) await root.removeEntry(entry).catch(() => undefined);
  }
  let file = await root.getFileHandle(name).catch((error: { name?: string }) => {
    if (error?.name === 'NotFoundError') return undefined;
    throw error;
  });
  if (file && (await file.getFile()).size === 0) {
    await root.removeEntry(name);
    file = undefined;
  }
  if (!file) {
    const temp = await root.getFileHandle(`${prefix}${newKey().slice(0, 8)}`, { create: true });
    if (typeof temp.move !== 'function') {
      // No move() in this browser: create in place (a crash during creation is then visible
      // as a store that does not open, IDEMDB_NOT_A_STORE, until the file is deleted).
      await root.removeEntry(temp.name);
      file = await root.getFileHandle(name, { create: true });
    } else {
      const handle = await temp.createSyncAccessHandle();
      try {
        openRaw(() => getEngine().WasmStore.openOpfs(handle, options)).close();
        handle.flush();
      } finally {
        handle.close();
      }
      await temp.move(name);
      file = await root.getFileHandle(name);
    }
  }
  return file.createSyncAccessHandle();
}

/** Deletes an OPFS store file (it must not be open anywhere). */
export async function deleteOpfsStoreWith(name: string): Promise<void> {
  const nav = (globalThis as { navigator?: { storage?: { getDirectory?: () => Promise<any> } } }).navigator;
  if (!nav?.storage?.getDirectory) throw new UnsupportedError('IDEMDB_UNSUPPORTED', 'OPFS is not available here');
  const root = await nav.storage.getDirectory();
  try {
    await root.removeEntry(name);
  } catch (error) {
    if ((error as { name?: string })?.name === 'NotFoundError') return;
    if ((error as { name?: string })?.name === 'NoModificationAllowedError') throw busy(name, error);
    throw toIdemdbError(error);
  }
}

/** Writes snapshot bytes as an OPFS store file, replacing it (it must not be open anywhere). */
export async function importOpfsSnapshotWith(name: string, snapshot: Uint8Array): Promise<void> {
  const nav = (globalThis as { navigator?: { storage?: { getDirectory?: () => Promise<any> }; locks?: LockManagerLike } }).navigator;
  if (!nav?.storage?.getDirectory || !nav.locks) throw new UnsupportedError('IDEMDB_UNSUPPORTED', 'OPFS and Web Locks are needed');
  const root = await nav.storage.getDirectory();
  let done = false;
  await nav.locks.request(`idemdb:${name}`, { ifAvailable: true }, async (lock) => {
    if (!lock) return;
    const file = await root.getFileHandle(name, { create: true });
    const handle = await file.createSyncAccessHandle();
    try {
      handle.truncate(0);
      if (handle.write(snapshot, { at: 0 }) !== snapshot.length) throw new Error('short write (quota?)');
      handle.flush();
    } finally {
      handle.close();
    }
    done = true;
  });
  if (!done) throw busy(name);
}
