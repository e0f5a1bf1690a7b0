/**
 * Generated from the Rust vocabularies of idemdb (bindings/wasm/src/typescript.rs); do not edit.
 * Regenerate with `IDEMDB_BLESS=1 cargo test -p idemdb-wasm --lib`.
 */

/** Every stable error code. */
export const ENGINE_ERROR_CODES = [
  'IDEMDB_INVALID_ARGUMENT',
  'IDEMDB_INVALID_KEY',
  'IDEMDB_INVALID_REQUEST',
  'IDEMDB_INVALID_POLICY',
  'IDEMDB_NOT_FOUND',
  'IDEMDB_INTENT_FINISHED',
  'IDEMDB_STALE_LEASE',
  'IDEMDB_WRONG_STATE',
  'IDEMDB_LEASE_LIVE',
  'IDEMDB_TOO_LARGE',
  'IDEMDB_STORAGE',
  'IDEMDB_COMMIT_UNKNOWN',
  'IDEMDB_CORRUPT',
  'IDEMDB_NO_RANDOMNESS',
  'IDEMDB_CLOSED',
  'IDEMDB_STORE_BUSY',
  'IDEMDB_NOT_A_STORE',
  'IDEMDB_FOREIGN',
  'IDEMDB_NEWER_FORMAT',
  'IDEMDB_OLDER_FORMAT',
  'IDEMDB_UNSUPPORTED',
  'IDEMDB_INTERNAL',
  'IDEMDB_RETRIES_EXHAUSTED',
  'IDEMDB_ABANDONED',
  'IDEMDB_ABORTED',
  'IDEMDB_KEY_MISSING',
  'IDEMDB_KEY_MISMATCH',
  'IDEMDB_IN_PROGRESS',
  'IDEMDB_NEEDS_RECONCILIATION',
  'IDEMDB_EXPIRED',
  'IDEMDB_OPERATION_FAILED',
  'IDEMDB_UNAVAILABLE',
  'IDEMDB_SCHEMA_MISMATCH',
  'IDEMDB_UNKNOWN_NAME',
  'IDEMDB_UNAUTHENTICATED',
  'IDEMDB_PROVIDER_KEY_EXPIRED',
  'IDEMDB_DELIVERY_MISMATCH',
  'IDEMDB_NOT_READY',
  'IDEMDB_FENCE_EXHAUSTED',
  'IDEMDB_READ_ONLY',
  'IDEMDB_NEEDS_ATTENTION',
] as const;
/** Every stable error code. */
export type EngineErrorCode = (typeof ENGINE_ERROR_CODES)[number];

/** What a reservation answers. */
export const RESERVATION_STATUSES = [
  'acquired',
  'replay',
  'in_progress',
  'mismatch',
  'needs_reconciliation',
  'expired',
] as const;
/** What a reservation answers. */
export type ReservationStatus = (typeof RESERVATION_STATUSES)[number];

/** Where a record is in its life. */
export const RECORD_STATES = [
  'in_progress',
  'completed',
  'failed',
  'released',
  'uncertain',
  'tombstone',
] as const;
/** Where a record is in its life. */
export type RecordState = (typeof RECORD_STATES)[number];

/** The final outcome a record reached. */
export const OUTCOMES = [
  'completed',
  'failed',
] as const;
/** The final outcome a record reached. */
export type Outcome = (typeof OUTCOMES)[number];

/** Why a record is uncertain. */
export const UNCERTAIN_CAUSES = [
  'lease_expired',
  'reported',
] as const;
/** Why a record is uncertain. */
export type UncertainCause = (typeof UNCERTAIN_CAUSES)[number];

/** How an attempt failed. */
export const FAILURE_KINDS = [
  'definitive',
  'retryable',
  'uncertain',
] as const;
/** How an attempt failed. */
export type FailureKind = (typeof FAILURE_KINDS)[number];

