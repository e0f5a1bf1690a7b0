/**
 * `Store`: the package's one list of store methods, over the raw engine (`engine.ts`). Argument
 * checks, bytes in and out, leases kept opaque, and every engine error turned into a typed
 * `IdemdbError`. The value types come from the engine's generated declarations.
 */
import { AbortedError, guard, InvalidInputError, type IdemdbError } from './errors.js';
import { getEngine, type RawLease, type RawStore } from './engine.js';
import type {
  AttemptOutcome,
  AttentionCause,
  CanonicalOptions,
  ExpiryPurge,
  Intent,
  IntentPage,
  IntentPurge,
  RawReservation,
  StoredRecord,
  StoreOptions,
} from '../wasm/idemdb_wasm_node.cjs';
import type {
  AttemptOutcomeKind,
  AttentionCause as AttentionCauseName,
  Durability,
  ExpiredLeaseRule,
  FailureKind,
  IntentState as IntentStateName,
  NormaliserName,
  Outcome,
  RecordState,
  ReservationStatus,
  UncertainCause,
} from './generated/vocabulary.js';

export type {
  Attempt,
  AttemptOutcome,
  AttentionCause,
  CanonicalOptions,
  ExpiryPurge,
  HostStorage,
  Intent,
  IntentPage,
  IntentPurge,
  IntentResponse,
  PolicyOptions,
  StoredRecord,
  StoreOptions,
} from '../wasm/idemdb_wasm_node.cjs';

/** Who a record or intent belongs to: `(tenant, operation)`. */
export interface Scope {
  tenant: string;
  operation: string;
}

/** A request body: JSON text, UTF-8 bytes of JSON, or any JSON-serialisable value. */
export type JsonRequest = string | Uint8Array | object | number | boolean | null;

/** A response body to store: bytes, or text (stored as UTF-8). */
export type Body = Uint8Array | string;

/** The right of one attempt to execute. Opaque: pass it back to the store that issued it. */
export interface Lease {
  readonly tenant: string;
  readonly operation: string;
  readonly key: string;
  readonly fence: bigint;
  readonly expiresAt: number;
  readonly attempt: number;
}

/** The answer to `reserve`. */
export type Reservation = Exclude<RawReservation, { status: 'acquired' }> | { status: 'acquired'; lease: Lease };

declare global {
  interface SymbolConstructor {
    /**
     * The method a `using` declaration calls when its block ends (explicit resource management;
     * declared here as in `lib.esnext.disposable`, so the typings need no extra library).
     */
    readonly dispose: unique symbol;
  }
}

/** Where a client intent is in its life: `Intent['state']`. */
export type IntentState = Intent['state'];

/**
 * The engine's declarations (written in `bindings/wasm/src/types.rs`, where wasm-bindgen needs
 * literal text) against the vocabularies generated from Rust: each line fails to compile when
 * a union and its Rust vocabulary differ in either direction.
 */
type Same<A, B> = [A] extends [B] ? ([B] extends [A] ? true : false) : false;
type Replayed = Extract<RawReservation, { status: 'replay' }>;
type Uncertain = Extract<RawReservation, { status: 'needs_reconciliation' }>;
const VOCABULARIES_MATCH: [
  Same<IntentState, IntentStateName>,
  Same<AttemptOutcome['outcome'], AttemptOutcomeKind>,
  Same<Extract<Intent, { state: 'needs_attention' }>['cause'], AttentionCauseName>,
  Same<RawReservation['status'], ReservationStatus>,
  Same<Replayed['outcome'], Outcome>,
  Same<Uncertain['cause'], UncertainCause>,
  Same<StoredRecord['state'], RecordState>,
  Same<NonNullable<StoreOptions['durability']>, Durability>,
  Same<NonNullable<NonNullable<StoreOptions['defaultPolicy']>['expiredLease']>, ExpiredLeaseRule>,
  Same<NonNullable<CanonicalOptions['normalise']>[string], NormaliserName>,
] = [true, true, true, true, true, true, true, true, true, true];
void VOCABULARIES_MATCH;

