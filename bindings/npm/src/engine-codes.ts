/**
 * The stable error codes the WebAssembly engine (`bindings/wasm`) sets on the errors it throws.
 * Kept apart from the codes the TypeScript layer makes (`errors.ts`) so that this list can come
 * straight from the Rust side's error codes: replace this file, not `errors.ts`.
 */

/** Every code the engine can throw. */
export type EngineErrorCode =
  | 'IDEMDB_INVALID_ARGUMENT'
  | 'IDEMDB_INVALID_KEY'
  | 'IDEMDB_INVALID_REQUEST'
  | 'IDEMDB_INVALID_POLICY'
  | 'IDEMDB_NOT_FOUND'
  | 'IDEMDB_KEY_REUSED'
  | 'IDEMDB_INTENT_FINISHED'
  | 'IDEMDB_STALE_LEASE'
  | 'IDEMDB_WRONG_STATE'
  | 'IDEMDB_LEASE_LIVE'
  | 'IDEMDB_TOO_LARGE'
  | 'IDEMDB_STORAGE'
  | 'IDEMDB_COMMIT_UNKNOWN'
  | 'IDEMDB_CORRUPT'
  | 'IDEMDB_NO_RANDOMNESS'
  | 'IDEMDB_CLOSED'
  | 'IDEMDB_STORE_BUSY'
  | 'IDEMDB_NOT_A_STORE'
  | 'IDEMDB_FOREIGN'
  | 'IDEMDB_NEWER_FORMAT'
  | 'IDEMDB_OLDER_FORMAT';