/** How an uncertain record is resolved. */
export const RESOLUTION_KINDS = [
  'completed',
  'failed',
  'released',
] as const;
/** How an uncertain record is resolved. */
export type ResolutionKind = (typeof RESOLUTION_KINDS)[number];

/** Where a client intent is in its life. */
export const INTENT_STATES = [
  'pending',
  'completed',
  'abandoned',
  'needs_attention',
] as const;
/** Where a client intent is in its life. */
export type IntentState = (typeof INTENT_STATES)[number];

/** What one attempt to send an intent ended with. */
export const ATTEMPT_OUTCOMES = [
  'sent',
  'status',
  'network_error',
  'timeout',
] as const;
/** What one attempt to send an intent ended with. */
export type AttemptOutcomeKind = (typeof ATTEMPT_OUTCOMES)[number];

/** What a retry that finds an expired lease means. */
export const EXPIRED_LEASE_RULES = [
  'uncertain',
  'takeover',
  'takeover-if-no-effect',
] as const;
/** What a retry that finds an expired lease means. */
export type ExpiredLeaseRule = (typeof EXPIRED_LEASE_RULES)[number];

/** Rewrites applied to request values before hashing. */
export const NORMALISERS = [
  'trim',
  'uppercase',
  'lowercase',
  'decimal',
] as const;
/** Rewrites applied to request values before hashing. */
export type NormaliserName = (typeof NORMALISERS)[number];

/** How durable a commit is when the call returns. */
export const DURABILITIES = [
  'immediate',
  'eventual',
] as const;
/** How durable a commit is when the call returns. */
export type Durability = (typeof DURABILITIES)[number];

/** Why an intent needs a person before anything else is sent. */
export const ATTENTION_CAUSES = [
  'needs_reconciliation',
  'expired',
  'provider_key_expired',
  'unreadable',
  'retries_exhausted',
  'answer_too_large',
] as const;
/** Why an intent needs a person before anything else is sent. */
export type AttentionCause = (typeof ATTENTION_CAUSES)[number];

/** How a client writes the key in its header. */
export const KEY_FORMS = [
  'sf-string',
  'bare',
] as const;
/** How a client writes the key in its header. */
export type KeyForm = (typeof KEY_FORMS)[number];

/** The retry contract's defaults (the core's `DEFAULT_*`). */
export const RETRY_DEFAULTS = {
  attemptsPerCall: 5,
  attemptsPerIntent: 20,
  baseDelayMs: 250,
  maxDelayMs: 30000,
  timeoutMs: 15000,
} as const;
/** The request header carrying the key. */
export const KEY_HEADER = 'idempotency-key';
/** The response header of a replayed response (value `true`). */
export const REPLAYED_HEADER = 'idempotent-replayed';
/** Statuses retried besides every 5xx. */
export const RETRIED_STATUSES: readonly number[] = [408, 409, 429];
/** The response headers stored with a recorded answer, by default (an allow-list). */
export const STORED_RESPONSE_HEADERS: readonly string[] = ['content-type', 'content-language', 'etag', 'last-modified', 'location', 'retry-after', 'idempotent-replayed'];
/** The base of idemdb's own problem types. */
export const DEFAULT_PROBLEM_BASE = 'urn:idemdb:problem:';
/** idemdb's answers that need a person: the problem, the status it comes with, the cause. */
export const ATTENTION_PROBLEMS: readonly { code: EngineErrorCode; status: number; cause: AttentionCause }[] = [
  { code: 'IDEMDB_NEEDS_RECONCILIATION', status: 409, cause: 'needs_reconciliation' },
  { code: 'IDEMDB_PROVIDER_KEY_EXPIRED', status: 409, cause: 'provider_key_expired' },
  { code: 'IDEMDB_EXPIRED', status: 410, cause: 'expired' },
  { code: 'IDEMDB_CORRUPT', status: 500, cause: 'unreadable' },
  { code: 'IDEMDB_NEWER_FORMAT', status: 500, cause: 'unreadable' },
];