/** Options of `Store.intentPage`. */
export interface IntentPageOptions {
  /** The `next` of the page before (omit, or `null`, for the first page). */
  after?: string | null;
  /** The most intents in the page, 1 to 10 000 (default 100). */
  limit?: number;
  /** Only intents in this state. */
  state?: IntentState;
}

/** Options of `Store.intents`. */
export interface IntentIterationOptions {
  /** Only intents in this state. */
  state?: IntentState;
  /** How many intents each range read holds, 1 to 10 000 (default 100). */
  pageSize?: number;
  /** Stops the iteration (`AbortedError`) before the next page is read. */
  signal?: AbortSignal;
}

/** The default size of an intent page. */
export const DEFAULT_PAGE_SIZE = 100;

/** @internal Checks page options before anything is read. */
export function pageArgs(options: IntentPageOptions | undefined): [string | null, number, string | null] {
  const limit = options?.limit ?? DEFAULT_PAGE_SIZE;
  if (!Number.isInteger(limit) || limit < 1 || limit > 10_000) {
    throw new InvalidInputError('IDEMDB_INVALID_ARGUMENT', 'limit must be an integer from 1 to 10000');
  }
  const after = options?.after ?? null;
  if (after !== null && typeof after !== 'string') throw new InvalidInputError('IDEMDB_INVALID_ARGUMENT', 'after must be the `next` of an earlier page');
  return [after, limit, options?.state ?? null];
}

/**
 * @internal Every intent, page by page (`intentPage` of a store, synchronous or not): one
 * bounded range read per page, never the whole table at once.
 */
export async function* iterateIntents(
  page: (options: IntentPageOptions) => IntentPage | Promise<IntentPage>,
  options: IntentIterationOptions | undefined,
): AsyncGenerator<Intent, void, undefined> {
  const limit = options?.pageSize ?? DEFAULT_PAGE_SIZE;
  pageArgs({ limit });
  let after: string | null = null;
  do {
    if (options?.signal?.aborted) throw new AbortedError('IDEMDB_ABORTED', 'the intent iteration was aborted');
    const read: IntentPage = await page({ after, limit, state: options?.state });
    yield* read.intents;
    after = read.next;
  } while (after !== null);
}

const encoder = new TextEncoder();

/** UTF-8 bytes of a JSON request. */
export function jsonBytes(request: JsonRequest): Uint8Array {
  if (request instanceof Uint8Array) return request;
  if (typeof request === 'string') return encoder.encode(request);
  const text = JSON.stringify(request);
  if (text === undefined) throw new InvalidInputError('IDEMDB_INVALID_REQUEST', 'request is not JSON-serialisable');
  return encoder.encode(text);
}

function bodyBytes(body: Body | undefined | null): Uint8Array {
  if (body === undefined || body === null) return new Uint8Array();
  return typeof body === 'string' ? encoder.encode(body) : body;
}

function checkScope(scope: Scope): void {
  if (!scope || typeof scope.tenant !== 'string' || typeof scope.operation !== 'string') {
    throw new InvalidInputError('IDEMDB_INVALID_ARGUMENT', 'scope must be { tenant: string, operation: string }');
  }
}

/** Fingerprint (hex) of a JSON request after canonicalisation. */
export function fingerprint(request: JsonRequest, canonical?: CanonicalOptions): string {
  return guard(() => getEngine().fingerprint(jsonBytes(request), canonical ?? null));
}

/** Canonical form (RFC 8785 bytes) of a JSON request. */
export function canonicalize(request: JsonRequest, canonical?: CanonicalOptions): Uint8Array {
  return guard(() => getEngine().canonicalize(jsonBytes(request), canonical ?? null));
}

/** A new idempotency key: UUID v4 from `crypto.getRandomValues`. */
export function newKey(): string {
  return guard(() => getEngine().newKey());
}

const leases = new WeakMap<Lease, RawLease>();

