/**
 * Host storage as the engine needs it, checked: `openHostStore` callers write five callbacks
 * from the README, and a wrong guess at one of them (a `read` that returns the bytes instead of
 * filling `out`, an `async` callback, a `size` that is not a number) would otherwise reach redb
 * as garbage and come back as a misleading `IDEMDB_NOT_A_STORE`. The wrapper checks what each
 * callback returns and keeps the first broken promise, which the store reports instead.
 */
import { InvalidInputError, type IdemdbError } from './errors.js';
import type { HostStorage } from './store.js';

const SIGNATURES = 'read(offset, out): void, write(offset, data): void, size(): number, truncate(length): void, flush(): void';

/** The host callbacks, wrapped to check what they return; `violation()` is the first broken promise. */
export interface CheckedHost {
  readonly storage: HostStorage;
  violation(): IdemdbError | undefined;
}

function describe(value: unknown): string {
  if (value === null) return 'null';
  if (typeof value === 'object') return (value as object).constructor?.name ?? 'an object';
  return `${typeof value} ${String(value)}`;
}

const isThenable = (value: unknown): boolean => typeof (value as { then?: unknown } | null)?.then === 'function';

/**
 * Checks that `host` has the five callbacks and wraps them.
 * @throws InvalidInputError when a callback is missing.
 */
export function checkHost(host: HostStorage): CheckedHost {
  if (typeof host !== 'object' || host === null) {
    throw new InvalidInputError('IDEMDB_INVALID_ARGUMENT', `openHostStore needs an object with ${SIGNATURES}; got ${describe(host)}`);
  }
  for (const name of ['read', 'write', 'size', 'truncate', 'flush'] as const) {
    if (typeof host[name] !== 'function') {
      throw new InvalidInputError('IDEMDB_INVALID_ARGUMENT', `openHostStore: host.${name} is ${describe(host[name])}; the host needs ${SIGNATURES}`);
    }
  }
  let first: IdemdbError | undefined;
  const broken = (message: string): never => {
    first ??= new InvalidInputError('IDEMDB_INVALID_ARGUMENT', `openHostStore: ${message} (the callbacks are ${SIGNATURES}, all synchronous)`);
    throw first;
  };
  const sync = (name: string, value: unknown): unknown => {
    if (isThenable(value)) broken(`host.${name}() returned a Promise; the callbacks must be synchronous`);
    return value;
  };
  const storage: HostStorage = {
    read(offset, out) {
      const value = sync('read', host.read(offset, out));
      if (value instanceof Uint8Array || value instanceof ArrayBuffer) {
        broken(`host.read(offset, out) returned ${describe(value)}: it must copy the bytes into \`out\` (out.set(bytes)) and return nothing`);
      }
      if (typeof value === 'number' && value !== out.length) {
        broken(`host.read(${offset}, out) read ${value} of ${out.length} bytes; the range always lies inside the storage, read all of it`);
      }
    },
    write(offset, data) {
      sync('write', host.write(offset, data));
    },
    size() {
      const value = sync('size', host.size());
      if (typeof value !== 'number' || !Number.isSafeInteger(value) || value < 0) {
        broken(`host.size() returned ${describe(value)}; it must return the storage's length in bytes, a non-negative integer`);
      }
      return value as number;
    },
    truncate(length) {
      sync('truncate', host.truncate(length));
    },
    flush() {
      sync('flush', host.flush());
    },
  };
  return { storage, violation: () => first };
}
