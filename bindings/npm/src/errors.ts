/**
 * Typed errors. Every error the package throws is an `IdemdbError` (a real `Error`) with a
 * stable `code`; catch a subclass, or switch on `code`. Engine errors (plain JS errors with a
 * `code`, made in `bindings/wasm`) become the subclass their code names (`toIdemdbError`).
 */
import type { AttentionCause, EngineErrorCode } from './generated/vocabulary.js';


/**
 * Every stable error code: generated from the Rust `ErrorCode` (`src/generated/vocabulary.ts`),
 * so the engine, the HTTP layer and this package name failures alike.
 */
export type ErrorCode = EngineErrorCode;

/** Base class of every error this package throws. */
export class IdemdbError extends Error {
  /** Stable machine-readable code. */
  readonly code: ErrorCode;
  constructor(code: ErrorCode, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.code = code;
    this.name = new.target.name;
  }
}

/** An argument, key, scope or request was rejected before anything was stored. */
export class InvalidInputError extends IdemdbError {}
/** No record or intent exists for the key. */
export class NotFoundError extends IdemdbError {}
/**
 * The key is bound to a different request (`IDEMDB_KEY_MISMATCH`): the store refused an
 * intent whose key already names another request, or the server answered 422 to
 * `idempotentFetch` (then `response` is the recorded answer). Never retried: a new request
 * needs a new key.
 */
export class KeyMismatchError extends IdemdbError {
  /** The server's recorded 422 answer; `undefined` when the local store refused. */
  readonly response: Response | undefined;
  constructor(code: ErrorCode, message: string, options?: { cause?: unknown; response?: Response }) {
    super(code, message, options);
    this.response = options?.response;
  }
}
/** A state transition was refused: stale lease, wrong state, live lease, finished intent, too large. */
export class TransitionError extends IdemdbError {}
/** The storage failed; check `reopenRequired`. */
export class StorageError extends IdemdbError {
  /** Whether the store must be closed and opened again before further use. */
  readonly reopenRequired: boolean;
  constructor(code: ErrorCode, message: string, options?: { cause?: unknown; reopenRequired?: boolean }) {
    super(code, message, options);
    this.reopenRequired = options?.reopenRequired ?? code === 'IDEMDB_COMMIT_UNKNOWN';
  }
}
/** The store was closed. */
export class StoreClosedError extends IdemdbError {}
/**
 * The store is open elsewhere (another tab, worker or process holds it). Retry later, pass
 * `{ wait: true }`, or send the work through the tab that holds it.
 */
export class StoreBusyError extends IdemdbError {
  /**
   * How long the open waited for the holder before giving up (`{ wait: ms }` ran out), in ms;
   * `undefined` when it did not wait.
   */
  readonly waitedMs: number | undefined;
  constructor(code: ErrorCode, message: string, options?: { cause?: unknown; waitedMs?: number }) {
    super(code, message, options);
    this.waitedMs = options?.waitedMs;
  }
}
/** The file is not an idemdb store, or has a format this build cannot read. */
export class OpenError extends IdemdbError {}
/** The platform lacks something the store needs (OPFS outside a dedicated worker, Web Locks). */
export class UnsupportedError extends IdemdbError {}
/** A bug or a trap inside the engine; the store should be reopened. */
export class InternalError extends IdemdbError {}
/**
 * The WebAssembly engine is not loaded: `await ready()` first (the open functions do it), or
 * the `.wasm` could not be fetched (pass its URL to `ready(url)`).
 */
export class NotReadyError extends IdemdbError {}

/** Every attempt failed; the intent stays pending and is resumed later with the same key. */
export class RetriesExhaustedError extends IdemdbError {
  /** The intent's key. */
  readonly key: string;
  /** The last status seen, if any response arrived. */
  readonly lastStatus: number | undefined;
  constructor(message: string, key: string, lastStatus: number | undefined, options?: { cause?: unknown }) {
    super('IDEMDB_RETRIES_EXHAUSTED', message, options);
    this.key = key;
    this.lastStatus = lastStatus;
  }
}
/** The intent was abandoned; it will not be sent again. */
export class AbandonedError extends IdemdbError {
  /** The recorded reason. */
  readonly reason: string;
  constructor(message: string, reason: string) {
    super('IDEMDB_ABANDONED', message);
    this.reason = reason;
  }
}
/** The caller's `AbortSignal` fired; the intent stays pending. */
export class AbortedError extends IdemdbError {}
/**
 * The intent needs a person (a reconciliation, an expired key, a spent attempt budget): it is
 * not sent again until `store.reopenIntent` (after a reconciliation) or `store.abandonIntent`.
 */
