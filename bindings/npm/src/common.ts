export * from './errors.js';
export type { HostStorage } from './engine.js';
export {
  Store,
  canonicalize,
  fingerprint,
  newKey,
  type Attempt,
  type AttemptOutcome,
  type CanonicalOptions,
  type Intent,
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
