import { guard, InvalidInputError } from './errors.js';
import { getEngine, type RawLease, type RawStore } from './engine.js';

/** Who a record or intent belongs to: `(tenant, operation)`. */
export interface Scope {
  tenant: string;
  operation: string;
}

/** Canonicalisation of a JSON request before fingerprinting (RFC 8785 plus these rules). */
export interface CanonicalOptions {
  /** JSON pointers (`*` matches any array index or key) removed before hashing, e.g. `/trace_id`. */
  exclude?: string[];
  /** Rewrites applied to the values at JSON pointers. `decimal` turns amounts into canonical decimal strings. */
  normalise?: Record<string, 'trim' | 'uppercase' | 'lowercase' | 'decimal'>;
  /** Largest body accepted, in bytes. */
  maxBodyBytes?: number;
}

/** Per-operation expiry and limits. Durations in milliseconds. */
export interface PolicyOptions {
  leaseTtlMs?: number;
  responseTtlMs?: number;
  tombstoneTtlMs?: number;
  maxResultBytes?: number;
  /** What a retry finding an expired lease means: `uncertain` (default, safe) or `takeover`. */
  expiredLease?: 'uncertain' | 'takeover';
}

/** Options of every open function. */
export interface StoreOptions {
  /** `immediate` (default): every commit is durable when the call returns. `eventual`: call `flush()`. */
  durability?: 'immediate' | 'eventual';
  /** Page cache in bytes (default 16 MiB). */
  cacheBytes?: number;
  /** Keep the audit trail table (default true). */
  audit?: boolean;
  defaultPolicy?: PolicyOptions;
  policies?: Record<string, PolicyOptions>;
}

/** A request body: JSON text, UTF-8 bytes of JSON, or any JSON-serialisable value. */
export type JsonRequest = string | Uint8Array | object | number | boolean | null;

/** How one attempt ended. */
export type AttemptOutcome =
  | { outcome: 'sent' }
  | { outcome: 'network_error' }
  | { outcome: 'timeout' }
  | { outcome: 'status'; status: number };

/** A recorded attempt. */
export type Attempt = AttemptOutcome & { at: number };

/** The recorded final response of an intent. */
export interface IntentResponse {
  status: number;
  headers: [string, string][];
  body: Uint8Array;
}

interface IntentBase {
  tenant: string;
  operation: string;
  /** The idempotency key, made once when the intent was created. */
  key: string;
  /** The canonical request (RFC 8785 JSON bytes). */
  request: Uint8Array;
  /** Hex fingerprint of the canonical request. */
  fingerprint: string;
  attempts: number;
  lastAttempt: Attempt | null;
  /** Milliseconds since the epoch. */
  createdAt: number;
  updatedAt: number;
}

/** A client intent, as stored. */
export type Intent =
  | (IntentBase & { state: 'pending' })
  | (IntentBase & { state: 'completed'; response: IntentResponse })
  | (IntentBase & { state: 'abandoned'; reason: string });

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
export type Reservation =
  | { status: 'acquired'; lease: Lease }
  | { status: 'replay'; outcome: 'completed' | 'failed'; body: Uint8Array }
  | { status: 'in_progress'; retryAfterMs: number }
  | { status: 'mismatch'; stored: string }
  | { status: 'needs_reconciliation'; cause: 'lease_expired' | 'reported' }
  | { status: 'expired'; outcome: 'completed' | 'failed' };

