//! The TypeScript types of the values this crate builds and parses (in `convert.rs` and
//! `store.rs`), emitted by wasm-bindgen into the generated `idemdb_wasm.d.ts`. The npm package
//! types its raw engine and re-exports these shapes from that file instead of writing them a
//! second time. The `unchecked_return_type` / `unchecked_param_type` attributes in `store.rs`
//! name them.

use wasm_bindgen::prelude::*;

#[wasm_bindgen(typescript_custom_section)]
const TYPES: &'static str = r#"
/** Storage supplied by the host: five synchronous methods over one growable byte array. */
export interface HostStorage {
  /** Fill `out` with the bytes at `offset` (the range always lies inside the storage); return nothing. */
  read(offset: number, out: Uint8Array): void;
  /** Write `data` at `offset` (inside the storage). `data` is only valid during the call: copy it. */
  write(offset: number, data: Uint8Array): void;
  /** The storage's length in bytes: a non-negative integer. */
  size(): number;
  /** Grow (with zeros) or shrink the storage to `length` bytes. */
  truncate(length: number): void;
  /** Make every earlier write durable. Called once per durable commit. */
  flush(): void;
}

/**
 * What the engine uses of an OPFS `FileSystemSyncAccessHandle` (dedicated workers). Declared
 * here so that these declarations need no DOM library.
 */
export interface SyncAccessHandle {
  read(buffer: Uint8Array, options: { at: number }): number;
  write(buffer: Uint8Array, options: { at: number }): number;
  truncate(size: number): void;
  getSize(): number;
  flush(): void;
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
  expiredLease?: 'uncertain' | 'takeover' | 'takeover-if-no-effect';
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

/** How one attempt ended. */
export type AttemptOutcome =
  | { outcome: 'sent' }
  | { outcome: 'status'; status: number }
  | { outcome: 'network_error' }
  | { outcome: 'timeout' };

/** A recorded attempt. */
export type Attempt = AttemptOutcome & { at: number };

/** The recorded final response of an intent. */
export interface IntentResponse {
  status: number;
  headers: [string, string][];
  body: Uint8Array<ArrayBuffer>;
}

interface IntentBase {
  tenant: string;
  operation: string;
  /** The idempotency key, made once when the intent was created. */
  key: string;
  /** The canonical request (RFC 8785 JSON bytes). */
  request: Uint8Array<ArrayBuffer>;
  /** Hex fingerprint of the canonical request. */
  fingerprint: string;
  attempts: number;
  lastAttempt: Attempt | null;
  /** Milliseconds since the epoch. */
  createdAt: number;
  updatedAt: number;
  /** `attempts` when the intent was last reopened (0 before): its attempt budget counts from here. */
  budgetStart: number;
}

/** Why an intent needs a person before anything else is sent. */
export type AttentionCause = 'needs_reconciliation' | 'expired' | 'provider_key_expired' | 'unreadable' | 'retries_exhausted' | 'answer_too_large';

/** A client intent, as stored. */
export type Intent =
  | (IntentBase & { state: 'pending' })
  | (IntentBase & { state: 'completed'; response: IntentResponse })
  | (IntentBase & { state: 'abandoned'; reason: string })
  | (IntentBase & { state: 'needs_attention'; cause: AttentionCause; response: IntentResponse | null });

/** The answer to `reserve`, with the engine's own lease object. */
export type RawReservation =
  | { status: 'acquired'; lease: WasmLease }
  | { status: 'replay'; outcome: 'completed' | 'failed'; body: Uint8Array<ArrayBuffer> }
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
  body?: Uint8Array<ArrayBuffer>;
}

/** What `purgeExpired` did. */
export interface ExpiryPurge {
  tombstoned: number;
  forgotten: number;
  more: boolean;
}

/** One page of `intentPage`: its intents in key order, and the cursor of the next page (`null` after the last). */
export interface IntentPage {
  intents: Intent[];
  next: string | null;
}

/** What `purgeIntents` did. */
export interface IntentPurge {
  removed: number;
  more: boolean;
}
"#;