function wrapLease(raw: RawLease): Lease {
  const lease: Lease = Object.freeze({
    tenant: raw.tenant,
    operation: raw.operation,
    key: raw.key,
    fence: raw.fence,
    expiresAt: raw.expiresAt,
    attempt: raw.attempt,
  });
  leases.set(lease, raw);
  return lease;
}

function rawLease(lease: Lease): RawLease {
  const raw = leases.get(lease);
  if (!raw) throw new InvalidInputError('IDEMDB_INVALID_ARGUMENT', 'not a lease issued by this package (leases cannot be copied or rebuilt)');
  return raw;
}

/** @internal How a store runs its engine calls (see `openRaw`). */
export interface StoreHooks {
  /** Called when the store is closed (release a file, a handle, a lock). */
  onClose?: () => void;
  /** Runs every engine call (e.g. inside a Durable Object's `transactionSync`). */
  around?: <T>(call: () => T) => T;
  /** A better explanation of a failure than the engine's (a host callback that broke its contract). */
  explain?: () => IdemdbError | undefined;
}

/**
 * An open idempotency store. Every method is synchronous and, with the default durability,
 * durable when it returns. Obtain one from `openMemoryStore`, `openOpfsStore` (browser
 * worker), `openFileStore` (Node), `openDurableObjectStore` (Cloudflare Workers) or
 * `openHostStore` (your storage).
 */
export class Store {
  #raw: RawStore;
  #hooks: StoreHooks;

  /** @internal */
  constructor(raw: RawStore, hooks: StoreHooks = {}) {
    this.#raw = raw;
    this.#hooks = hooks;
  }