/** A stored server-side record. */
export interface StoredRecord {
  state: 'in_progress' | 'completed' | 'failed' | 'released' | 'uncertain' | 'tombstone';
  fingerprint: string;
  fence: bigint;
  attempts: number;
  createdAt: number;
  updatedAt: number;
  body?: Uint8Array;
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

function bodyBytes(body: Uint8Array | string | undefined | null): Uint8Array {
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

/**
 * An open idempotency store. Every method is synchronous and, with the default durability,
 * durable when it returns. Obtain one from `openMemoryStore`, `openOpfsStore` (browser
 * worker), `openFileStore` (Node) or `openHostStore` (edge).
 */
export class Store {
  #raw: RawStore;
  #onClose: (() => void) | undefined;

  /** @internal */
  constructor(raw: RawStore, onClose?: () => void) {
    this.#raw = raw;
    this.#onClose = onClose;
  }

  /** Whether the store is open. */
  get isOpen(): boolean {
    return this.#raw.isOpen;
  }

  // ---- client intents ----

  /**
   * Creates an intent (a new key unless `options.key` is given) and stores it durably with its
   * canonical request and fingerprint. Call it before the first send. Creating the same intent
   * again (same key, same canonical request) returns the stored one.
   */
  createIntent(scope: Scope, request: JsonRequest, options?: { key?: string; canonical?: CanonicalOptions }): Intent {
    checkScope(scope);
    return guard(() =>
      this.#raw.createIntent(scope.tenant, scope.operation, options?.key ?? null, jsonBytes(request), options?.canonical ?? null),
    );
  }

  /**
   * Creates several intents in one write transaction: one durable commit (one flush) for the
   * whole batch, all stored or none. `options.keys[i]` gives the key of `requests[i]`.
   */
  createIntents(scope: Scope, requests: JsonRequest[], options?: { keys?: string[]; canonical?: CanonicalOptions }): Intent[] {
    checkScope(scope);
    return guard(() =>
      this.#raw.createIntents(scope.tenant, scope.operation, requests.map(jsonBytes), options?.keys ?? null, options?.canonical ?? null),
    );
  }

  /** One intent, or `null`. */
  getIntent(scope: Scope, key: string): Intent | null {
    checkScope(scope);
    return guard(() => this.#raw.getIntent(scope.tenant, scope.operation, key));
  }

  /** Records an attempt of a pending intent. */
  recordAttempt(scope: Scope, key: string, attempt: AttemptOutcome): Intent {
    checkScope(scope);
    const status = attempt.outcome === 'status' ? attempt.status : null;
    return guard(() => this.#raw.recordAttempt(scope.tenant, scope.operation, key, attempt.outcome, status));
  }

  /** Records the final response and finishes the intent (the same response again is a no-op). */
  recordResponse(
    scope: Scope,
    key: string,
    response: { status: number; headers?: [string, string][]; body?: Uint8Array | string },
  ): Intent {
    checkScope(scope);
    return guard(() =>
      this.#raw.recordResponse(scope.tenant, scope.operation, key, response.status, response.headers ?? [], bodyBytes(response.body)),
    );
  }

  /** Abandons a pending intent with a reason; it will not be resumed. */
  abandonIntent(scope: Scope, key: string, reason: string): Intent {
    checkScope(scope);
    return guard(() => this.#raw.abandonIntent(scope.tenant, scope.operation, key, reason));
  }

  /** Every pending intent, oldest first: resume these at start-up. */
  pendingIntents(): Intent[] {
    return guard(() => this.#raw.pendingIntents());
  }

  /** Every intent. */
  listIntents(): Intent[] {
    return guard(() => this.#raw.listIntents());
  }

  /**
   * Client-side retention: removes finished (completed or abandoned) intents that last changed
   * at least `keepForMs` ago (default 7 days), up to `budget` (default 1000) per call.
   */
  purgeIntents(options?: { keepForMs?: number; budget?: number }): { removed: number; more: boolean } {
    const keepForMs = options?.keepForMs ?? 7 * 24 * 3600 * 1000;
    return guard(() => this.#raw.purgeIntents(keepForMs, options?.budget ?? 1000));
  }

  // ---- server side: reserve, replay, complete ----

  /** Reserves `(scope, key)` for a request with `fingerprint` (see `fingerprint()`), or says why not. */
  reserve(scope: Scope, key: string, fingerprint: string): Reservation {
    checkScope(scope);
    const answer = guard(() => this.#raw.reserve(scope.tenant, scope.operation, key, fingerprint));
    if (answer.status === 'acquired') return { status: 'acquired', lease: wrapLease(answer.lease) };
    return answer;
  }

  /** `reserve` with the fingerprint of a JSON request. */
  reserveRequest(scope: Scope, key: string, request: JsonRequest, canonical?: CanonicalOptions): Reservation {
    return this.reserve(scope, key, fingerprint(request, canonical));
  }

  /** Stores the result of the lease's attempt; retries replay it byte for byte. */
  complete(lease: Lease, body: Uint8Array | string): void {
    guard(() => this.#raw.complete(rawLease(lease), bodyBytes(body)));
  }

  /**
   * Records a failed attempt: `definitive` (the body is replayed), `retryable` (nothing happened;
   * the key is released) or `uncertain` (an external effect may have happened; reconcile first).
   */
  fail(lease: Lease, kind: 'definitive' | 'retryable' | 'uncertain', body?: Uint8Array | string): void {
    guard(() => this.#raw.fail(rawLease(lease), kind, body === undefined ? null : bodyBytes(body)));
  }

  /** Extends the lease; returns the renewed lease. */
  renew(lease: Lease): Lease {
    return wrapLease(guard(() => this.#raw.renew(rawLease(lease))));
  }

  /** Resolves an uncertain record. */
  reconcile(scope: Scope, key: string, resolution: 'completed' | 'failed' | 'released', body?: Uint8Array | string): void {
    checkScope(scope);
    guard(() => this.#raw.reconcile(scope.tenant, scope.operation, key, resolution, body === undefined ? null : bodyBytes(body)));
  }

  /** The stored record of a key, or `null`. */
  get(scope: Scope, key: string): StoredRecord | null {
    checkScope(scope);
    return guard(() => this.#raw.get(scope.tenant, scope.operation, key));
  }

  /** Applies retention (results → tombstones → forgotten) to at most `budget` due records. */
  purgeExpired(budget = 1000): { tombstoned: number; forgotten: number; more: boolean } {
    return guard(() => this.#raw.purgeExpired(budget));
  }

  // ---- the store itself ----

  /** Makes every earlier commit durable (needed only with `durability: 'eventual'`). */
  flush(): void {
    guard(() => this.#raw.flush());
  }

  /**
   * Every byte of the store, flushed first: a store file that `openMemoryStore({ snapshot })`,
   * `openFileStore`, the Rust crate and the CLI open.
   */
  exportSnapshot(): Uint8Array {
    return guard(() => this.#raw.exportSnapshot());
  }

  /** Closes the store and releases its file, handle or lock. Closing twice is a no-op. */
  close(): void {
    if (!this.#raw.isOpen) return;
    try {
      this.#raw.close();
    } finally {
      const onClose = this.#onClose;
      this.#onClose = undefined;
      onClose?.();
    }
  }
}

/** @internal */
export function openRaw(open: () => RawStore, onClose?: () => void): Store {
  let raw: RawStore;
  try {
    raw = guard(open);
  } catch (error) {
    onClose?.();
    throw error;
  }
  return new Store(raw, onClose);
}

/** Opens a store in memory: empty, or from snapshot bytes exported earlier. */
export function openMemoryStoreSync(options?: StoreOptions & { snapshot?: Uint8Array }): Store {
  return openRaw(() => getEngine().WasmStore.openMemory(options?.snapshot ?? null, options ?? null));
}
