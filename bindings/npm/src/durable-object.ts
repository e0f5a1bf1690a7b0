/**
 * A store kept in a Durable Object's own storage (Cloudflare Workers, workerd): the store file
 * (the same bytes as everywhere else) cut into fixed-size pages, one row each, in a table of the
 * object's SQLite database (`ctx.storage.sql`, synchronous), with its length in a second table.
 * Every call of the store runs inside `ctx.storage.transactionSync`, so the pages one call
 * writes commit together or not at all, and the runtime's output gate holds the response until
 * they are on disk. Why pages in SQL rows: README "Durable Objects" (measured there).
 */
import { InvalidInputError, UnsupportedError } from './errors.js';
import type { HostStorage, StoreOptions } from './store.js';

/** A value bound into or read from a Durable Object's SQL. */
type SqlValue = string | number | null | ArrayBuffer;

/**
 * What the store needs of a Durable Object's `ctx.storage` (a SQLite-backed class): its `sql`
 * and `transactionSync`. `DurableObjectStorage` from `@cloudflare/workers-types` matches it.
 */
export interface DurableObjectStorageLike {
  readonly sql: {
    exec(query: string, ...bindings: SqlValue[]): Iterable<Record<string, SqlValue>> & { toArray(): Record<string, SqlValue>[] };
  };
  transactionSync<T>(closure: () => T): T;
}

/** Options of `openDurableObjectStore`. */
export interface DurableObjectStoreOptions extends StoreOptions {
  /**
   * Name prefix of the store's two tables, `<table>_pages` and `<table>_meta` (default
   * `idemdb`): letters, digits and `_`. Two stores in one object need two names.
   */
  table?: string;
  /** Bytes per row for a new store (default 4096, redb's page size); a store keeps the size it was made with. */
  pageBytes?: number;
}

const DEFAULT_PAGE_BYTES = 4096;

/**
 * Host storage over two SQL tables: `<table>_pages(n, bytes)` holds page `n` (bytes
 * `n * pageBytes ..`), always `pageBytes` long, zero past the end; `<table>_meta` holds the
 * length and the page size. A page never written reads as zeros.
 */
