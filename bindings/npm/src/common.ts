/**
 * What every entry file (node, browser, workerd) exports: the error classes, the `Store`, the
 * shared open functions, fingerprints and keys, and `idempotentFetch` with its resume helpers.
 */
export {
  AbandonedError,
  AbortedError,
  ConflictError,
  IdemdbError,
  InternalError,
  InvalidInputError,
  KeyReusedError,
  NeedsAttentionError,
  NotFoundError,
  NotReadyError,
  OpenError,
  RetriesExhaustedError,
  StorageError,
  StoreBusyError,
  StoreClosedError,
  TransitionError,
  UnsupportedError,
  toIdemdbError,
  type ErrorCode,
} from './errors.js';
export type { EngineErrorCode } from './engine-codes.js';
export {
  Store,
  canonicalize,
  fingerprint,
  newKey,
  type Attempt,
  type AttemptOutcome,
  type AttentionCause,
  type Body,
  type CanonicalOptions,
  type ExpiryPurge,
  type HostStorage,
  type Intent,
  type IntentPurge,
  type IntentResponse,
  type JsonRequest,
  type Lease,
  type PolicyOptions,
  type Reservation,
  type Scope,
  type StoreOptions,
  type StoredRecord,
} from './store.js';
export {
  openDurableObjectStore,
  openHostStore,
  openMemoryStore,
  ready,
  type DurableObjectStorageLike,
  type DurableObjectStoreOptions,
  type WasmSource,
} from './open.js';
export { classifyAnswer, type AnswerClass } from './contract.js';
export {
  STORED_HEADERS,
  autoResume,
  idempotentFetch,
  resumePending,
  sendIntent,
  type AutoResumeOptions,
  type IdempotentFetchOptions,
  type IntentStore,
  type Resumed,
  type RetryOptions,
} from './fetch.js';
