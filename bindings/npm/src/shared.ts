/**
 * `openSharedStore`: one OPFS store used by every tab of an origin. A writer is elected with a
 * Web Lock and holds the file; the other tabs' calls travel to it over a `BroadcastChannel`,
 * and a follower takes over when the writer's tab closes or dies.
 */
import { StoreBusyError, UnsupportedError, toIdemdbError } from './errors.js';
import { syncHandleFor } from './opfs.js';
import { getEngine } from './engine.js';
import {
  iterateIntents,
  newKey,
  openRaw,
  type CanonicalOptions,
  type Intent,
  type IntentIterationOptions,
  type JsonRequest,
  type Scope,
  type Store,
  type StoreOptions,
} from './store.js';

/** Options of `openSharedStore`. */
export interface SharedStoreOptions extends StoreOptions {
  /** How long a follower waits for the writer's answer, in ms (default 10 000). */
  timeoutMs?: number;
}

/**
 * The `Store` methods a follower reaches through the writer: the client-intent methods and
 * snapshots (leases cannot cross tabs). Their signatures are `Store`'s, made asynchronous.
 */
const SHARED_METHODS = [
  'createIntent', 'getIntent', 'recordAttempt', 'recordResponse', 'abandonIntent', 'markNeedsAttention', 'reopenIntent',
  'pendingIntents', 'listIntents', 'intentPage', 'intentsNeedingAttention', 'purgeIntents', 'exportSnapshot', 'flush',
] as const satisfies readonly (keyof Store)[];
type Method = (typeof SHARED_METHODS)[number];
const METHODS = new Set<string>(SHARED_METHODS);
type Remote<M extends Method> = (...args: Parameters<Store[M]>) => Promise<ReturnType<Store[M]>>;
/** The shared methods other than `createIntent` (which makes its key before sending). */
type Forwarded = { [M in Exclude<Method, 'createIntent'>]: Remote<M> };

interface Call { id: string; from: string; method: Method; args: unknown[] }
interface Answer { id: string; to: string; ok: boolean; value?: unknown; error?: { code?: string; message: string } }

/**
 * A store shared by every tab of an origin: one writer is elected with a Web Lock and holds
 * the OPFS file; every other opener is a follower whose calls go to the writer over a
 * `BroadcastChannel`. When the writer closes or its tab dies, a waiting follower takes the
 * lock, opens the file and becomes the writer. Calls are asynchronous; the client-intent
 * methods and snapshots are available (leases cannot cross tabs). Open it in a dedicated worker.
 */
export interface SharedStore extends Forwarded {}
export class SharedStore {
  static {
    for (const method of SHARED_METHODS) {
      if (method === 'createIntent') continue;
      Object.defineProperty(this.prototype, method, {
        value: function (this: SharedStore, ...args: unknown[]) {
          return this.#call(method, ...args);
        },
        writable: true,
        configurable: true,
      });
    }
  }
  readonly #name: string;
  readonly #options: SharedStoreOptions;
  readonly #id = newKey();
  readonly #channel: BroadcastChannel;
  readonly #waiting = new Map<string, { resolve: (v: unknown) => void; reject: (e: unknown) => void; timer: ReturnType<typeof setTimeout> }>();
  #local: Store | undefined;
  #release: (() => void) | undefined;
  #closed = false;
  #becameWriter: Promise<void>;

