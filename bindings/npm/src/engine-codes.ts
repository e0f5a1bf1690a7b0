/**
 * The stable error codes, as the engine's Rust side defines them (generated into
 * `generated/vocabulary.ts` from `idemdb_core::ErrorCode`; a Rust test fails when the two
 * differ). Re-exported here for the modules that import it from this path.
 */

export type { EngineErrorCode } from './generated/vocabulary.js';
