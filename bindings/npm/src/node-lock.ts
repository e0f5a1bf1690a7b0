/**
 * The holder lock every runtime takes on a store file: `<store>.lock` beside the store file's
 * real path. The native engine (the Rust crate, the `idemdb` CLI, the Kotlin/Swift/Python
 * bindings) takes the same file the same way (`crates/store/src/lockfile.rs`), so a store a
 * native process holds is refused here, and the other way round. The protocol
 * (`docs/design.md`, "Locking"):
 *
 * - content, whole before the file appears (written under a temporary name, then hard-linked to
 *   the lock's name, which fails when it exists):
 *   `<pid>\nidemdb-holder 1 runtime=node access=write started=<start time|-> token=<hex>\n`
 *   (`started`: field 22 of `/proc/<pid>/stat` on Linux, so a reused pid is seen);
 * - a holder is gone when its process does not exist, is a zombie, or has another start time
 *   than recorded; otherwise it is live (a reused pid of unknown start time is refused: the
 *   safe side); a file without a pid is live while younger than 5 s;
 * - a live holder refuses the open; a gone one is taken over under a guard file
 *   (`<lock>.takeover`, created exclusively with the taker's content in the lock's format,
 *   removed after): the lock is read again and removed only if it still holds what was judged
 *   gone, then created exclusively like a new one, so two takers of one stale lock never both
 *   win. A guard is waited for while its taker lives; one whose taker is gone (the holder's
 *   rule) or older than 5 s was left by a killed taker and is moved away (removed only if it
 *   still holds what was judged), so a killed taker never blocks the next open;
 * - release removes the file only while it still holds this holder's content.
 */
import * as fs from 'node:fs';
import * as path from 'node:path';
import { randomBytes } from 'node:crypto';

import { StoreBusyError, toIdemdbError } from './errors.js';

/** How long a lock file without a pid, or a take-over guard, counts as live (ms). */
const YOUNG_MS = 5000;

/** One holder as read from a lock file. */
export interface LockHolder {
  pid: number;
  runtime: string;
  access: string;
  started: number | undefined;
}

/** Reads a lock file's content; `undefined` when its first line is not a pid. */
export function parseLock(content: string): LockHolder | undefined {
  const lines = content.split('\n');
  const first = (lines[0] ?? '').trim();
  if (!/^[0-9]+$/.test(first)) return undefined;
  const pid = Number(first);
  if (!Number.isSafeInteger(pid) || pid <= 0) return undefined;
  const holder: LockHolder = { pid, runtime: 'unknown', access: 'write', started: undefined };
  const second = lines[1] ?? '';
  if (second.startsWith('idemdb-holder ')) {
    for (const field of second.split(/\s+/)) {
      const [name, value] = [field.slice(0, field.indexOf('=')), field.slice(field.indexOf('=') + 1)];
      if (name === 'runtime') holder.runtime = value;
      else if (name === 'access') holder.access = value;
      else if (name === 'started' && /^[0-9]+$/.test(value)) holder.started = Number(value);
    }
  }
  return holder;
}

/** The state letter and start time (field 22) of `/proc/<pid>/stat`; `undefined` without one. */
function procStat(pid: number | 'self'): { state: string; started: number | undefined } | undefined | 'missing' {
  let stat: string;
  try {
    stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === 'ENOENT' ? 'missing' : undefined;
  }
  const rest = stat.slice(stat.lastIndexOf(')') + 1).trim().split(/\s+/);
  const started = rest[19] !== undefined && /^[0-9]+$/.test(rest[19]) ? Number(rest[19]) : undefined;
  return { state: rest[0] ?? '', started };
}

function startTime(): number | undefined {
  if (process.platform !== 'linux') return undefined;
  const stat = procStat('self');
  return typeof stat === 'object' ? stat.started : undefined;
}

/** Whether the holder's process still runs (see the protocol above). */
export function holderAlive(holder: LockHolder): boolean {
  if (process.platform === 'linux' && fs.existsSync('/proc/self/stat')) {
    const stat = procStat(holder.pid);
    if (stat === 'missing') return false;
    if (stat !== undefined) {
      if (stat.state === 'Z' || stat.state === 'X' || stat.state === 'x') return false;
      return holder.started === undefined || holder.started === stat.started;
    }
  }
  try {
    process.kill(holder.pid, 0);
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/** The lock file of a store file: `<real path>.lock` (the directory's real path for a new file). */
export function lockPathOf(file: string): string {
  let resolved: string;
  try {
    resolved = fs.realpathSync(file);
  } catch {
    try {
      resolved = path.join(fs.realpathSync(path.dirname(file)), path.basename(file));
    } catch {
      resolved = file;
    }
  }
  return `${resolved}.lock`;
}

function ageMs(file: string): number {
  try {
    return Date.now() - fs.statSync(file).mtimeMs;
  } catch {
    return 0;
  }
}

/** Creates `lock` holding `content`, throwing `EEXIST` when it exists. */
function createExclusive(lock: string, content: string, token: string): void {
  const temp = `${lock}.tmp-${token}`;
  fs.writeFileSync(temp, content, { flag: 'wx' });
  try {
    fs.linkSync(temp, lock);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'EEXIST') throw error;
    // No hard links on this file system: created exclusively, then written.
    fs.writeFileSync(lock, content, { flag: 'wx' });
  } finally {
    fs.rmSync(temp, { force: true });
  }
}

/** Sleeps this thread for `ms` (the take-over's waits are sync, like the rest of the open). */
function sleepSync(ms: number): void {
  Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, ms);
}