function pageStorage(storage: DurableObjectStorageLike, table: string, requestedPageBytes: number | undefined): HostStorage {
  const sql = storage.sql;
  const pages = `"${table}_pages"`;
  const meta = `"${table}_meta"`;
  try {
    sql.exec(`CREATE TABLE IF NOT EXISTS ${pages} (n INTEGER PRIMARY KEY, bytes BLOB NOT NULL)`);
  } catch (error) {
    // A class without SQL (key-value backed) has a `sql` object whose every call throws.
    throw noSql(error);
  }
  sql.exec(`CREATE TABLE IF NOT EXISTS ${meta} (name TEXT PRIMARY KEY, value INTEGER NOT NULL)`);
  const stored = new Map(sql.exec(`SELECT name, value FROM ${meta}`).toArray().map((row) => [row.name as string, Number(row.value)]));
  const pageBytes = stored.get('page_bytes') ?? requestedPageBytes ?? DEFAULT_PAGE_BYTES;
  if (!stored.has('page_bytes')) sql.exec(`INSERT INTO ${meta} (name, value) VALUES ('page_bytes', ?)`, pageBytes);
  let size = stored.get('size') ?? 0;

  const page = (n: number): Uint8Array | undefined => {
    for (const row of sql.exec(`SELECT bytes FROM ${pages} WHERE n = ?`, n)) return new Uint8Array(row.bytes as ArrayBuffer);
    return undefined;
  };
  const put = (n: number, bytes: Uint8Array): void => {
    const buffer = bytes.byteOffset === 0 && bytes.byteLength === bytes.buffer.byteLength ? bytes.buffer : bytes.slice().buffer;
    sql.exec(`INSERT OR REPLACE INTO ${pages} (n, bytes) VALUES (?, ?)`, n, buffer as ArrayBuffer);
  };
  const setSize = (length: number): void => {
    sql.exec(`INSERT OR REPLACE INTO ${meta} (name, value) VALUES ('size', ?)`, length);
    size = length;
  };

  return {
    read(offset, out) {
      if (out.length === 0) return;
      out.fill(0);
      const first = Math.floor(offset / pageBytes);
      const last = Math.floor((offset + out.length - 1) / pageBytes);
      for (const row of sql.exec(`SELECT n, bytes FROM ${pages} WHERE n BETWEEN ? AND ?`, first, last)) {
        const start = (row.n as number) * pageBytes;
        const bytes = new Uint8Array(row.bytes as ArrayBuffer);
        const from = Math.max(offset, start);
        const to = Math.min(offset + out.length, start + bytes.length);
        if (to > from) out.set(bytes.subarray(from - start, to - start), from - offset);
      }
    },
    write(offset, data) {
      let done = 0;
      while (done < data.length) {
        const at = offset + done;
        const n = Math.floor(at / pageBytes);
        const within = at - n * pageBytes;
        const length = Math.min(pageBytes - within, data.length - done);
        if (within === 0 && length === pageBytes) {
          put(n, data.slice(done, done + length)); // `data` is valid only during the call: copied
        } else {
          const bytes = page(n) ?? new Uint8Array(pageBytes);
          bytes.set(data.subarray(done, done + length), within);
          put(n, bytes);
        }
        done += length;
      }
    },
    size: () => size,
    truncate(length) {
      if (length < size) {
        const keep = Math.ceil(length / pageBytes);
        sql.exec(`DELETE FROM ${pages} WHERE n >= ?`, keep);
        const within = length % pageBytes;
        if (within !== 0) {
          const bytes = page(keep - 1);
          if (bytes) {
            bytes.fill(0, within);
            put(keep - 1, bytes);
          }
        }
      }
      setSize(length);
    },
    // Durable when the object's transaction commits: the runtime holds every outgoing message
    // (the response included) until then.
    flush() {},
  };
}

function noSql(cause: unknown): UnsupportedError {
  return new UnsupportedError(
    'IDEMDB_UNSUPPORTED',
    'openDurableObjectStore needs the ctx.storage of a SQLite-backed Durable Object (storage.sql and transactionSync): ' +
      'declare the class in new_sqlite_classes (wrangler migrations) or with enableSql = true (workerd config)',
    { cause },
  );
}

/**
 * @internal The storage and the transaction wrapper of a Durable Object store.
 * @throws UnsupportedError when `storage` has no SQL API; InvalidInputError on a bad option.
 */
export function durableObjectBackend(
  storage: DurableObjectStorageLike,
  options: DurableObjectStoreOptions,
): { host: HostStorage; around: <T>(call: () => T) => T } {
  // In workerd, merely reading `storage.sql` of a class without SQL throws a plain Error.
  let hasSql: boolean;
  let reason: unknown;
  try {
    hasSql = typeof storage?.sql?.exec === 'function' && typeof storage.transactionSync === 'function';
  } catch (error) {
    hasSql = false;
    reason = error;
  }
  if (!hasSql) throw noSql(reason);
  const table = options.table ?? 'idemdb';
  if (!/^[A-Za-z][A-Za-z0-9_]{0,47}$/.test(table)) {
    throw new InvalidInputError('IDEMDB_INVALID_ARGUMENT', `table must be a letter then letters, digits or _ (at most 48), not ${JSON.stringify(table)}`);
  }
  const pageBytes = options.pageBytes;
  if (pageBytes !== undefined && !(Number.isInteger(pageBytes) && pageBytes >= 512 && pageBytes <= 1 << 20 && (pageBytes & (pageBytes - 1)) === 0)) {
    throw new InvalidInputError('IDEMDB_INVALID_ARGUMENT', `pageBytes must be a power of two from 512 to 1 MiB, not ${pageBytes}`);
  }
  const around = <T>(call: () => T): T => storage.transactionSync(call);
  const host = around(() => pageStorage(storage, table, pageBytes));
  return { host, around };
}
