/**
 * Node file stores: the store file (the Rust crate's and the CLI's format) through positional
 * reads and writes on a file descriptor, `fdatasync` once per durable commit, one holder at a
 * time through `<file>.lock` (the lock every runtime takes, native processes included:
 * `node-lock.ts`), new files made under a temporary name and renamed into place.
 */
import * as fs from 'node:fs';
import * as path from 'node:path';

import { AbortedError, InvalidInputError, StoreBusyError, toIdemdbError } from './errors.js';
import { takeHolderLock } from './node-lock.js';
import { getEngine } from './engine.js';
import { newKey, openRaw, type HostStorage, type Store, type StoreOptions } from './store.js';

/** Host storage over a Node file descriptor: positional reads and writes, `fdatasync` per durable commit. */
function fileStorage(fd: number): HostStorage {
  return {
    read(offset, out) {
      let done = 0;
      while (done < out.length) {
        const n = fs.readSync(fd, out, done, out.length - done, offset + done);
        if (n === 0) throw new Error(`short read at ${offset + done}`);
        done += n;
      }
    },
    write(offset, data) {
      let done = 0;
      while (done < data.length) done += fs.writeSync(fd, data, done, data.length - done, offset + done);
    },
    size: () => fs.fstatSync(fd).size,
    truncate: (length) => fs.ftruncateSync(fd, length),
    flush: () => fs.fdatasyncSync(fd),
  };
}

/**
 * Opens (or creates) a store file with Node's file system, in the same format as the Rust
 * crate (`idemdb::Store::open`) and the CLI. One process holds a file at a time, whatever its
 * runtime (`<file>.lock`, beside the file's real path: a native process holding the file is
 * refused with `StoreBusyError`, and refuses this one while it is open). A store a native
 * process left with journal records (it was killed) is refused with `OpenError` until it is
 * opened natively once (`idemdb recover FILE`).
 * A new file is built under a temporary name, flushed and renamed into place, so a crash
 * during creation never leaves a half-made store.
 */
export function openFileStoreSync(file: string, options: StoreOptions = {}): Store {
  if (typeof file !== 'string' || file === '') throw new InvalidInputError('IDEMDB_INVALID_ARGUMENT', 'openFileStore needs a file path');
  const waiting = WAIT_OPTIONS.filter((name) => (options as Record<string, unknown>)?.[name] !== undefined);
  if (waiting.length > 0) {
    throw new InvalidInputError('IDEMDB_INVALID_ARGUMENT', `openFileStoreSync cannot wait (${waiting.join(', ')} given): use openFileStore`);
  }
  const release = takeHolderLock(file);
  try {
    const exists = fs.existsSync(file) && fs.statSync(file).size > 0;
    if (!exists) {
      const temp = path.join(path.dirname(file), `.${path.basename(file)}.tmp-${newKey().slice(0, 8)}`);
      const fd = fs.openSync(temp, 'w+');
      try {
        const created = openRaw(() => getEngine().WasmStore.openHost(fileStorage(fd), options));
        created.close();
        fs.fsyncSync(fd);
      } finally {
        fs.closeSync(fd);
      }
      fs.renameSync(temp, file);
      try {
        const dir = fs.openSync(path.dirname(file), 'r');
        fs.fsyncSync(dir);
        fs.closeSync(dir);
      } catch {
        // directories cannot be fsynced on every platform
      }
    }
    const fd = fs.openSync(file, 'r+');
    return openRaw(() => getEngine().WasmStore.openHost(fileStorage(fd), options), {
      onClose: () => {
        try {
          fs.closeSync(fd);
        } finally {
          release();
        }
      },
    });
  } catch (error) {
    release();
    throw toIdemdbError(error);
  }
}

/** Options of `openFileStore`. */
export interface FileStoreOptions extends StoreOptions {
  /**
   * When another process, or this one, holds the file: `false` (default) throws
   * `StoreBusyError` at once; `true` waits until it is released; a number waits at most that
   * many milliseconds, then throws `StoreBusyError` with `waitedMs`. (A second open in one
   * process waits for the first `close()`.)
   */
  wait?: boolean | number;
  /**
   * Called once when the file is held elsewhere and the open starts to wait (`wait` is `true`
   * or a number), so the app can say so. Not called when the file is free.
   */
  onQueued?: (info: { name: string; waitMs: number | undefined }) => void;
  /** Stops waiting: the open rejects with `AbortedError` and holds nothing (already aborted: it does not start). */
  signal?: AbortSignal;
}

/** The options only a waiting open takes: `openFileStoreSync` refuses them. */
const WAIT_OPTIONS = ['wait', 'onQueued', 'signal'] as const;

/** How often a waiting open looks at the lock again. */
const WAIT_POLL_MS = 25;

/**
 * Opens (or creates) a store file; see `openFileStoreSync`. With `{ wait }`, waits for the
 * holder (another process, or a `Store` of this process on the same file) to close it.
 */
export async function openFileStore(file: string, options: FileStoreOptions = {}): Promise<Store> {
  const { wait = false, onQueued, signal, ...storeOptions } = options;
  if (typeof wait !== 'boolean' && !(typeof wait === 'number' && wait >= 0)) {
    throw new InvalidInputError('IDEMDB_INVALID_ARGUMENT', 'wait must be true, false or a number of milliseconds');
  }
  const aborted = () => new AbortedError('IDEMDB_ABORTED', `the open of ${file} was aborted; nothing is held`);
  if (signal?.aborted) throw aborted();
  const deadline = wait === true ? Infinity : wait === false ? 0 : Date.now() + wait;
  for (let tries = 0; ; tries++) {
    try {
      return openFileStoreSync(file, storeOptions);
    } catch (error) {
      if (!(error instanceof StoreBusyError) || wait === false) throw error;
      if (Date.now() >= deadline) {
        throw new StoreBusyError('IDEMDB_STORE_BUSY', `${error.message} (still held after waiting ${wait} ms)`, { cause: error, waitedMs: wait as number });
      }
      if (tries === 0) onQueued?.({ name: file, waitMs: wait === true ? undefined : wait });
    }
    await pause(WAIT_POLL_MS, signal, aborted);
  }
}

/** Waits `ms`, or rejects with `aborted()` as soon as `signal` aborts. */
function pause(ms: number, signal: AbortSignal | undefined, aborted: () => Error): Promise<void> {
  return new Promise((resolve, reject) => {
    const onAbort = () => {
      clearTimeout(timer);
      reject(aborted());
    };
    const timer = setTimeout(() => {
      signal?.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    signal?.addEventListener('abort', onAbort, { once: true });
  });
}