/**
 * Removes `file` if it still holds `content`: renamed to a name of its own first (one atomic
 * step, so two removers never both take it), then compared; a file that changed in between (a
 * live taker's new guard) is put back under its name.
 */
function removeIfUnchanged(file: string, content: string): void {
  const aside = `${file}.gone-${randomBytes(8).toString('hex')}`;
  try {
    fs.renameSync(file, aside);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ENOENT') return;
    throw error;
  }
  try {
    if (fs.readFileSync(aside, 'utf8') !== content) {
      try {
        fs.linkSync(aside, file); // another taker's guard: back under its name
      } catch {
        // a third taker took the name meanwhile
      }
    }
  } finally {
    fs.rmSync(aside, { force: true });
  }
}

/**
 * Removes the lock if it still holds `stale`, under the take-over guard (`mine` is written
 * into it). A guard whose taker lives is waited for; one whose taker is gone, or older than
 * 5 s, was left by a process killed inside its take-over and is moved away.
 */
function takeOver(lock: string, stale: string, mine: string): void {
  const guard = `${lock}.takeover`;
  // Bounds the wait even where a guard's age cannot be read (a modification time in the future
  // after the clock was set back): a guard waited on this long is stale.
  const waiting = performance.now(); // monotonic
  for (;;) {
    try {
      fs.writeFileSync(guard, mine, { flag: 'wx' });
      break;
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'EEXIST') throw error;
    }
    let left: string;
    try {
      left = fs.readFileSync(guard, 'utf8');
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code === 'ENOENT') continue;
      throw error;
    }
    const taker = parseLock(left);
    const old = ageMs(guard) >= YOUNG_MS || performance.now() - waiting >= YOUNG_MS;
    if (old || (taker !== undefined && !holderAlive(taker))) {
      removeIfUnchanged(guard, left);
    } else {
      sleepSync(1);
    }
  }
  try {
    let now: string | undefined;
    try {
      now = fs.readFileSync(lock, 'utf8');
    } catch {
      now = undefined;
    }
    if (now === stale) fs.rmSync(lock, { force: true });
  } finally {
    fs.rmSync(guard, { force: true });
  }
}

/**
 * Takes the holder lock of `file` for writing; returns its release. Throws `StoreBusyError`
 * (`IDEMDB_STORE_BUSY`) naming the holder's process, its runtime and the lock file while a
 * live process holds it.
 */
export function takeHolderLock(file: string): () => void {
  const lock = lockPathOf(file);
  const token = randomBytes(8).toString('hex');
  const started = startTime();
  const mine = `${process.pid}\nidemdb-holder 1 runtime=node access=write started=${started ?? '-'} token=${token}\n`;
  for (let round = 0; round < 16; round++) {
    try {
      createExclusive(lock, mine, token);
      return () => {
        try {
          if (fs.readFileSync(lock, 'utf8') === mine) fs.rmSync(lock, { force: true });
        } catch {
          // already gone
        }
      };
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'EEXIST') throw toIdemdbError(error);
    }
    let content: string;
    try {
      content = fs.readFileSync(lock, 'utf8');
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code === 'ENOENT') continue;
      throw toIdemdbError(error);
    }
    const holder = parseLock(content);
    if (holder === undefined) {
      if (ageMs(lock) < YOUNG_MS) {
        throw new StoreBusyError('IDEMDB_STORE_BUSY', `${file} is being opened by another process (lock file ${lock}); retry later or open with { wait: true }`);
      }
    } else if (holder.pid === process.pid && holder.runtime === 'node') {
      throw new StoreBusyError(
        'IDEMDB_STORE_BUSY',
        `${file} is already open in this process: share that Store, close it first, or open with { wait: true } (lock file ${lock})`,
      );
    } else if (holderAlive(holder)) {
      throw new StoreBusyError(
        'IDEMDB_STORE_BUSY',
        `${file} is open in process ${holder.pid} (${holder.runtime} runtime); one process at a time (lock file ${lock}): retry later or open with { wait: true }`,
      );
    }
    takeOver(lock, content, mine); // its process is gone
  }
  throw new StoreBusyError('IDEMDB_STORE_BUSY', `could not take ${lock}`);
}