export class NeedsAttentionError extends IdemdbError {
  /** The intent's key. */
  readonly key: string;
  /** Why it needs attention. */
  readonly cause: AttentionCause;
  /** The last answer, when there was one. */
  readonly response: Response | undefined;
  constructor(message: string, key: string, cause: AttentionCause, response: Response | undefined) {
    super('IDEMDB_NEEDS_ATTENTION', message);
    this.key = key;
    this.cause = cause;
    this.response = response;
  }
}

type ErrorClass = new (code: ErrorCode, message: string, options?: { cause?: unknown }) => IdemdbError;

/**
 * The class of every code. Typed over the code union generated from Rust, so a code added in
 * Rust does not compile here until it has a class. Codes this package never throws itself
 * (the HTTP layer's, the workflow primitives', a database server's) are plain `IdemdbError`s.
 */
const BY_CODE: Record<ErrorCode, ErrorClass> = {
  IDEMDB_INVALID_ARGUMENT: InvalidInputError,
  IDEMDB_INVALID_KEY: InvalidInputError,
  IDEMDB_INVALID_REQUEST: InvalidInputError,
  IDEMDB_INVALID_POLICY: InvalidInputError,
  IDEMDB_UNKNOWN_NAME: InvalidInputError,
  IDEMDB_NOT_FOUND: NotFoundError,
  IDEMDB_INTENT_FINISHED: TransitionError,
  IDEMDB_STALE_LEASE: TransitionError,
  IDEMDB_WRONG_STATE: TransitionError,
  IDEMDB_LEASE_LIVE: TransitionError,
  IDEMDB_TOO_LARGE: TransitionError,
  IDEMDB_FENCE_EXHAUSTED: TransitionError,
  IDEMDB_STORAGE: StorageError,
  IDEMDB_COMMIT_UNKNOWN: StorageError,
  IDEMDB_CORRUPT: StorageError,
  IDEMDB_CLOSED: StoreClosedError,
  IDEMDB_STORE_BUSY: StoreBusyError,
  IDEMDB_NO_RANDOMNESS: UnsupportedError,
  IDEMDB_NOT_A_STORE: OpenError,
  IDEMDB_FOREIGN: OpenError,
  IDEMDB_NEWER_FORMAT: OpenError,
  IDEMDB_OLDER_FORMAT: OpenError,
  IDEMDB_UNSUPPORTED: UnsupportedError,
  IDEMDB_READ_ONLY: UnsupportedError,
  IDEMDB_NOT_READY: NotReadyError,
  IDEMDB_INTERNAL: InternalError,
  IDEMDB_ABORTED: AbortedError,
  IDEMDB_RETRIES_EXHAUSTED: IdemdbError,
  IDEMDB_ABANDONED: IdemdbError,
  IDEMDB_NEEDS_ATTENTION: IdemdbError,
  IDEMDB_KEY_MISSING: IdemdbError,
  IDEMDB_KEY_MISMATCH: KeyMismatchError,
  IDEMDB_IN_PROGRESS: IdemdbError,
  IDEMDB_NEEDS_RECONCILIATION: IdemdbError,
  IDEMDB_EXPIRED: IdemdbError,
  IDEMDB_OPERATION_FAILED: IdemdbError,
  IDEMDB_UNAVAILABLE: IdemdbError,
  IDEMDB_SCHEMA_MISMATCH: IdemdbError,
  IDEMDB_UNAUTHENTICATED: IdemdbError,
  IDEMDB_PROVIDER_KEY_EXPIRED: IdemdbError,
  IDEMDB_DELIVERY_MISMATCH: IdemdbError,
};

/** Turns anything thrown by the engine or a host callback into a typed `IdemdbError`. */
export function toIdemdbError(thrown: unknown): IdemdbError {
  if (thrown instanceof IdemdbError) return thrown;
  const code = (thrown as { code?: unknown } | null)?.code;
  const message = thrown instanceof Error ? thrown.message : String(thrown);
  if (typeof code === 'string' && code.startsWith('IDEMDB_')) {
    const reopenRequired = (thrown as { reopenRequired?: unknown }).reopenRequired === true;
    const Ctor = BY_CODE[code as ErrorCode];
    if (Ctor === StorageError) return new StorageError(code as ErrorCode, message, { cause: thrown, reopenRequired });
    if (Ctor) return new Ctor(code as ErrorCode, message, { cause: thrown });
    return new InternalError('IDEMDB_INTERNAL', `unknown error code ${code}: ${message}`, { cause: thrown });
  }
  if (typeof WebAssembly !== 'undefined' && thrown instanceof WebAssembly.RuntimeError) {
    return new InternalError('IDEMDB_INTERNAL', `engine trapped: ${message}`, { cause: thrown });
  }
  return new InternalError('IDEMDB_INTERNAL', message, { cause: thrown });
}

/** Runs `f`, rethrowing whatever it throws as a typed error. */
export function guard<T>(f: () => T): T {
  try {
    return f();
  } catch (thrown) {
    throw toIdemdbError(thrown);
  }
}