  /** @internal */
  constructor(name: string, options: SharedStoreOptions, open: () => Promise<Store>) {
    this.#name = name;
    this.#options = options;
    this.#channel = new BroadcastChannel(`idemdb:${name}`);
    this.#channel.onmessage = ({ data }) => this.#onMessage(data);
    const locks = (globalThis as { navigator?: { locks?: { request: (n: string, f: (l: unknown) => Promise<void>) => Promise<void> } } }).navigator?.locks;
    if (!locks) throw new UnsupportedError('IDEMDB_UNSUPPORTED', 'Web Locks are not available here (navigator.locks)');
    this.#becameWriter = new Promise<void>((resolve, reject) => {
      locks
        .request(`idemdb:${name}`, async () => {
          if (this.#closed) return;
          try {
            this.#local = await open();
          } catch (error) {
            reject(error);
            return;
          }
          resolve();
          await new Promise<void>((release) => (this.#release = release));
        })
        .catch(reject);
    });
    this.#becameWriter.catch(() => undefined);
  }

  /** Whether the store is open. */
  get isOpen(): boolean {
    return !this.#closed;
  }

  /** Whether this opener is the writer (holds the file) right now. */
  get isWriter(): boolean {
    return this.#local !== undefined;
  }

  /** Resolves when this opener becomes the writer. */
  whenWriter(): Promise<void> {
    return this.#becameWriter;
  }

  #onMessage(data: Call | Answer): void {
    if ('to' in data) {
      if (data.to !== this.#id) return;
      const waiter = this.#waiting.get(data.id);
      if (!waiter) return;
      this.#waiting.delete(data.id);
      clearTimeout(waiter.timer);
      if (data.ok) waiter.resolve(data.value);
      else waiter.reject(toIdemdbError(Object.assign(new Error(data.error?.message ?? 'error'), { code: data.error?.code })));
      return;
    }
    const store = this.#local;
    if (!store || !METHODS.has(data.method)) return; // only the writer answers
    let answer: Answer;
    try {
      const value = (store[data.method] as (...a: unknown[]) => unknown).apply(store, data.args);
      answer = { id: data.id, to: data.from, ok: true, value };
    } catch (error) {
      const typed = toIdemdbError(error);
      answer = { id: data.id, to: data.from, ok: false, error: { code: typed.code, message: typed.message } };
    }
    this.#channel.postMessage(answer);
  }

  async #call<T>(method: Method, ...args: unknown[]): Promise<T> {
    if (this.#closed) throw toIdemdbError(Object.assign(new Error('the store is closed'), { code: 'IDEMDB_CLOSED' }));
    if (this.#local) {
      const store = this.#local;
      return (store[method] as (...a: unknown[]) => T).apply(store, args);
    }
    const id = newKey();
    const timeoutMs = this.#options.timeoutMs ?? 10_000;
    return new Promise<T>((resolve, reject) => {
      const timer = setTimeout(() => {
        this.#waiting.delete(id);
        reject(
          new StoreBusyError(
            'IDEMDB_STORE_BUSY',
            `no writer answered for the store "${this.#name}" within ${timeoutMs} ms (its tab may be closing); retry`,
          ),
        );
      }, timeoutMs);
      this.#waiting.set(id, { resolve: resolve as (v: unknown) => void, reject, timer });
      this.#channel.postMessage({ id, from: this.#id, method, args } satisfies Call);
      // If this opener becomes the writer before anyone answered, run the call here.
      this.#becameWriter.then(
        () => {
          if (!this.#waiting.delete(id)) return;
          clearTimeout(timer);
          try {
            const store = this.#local!;
            resolve((store[method] as (...a: unknown[]) => T).apply(store, args));
          } catch (error) {
            reject(toIdemdbError(error));
          }
        },
        () => undefined,
      );
    });
  }

  /** As `Store.createIntent`; the key is made here, so a retry after a lost answer is the same intent. */
  createIntent(scope: Scope, request: JsonRequest, options?: { key?: string; canonical?: CanonicalOptions; sending?: boolean }): Promise<Intent> {
    return this.#call('createIntent', scope, request, { ...options, key: options?.key ?? newKey() });
  }
  /** As `Store.intents`: every intent in key order, one page (one call to the writer) at a time. */
  intents(options?: IntentIterationOptions): AsyncGenerator<Intent, void, undefined> {
    return iterateIntents((page) => this.intentPage(page), options);
  }

  /** `close()`, for `using shared = await openSharedStore(name)`. */
  [Symbol.dispose](): void {
    this.close();
  }

  /** Closes: a writer releases the file and the lock (a follower then takes over). */
  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    for (const [, waiter] of this.#waiting) {
      clearTimeout(waiter.timer);
      waiter.reject(toIdemdbError(Object.assign(new Error('the store is closed'), { code: 'IDEMDB_CLOSED' })));
    }
    this.#waiting.clear();
    this.#channel.close();
    try {
      this.#local?.close();
    } finally {
      this.#local = undefined;
      this.#release?.();
    }
  }
}

/** @internal Opens the OPFS file for a writer that already holds the lock. */
export async function openOpfsHeld(name: string, options: StoreOptions): Promise<Store> {
  const nav = (globalThis as { navigator?: { storage?: { getDirectory?: () => Promise<any> } } }).navigator;
  if (!nav?.storage?.getDirectory) throw new UnsupportedError('IDEMDB_UNSUPPORTED', 'OPFS is not available here');
  const handle = await syncHandleFor(await nav.storage.getDirectory(), name, options);
  return openRaw(() => getEngine().WasmStore.openOpfs(handle, options), { onClose: () => handle.close() });
}