  #run<T>(call: (raw: RawStore) => T): T {
    const { around, explain } = this.#hooks;
    try {
      return guard(() => (around ? around(() => call(this.#raw)) : call(this.#raw)));
    } catch (error) {
      throw explain?.() ?? error;
    }
  }

  /** Whether the store is open. */
  get isOpen(): boolean {
    return this.#raw.isOpen;
  }

  // ---- client intents ----

  /**
   * Creates an intent (a new key unless `options.key` is given) and stores it durably with its
   * canonical request and fingerprint. Call it before the first send. Creating the same intent
   * again (same key, same canonical request) returns the stored one. With `sending: true` (a
   * client about to send at once), a pending intent also records that an attempt is being sent
   * — as `recordAttempt(…, { outcome: 'sent' })` would — in the same commit: one flush for both.
   */
  createIntent(scope: Scope, request: JsonRequest, options?: { key?: string; canonical?: CanonicalOptions; sending?: boolean }): Intent {
    checkScope(scope);
    const bytes = jsonBytes(request);
    return this.#run((raw) =>
      raw.createIntent(scope.tenant, scope.operation, options?.key ?? null, bytes, options?.canonical ?? null, options?.sending === true),
    );
  }

  /**
   * Creates several intents in one write transaction: one durable commit (one flush) for the
   * whole batch, all stored or none. `options.keys[i]` gives the key of `requests[i]`.
   */
  createIntents(scope: Scope, requests: JsonRequest[], options?: { keys?: string[]; canonical?: CanonicalOptions }): Intent[] {
    checkScope(scope);
    const bytes = requests.map(jsonBytes);
    return this.#run((raw) => raw.createIntents(scope.tenant, scope.operation, bytes, options?.keys ?? null, options?.canonical ?? null));
  }

  /** One intent, or `null`. */
  getIntent(scope: Scope, key: string): Intent | null {
    checkScope(scope);
    return this.#run((raw) => raw.getIntent(scope.tenant, scope.operation, key));
  }

  /** Records an attempt of a pending intent. */
  recordAttempt(scope: Scope, key: string, attempt: AttemptOutcome): Intent {
    checkScope(scope);
    const status = attempt.outcome === 'status' ? attempt.status : null;
    return this.#run((raw) => raw.recordAttempt(scope.tenant, scope.operation, key, attempt.outcome, status));
  }

  /** Records the final response and finishes the intent (the same response again is a no-op). */
  recordResponse(scope: Scope, key: string, response: { status: number; headers?: [string, string][]; body?: Body }): Intent {
    checkScope(scope);
    const body = bodyBytes(response.body);
    return this.#run((raw) => raw.recordResponse(scope.tenant, scope.operation, key, response.status, response.headers ?? [], body));
  }

  /**
   * Puts a pending intent in `needs_attention` with `cause` and the last answer: it is not
   * resumed until `reopenIntent` or `abandonIntent`. `idempotentFetch` calls it itself.
   */
  markNeedsAttention(
    scope: Scope,
    key: string,
    cause: AttentionCause,
    response?: { status: number; headers?: [string, string][]; body?: Body } | null,
  ): Intent {
    checkScope(scope);
    const body = response ? bodyBytes(response.body) : null;
    return this.#run((raw) =>
      raw.markNeedsAttention(scope.tenant, scope.operation, key, cause, response?.status ?? null, response?.headers ?? [], body),
    );
  }

  /**
   * Makes an intent that needs attention pending again, with a new attempt budget (its attempt
   * count is kept): after a reconciliation, when sending it again with the same key is right.
   */
  reopenIntent(scope: Scope, key: string): Intent {
    checkScope(scope);
    return this.#run((raw) => raw.reopenIntent(scope.tenant, scope.operation, key));
  }

  /** Every intent that needs attention, oldest first. */
  intentsNeedingAttention(): Intent[] {
    return this.listIntents()
      .filter((intent) => intent.state === 'needs_attention')
      .sort((a, b) => a.createdAt - b.createdAt || (a.key < b.key ? -1 : a.key > b.key ? 1 : 0));
  }

  /** Abandons a pending intent (or one that needs attention) with a reason; it will not be resumed. */
  abandonIntent(scope: Scope, key: string, reason: string): Intent {
    checkScope(scope);
    return this.#run((raw) => raw.abandonIntent(scope.tenant, scope.operation, key, reason));
  }

  /** Every pending intent, oldest first: resume these at start-up. */
  pendingIntents(): Intent[] {
    return this.#run((raw) => raw.pendingIntents());
  }

  /** Every intent, in key order (the whole table at once: see `intentPage` and `intents` for large stores). */
  listIntents(): Intent[] {
    return this.#run((raw) => raw.listIntents());
  }

  /**
   * One page of intents in key order (tenant, operation, key), at most `limit` (default 100),
   * after the cursor `after` (the `next` of the page before), only those in `state` if given.
   * One bounded range read: a page costs its own size, however many intents the store holds.
   * `next` is `null` after the last page. Intents created between pages appear in a later page
   * when their key sorts after the cursor; none is returned twice.
   */
  intentPage(options?: IntentPageOptions): IntentPage {
    const [after, limit, state] = pageArgs(options);
    return this.#run((raw) => raw.intentPage(after, limit, state));
  }

  /**
   * Every intent (or those in `options.state`), in key order, read `pageSize` at a time:
   * `for await (const intent of store.intents({ state: 'pending' })) { ... }`.
   */
  intents(options?: IntentIterationOptions): AsyncGenerator<Intent, void, undefined> {
    return iterateIntents((page) => this.intentPage(page), options);
  }

  /**
   * Client-side retention: removes finished (completed or abandoned) intents that last changed
   * at least `keepForMs` ago (default 7 days), up to `budget` (default 1000) per call.
   */
  purgeIntents(options?: { keepForMs?: number; budget?: number }): IntentPurge {
    const keepForMs = options?.keepForMs ?? 7 * 24 * 3600 * 1000;
    return this.#run((raw) => raw.purgeIntents(keepForMs, options?.budget ?? 1000));
  }

  // ---- server side: reserve, replay, complete ----

  /** Reserves `(scope, key)` for a request with `fingerprint` (see `fingerprint()`), or says why not. */
  reserve(scope: Scope, key: string, fingerprint: string): Reservation {
    checkScope(scope);
    const answer = this.#run((raw) => raw.reserve(scope.tenant, scope.operation, key, fingerprint));
    if (answer.status === 'acquired') return { status: 'acquired', lease: wrapLease(answer.lease) };
    return answer;
  }

  /** `reserve` with the fingerprint of a JSON request. */
  reserveRequest(scope: Scope, key: string, request: JsonRequest, canonical?: CanonicalOptions): Reservation {
    return this.reserve(scope, key, fingerprint(request, canonical));
  }

  /** Stores the result of the lease's attempt; retries replay it byte for byte. */
  complete(lease: Lease, body: Body): void {
    const raw = rawLease(lease);
    const bytes = bodyBytes(body);
    this.#run((store) => store.complete(raw, bytes));
  }

  /**
   * Records a failed attempt: `definitive` (the body is replayed), `retryable` (nothing happened;
   * the key is released) or `uncertain` (an external effect may have happened; reconcile first).
   */
  fail(lease: Lease, kind: FailureKind, body?: Body): void {
    const raw = rawLease(lease);
    const bytes = body === undefined ? null : bodyBytes(body);
    this.#run((store) => store.fail(raw, kind, bytes));
  }

  /** Extends the lease; returns the renewed lease. */
  renew(lease: Lease): Lease {
    const raw = rawLease(lease);
    return wrapLease(this.#run((store) => store.renew(raw)));
  }

  /** Resolves an uncertain record. */
  reconcile(scope: Scope, key: string, resolution: 'completed' | 'failed' | 'released', body?: Body): void {
    checkScope(scope);
    const bytes = body === undefined ? null : bodyBytes(body);
    this.#run((raw) => raw.reconcile(scope.tenant, scope.operation, key, resolution, bytes));
  }

  /** The stored record of a key, or `null`. */
  get(scope: Scope, key: string): StoredRecord | null {
    checkScope(scope);
    return this.#run((raw) => raw.get(scope.tenant, scope.operation, key));
  }

  /** Applies retention (results → tombstones → forgotten) to at most `budget` due records. */
  purgeExpired(budget = 1000): ExpiryPurge {
    return this.#run((raw) => raw.purgeExpired(budget));
  }

  // ---- the store itself ----

  /** Makes every earlier commit durable (needed only with `durability: 'eventual'`). */
  flush(): void {
    this.#run((raw) => raw.flush());
  }

  /**
   * Every byte of the store, flushed first: a store file that `openMemoryStore({ snapshot })`,
   * `openFileStore`, the Rust crate and the CLI open.
   */
  exportSnapshot(): Uint8Array {
    return this.#run((raw) => raw.exportSnapshot());
  }

  /** `close()`, for `using store = await openMemoryStore()`: closed when the block ends. */
  [Symbol.dispose](): void {
    this.close();
  }

  /** Closes the store and releases its file, handle or lock. Closing twice is a no-op. */
  close(): void {
    if (!this.#raw.isOpen) return;
    try {
      this.#run((raw) => raw.close());
    } finally {
      const onClose = this.#hooks.onClose;
      this.#hooks = {};
      onClose?.();
    }
  }
}

/**
 * @internal Opens a store with `open` (an engine call), running it like every later call
 * (`hooks.around`); on failure releases what `hooks.onClose` releases and throws a typed error.
 */
export function openRaw(open: () => RawStore, hooks: StoreHooks = {}): Store {
  let raw: RawStore;
  try {
    raw = guard(() => (hooks.around ? hooks.around(open) : open()));
  } catch (error) {
    hooks.onClose?.();
    throw hooks.explain?.() ?? error;
  }
  return new Store(raw, hooks);
}

/** Opens a store in memory: empty, or from snapshot bytes exported earlier. */
export function openMemoryStoreSync(options?: StoreOptions & { snapshot?: Uint8Array }): Store {
  return openRaw(() => getEngine().WasmStore.openMemory(options?.snapshot ?? null, options ?? null));
}
