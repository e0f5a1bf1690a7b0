/**
 * `idempotentFetch` and the resume helpers: a mutation's intent is stored (key, canonical
 * request, fingerprint) before the request leaves, sent with `Idempotency-Key`, retried
 * safely, and its final response recorded; pending intents are sent again at start-up and
 * when the platform comes back online.
 */
import {
  AbandonedError,
  AbortedError,
  InvalidInputError,
  KeyMismatchError,
  NeedsAttentionError,
  RetriesExhaustedError,
  toIdemdbError,
} from './errors.js';
import { fingerprint } from './store.js';
import { classifyAnswer, problemCode } from './contract.js';
import {
  KEY_HEADER,
  REPLAYED_HEADER,
  RETRY_DEFAULTS,
  STORED_RESPONSE_HEADERS,
  type AttentionCause,
  type KeyForm,
} from './generated/vocabulary.js';
import type { CanonicalOptions, Intent, IntentResponse, Scope, Store } from './store.js';

/** The store methods `idempotentFetch` and the resume helpers use. */
type IntentMethod = 'createIntent' | 'recordAttempt' | 'recordResponse' | 'markNeedsAttention' | 'pendingIntents' | 'getIntent';

/**
 * What `idempotentFetch` needs of a store: a `Store` (synchronous) or a `SharedStore`
 * (asynchronous, any tab) — `Store`'s intent methods, answering at once or with a promise.
 */
export type IntentStore = { readonly isOpen: boolean } & {
  [M in IntentMethod]: (...args: Parameters<Store[M]>) => ReturnType<Store[M]> | Promise<ReturnType<Store[M]>>;
};

/** Retry schedule of `idempotentFetch`. */
export interface RetryOptions {
  /** Attempts per call, the first included (default 5); then the intent stays pending. */
  maxAttempts?: number;
  /**
   * Attempts over the intent's life, counted across resumes (default 20); then the intent
   * needs attention and is not resumed. Only sends that may have reached the server count: a
   * refused connection or a name that did not resolve is not charged after the first of an
   * outage (README, "Budget rules").
   */
  attemptsPerIntent?: number;
  /**
   * How long an intent that has been sent may stay without a final answer, from its creation,
   * in ms (default 7 days, well within a server's 30 days of replays); then it needs attention
   * (`retries_exhausted`) instead of being sent again. A reopened intent is not timed again.
   */
  maxPendingMs?: number;
  /** First backoff delay in ms (default 250); doubles per attempt, with full jitter. */
  baseDelayMs?: number;
  /** Largest delay in ms, also the cap on `Retry-After` (default 30 000). */
  maxDelayMs?: number;
  /** Per-attempt timeout in ms (default 15 000); a timeout is retried like a network error. */
  timeoutMs?: number;
}

/** `RetryOptions.maxPendingMs` by default: 7 days. */
const DEFAULT_MAX_PENDING_MS = 7 * 24 * 3600 * 1000;

/** Options of `idempotentFetch` and `resumePending`. */
export interface IdempotentFetchOptions {
  /** The intent's scope: who (tenant) does what (operation). */
  scope: Scope;
  /** Resume the intent with this key instead of creating a new one. */
  key?: string;
  /**
   * What makes two requests the same intent (pointers start at `/body/...`, `/headers/...`):
   * an excluded field (a trace id) may differ and a normalised one be written another way
   * under one key. It decides only that: the request is stored and sent with every field, as
   * given.
   */
  canonical?: CanonicalOptions;
  retry?: RetryOptions;
  /**
   * Headers added to every send and never stored (credentials, tracing): an object or a function
   * called before each attempt, so a resumed intent gets a fresh token.
   */
  transportHeaders?: Record<string, string> | ((intent: Intent) => Record<string, string> | Promise<Record<string, string>>);
  /** The header carrying the key (default `Idempotency-Key`). */
  headerName?: string;
  /**
   * How the key is written in the header: `'sf-string'` (the default) as the IETF draft's
   * structured-field string, `"<key>"` (what the idemdb HTTP layer requires); `'bare'` as the
   * key alone, for servers that take the header as an opaque token (Stripe's API does).
   */
  keyFormat?: KeyForm;
  /**
   * The base of the service's problem types when it is not idemdb's own
   * `urn:idemdb:problem:` (`IdempotencyLayer::problem_types` on the server), such as
   * `'https://api.example.com/problems/'`: a problem type is read as idemdb's only in full, so
   * another service's type that merely ends in `/expired` is not taken for one.
   */
  problemBase?: string;
  /** The fetch to use (default `globalThis.fetch`). */
  fetch?: typeof fetch;
  /**
   * Stops retrying; the intent stays pending. Already aborted when `idempotentFetch` is
   * called: nothing is stored and nothing is sent.
   */
  signal?: AbortSignal;
  /**
   * The base a stored path (`/v1/payments`) is resolved against at each send, resumed intents
   * included (default `location.href` where there is one). Absolute URLs are sent as stored.
   */
  baseUrl?: string | URL;
  /**
   * The request headers an intent stores (default `STORED_HEADERS`). Every other header of
   * `init.headers` goes with this call's attempts only and is never written to the store;
   * credentials for resumed sends come from `transportHeaders`.
   */
  storedHeaders?: readonly string[];
  /**
   * The response headers stored with a recorded answer (default `STORED_RESPONSE_HEADERS`:
   * `content-type`, `content-language`, `etag`, `last-modified`, `location`, `retry-after`,
   * `idempotent-replayed`). Every other header of an answer is never written to the store; a
   * stored `location` loses its query and fragment.
   */
  storedResponseHeaders?: readonly string[];
  /** Called when an intent comes to need attention (before the `NeedsAttentionError`). */
  onNeedsAttention?: (intent: Intent) => void;
}

/**
 * The request headers an intent stores by default: those that say what the request means.
 * Every other header — credentials, cookies, API keys, tracing — is never written to the store.
 */
export const STORED_HEADERS: readonly string[] = Object.freeze([
  'content-type', 'content-language', 'accept', 'accept-language', 'if-match', 'if-none-match', 'prefer',
]);

/** The stored request descriptor (the intent's request is this, in canonical JSON, every field kept). */
interface Descriptor {
  method: string;
  url: string;
  headers: Record<string, string>;
  body?: unknown;
  bodyText?: string;
}

const decoder = new TextDecoder();

function isAbsolute(url: string): boolean {
  try {
    new URL(url);
    return true;
  } catch {
    return false;
  }
}

/** A base for parsing a path only: the stored descriptor keeps the path as given. */
const PATH_ONLY = 'http://path.invalid';

/** The descriptor to store, and the headers left out of it (sent with this call's attempts only). */
async function describe(
  input: Request | string | URL,
  init: RequestInit | undefined,
  stored: readonly string[],
): Promise<{ descriptor: Descriptor; transport: Record<string, string> }> {
  const path = typeof input === 'string' && !isAbsolute(input) ? input : undefined;
  const request = new Request(path === undefined ? input : new URL(path, PATH_ONLY), init);
  const headers: Record<string, string> = {};
  const transport: Record<string, string> = {};
  const allowed = new Set(stored.map((name) => name.toLowerCase()));
  request.headers.forEach((value, name) => {
    if (allowed.has(name.toLowerCase())) headers[name.toLowerCase()] = value;
    else transport[name] = value;
  });
  const descriptor: Descriptor = { method: request.method.toUpperCase(), url: path ?? request.url, headers };
  if (request.body !== null) {
    const text = await request.text();
    const type = headers['content-type'] ?? request.headers.get('content-type') ?? '';
    if (/[/+]json\b/i.test(type)) {
      try {
        descriptor.body = JSON.parse(text);
        return { descriptor, transport };
      } catch {
        // not JSON after all: keep the text
      }
    }
    descriptor.bodyText = text;
  }
  return { descriptor, transport };
}

/**
 * The URL of one send: a stored path resolved against the base given now (`baseUrl`, else the
 * page's `location`). `idempotentFetch` calls it before storing, so an intent that could never
 * be sent is refused, not stored.
 */
function target(url: string, base: string | URL | undefined): string {
  if (base !== undefined && !(base instanceof URL) && !isAbsolute(String(base))) {
    throw new InvalidInputError('IDEMDB_INVALID_ARGUMENT', `baseUrl ${String(base)} is not an absolute URL`);
  }
  if (isAbsolute(url)) return url;
  const origin = base ?? (globalThis as { location?: { href?: string } }).location?.href;
  if (origin === undefined) {
    throw new InvalidInputError(
      'IDEMDB_INVALID_REQUEST',
      `the URL ${url} is a path and there is no base to resolve it against (no baseUrl, no location): pass baseUrl`,
    );
  }
  return new URL(url, origin).href;
}

function rebuild(intent: Intent): Descriptor {
  return JSON.parse(decoder.decode(intent.request)) as Descriptor;
}

function responseOf(response: IntentResponse): Response {
  const { status, headers, body } = response;
  const nullBody = status === 204 || status === 205 || status === 304;
  return new Response(nullBody ? null : (body as Uint8Array<ArrayBuffer>), { status, headers });
}

function retryAfterMs(response: Response, cap: number): number | undefined {
  const value = response.headers.get('retry-after');
  if (!value) return undefined;
  const seconds = Number(value);
  if (Number.isFinite(seconds) && seconds >= 0) return Math.min(seconds * 1000, cap);
  const date = Date.parse(value);
  if (!Number.isNaN(date)) return Math.min(Math.max(0, date - Date.now()), cap);
  return undefined;
}

function backoffMs(attempt: number, retry: Required<RetryOptions>): number {
  // The core's full-jitter backoff (`idemdb_core::backoff_delay`).
  const ceiling = Math.min(retry.maxDelayMs, retry.baseDelayMs * 2 ** Math.max(0, attempt - 1));
  return Math.random() * ceiling; // full jitter
}

function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(new AbortedError('IDEMDB_ABORTED', 'aborted; the intent stays pending'));
    const timer = setTimeout(() => {
      signal?.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    const onAbort = () => {
      clearTimeout(timer);
      reject(new AbortedError('IDEMDB_ABORTED', 'aborted; the intent stays pending'));
    };
    signal?.addEventListener('abort', onAbort, { once: true });
  });
}

/**
 * The header value carrying `key`. Keys are visible ASCII (the engine refuses others), a subset
 * of the sf-string alphabet, so the string form only escapes `"` and `\\`.
 */
function keyHeaderValue(key: string, format: KeyForm = 'sf-string'): string {
  if (format === 'bare') return key;
  return `"${key.replace(/["\\]/g, (c) => `\\${c}`)}"`;
}

/**
 * The headers of an answer stored with it: the `allowed` names only (an allow-list: a header a
 * server adds, such as `authorization` or `x-api-key`, is never written to the store), and a
 * `location` without its query and fragment (a token there never reaches the store).
 */
function keptHeaders(response: Response, allowed: readonly string[]): [string, string][] {
  const kept: [string, string][] = [];
  response.headers.forEach((value, name) => {
    if (kept.length < 64 && allowed.includes(name)) {
      kept.push([name, name === 'location' ? value.split(/[?#]/)[0] : value]);
    }
  });
  return kept;
}

/**
 * Sends a stored intent until it gets a final response, following the core's retry contract
 * (`classifyAnswer`): the same key on every attempt; a replayed response and any stored
 * 2xx/3xx/4xx are final; a problem that needs a person (`needs-reconciliation`, `expired`,
 * ...) or a spent attempt budget puts it in `needs_attention` (`NeedsAttentionError`);
 * network errors, timeouts, 5xx, 408, 409 and 429 are retried with exponential backoff and
 * full jitter, honouring `Retry-After`; 422 is a conflict, recorded and never retried.
 */
export async function sendIntent(store: IntentStore, intent: Intent, options: SendOptions = {}): Promise<Response> {
  return (await deliver(store, intent, options)).response;
}

/** Options of `sendIntent`: those of `idempotentFetch` that do not make the intent. */
type SendOptions = Omit<IdempotentFetchOptions, 'scope' | 'key' | 'canonical' | 'storedHeaders'>;

/**
 * Error codes that prove a send never reached the server: the connection was refused or never
 * made, the name did not resolve, no route (Node's `fetch` puts them on the error's `cause`). A
 * browser's `fetch` says nothing of the kind; there, only a platform that says it is offline
 * (`navigator.onLine === false`) proves it, and then nothing is sent at all.
 */
const UNREACHED_CODES = new Set(['ECONNREFUSED', 'ENOTFOUND', 'EAI_AGAIN', 'ENETUNREACH', 'EHOSTUNREACH', 'EADDRNOTAVAIL', 'UND_ERR_CONNECT_TIMEOUT']);

/** Whether `error`, a failed fetch, proves that the request never reached the server. */
function neverReached(error: unknown): boolean {
  for (let depth = 0, e = error; e && depth < 4; depth++, e = (e as { cause?: unknown }).cause) {
    const { code, errors } = e as { code?: unknown; errors?: unknown };
    if (typeof code === 'string' && UNREACHED_CODES.has(code)) return true;
    // Several addresses tried (IPv6, then IPv4): unreached only if none was reached.
    if (Array.isArray(errors) && errors.length > 0 && errors.every(neverReached)) return true;
  }
  return false;
}

/** Whether the platform says it has no network (browsers; `undefined` elsewhere). */
function offline(): boolean {
  return (globalThis as { navigator?: { onLine?: boolean } }).navigator?.onLine === false;
}

/**
 * Per store, the intents whose last send provably never reached the server (`neverReached`,
 * `offline`). Their next send is recorded only once it is known to have reached the server
 * (answered, or failed after connecting), not before it leaves: refused again it leaves no trace
 * and charges nothing. So an outage charges its first refused send only. Kept in memory: after a restart the
 * first send of an outage is charged again; a crash in the middle of such a send leaves it
 * uncounted (the key, not the count, keeps it from running twice).
 */
const unreachedByStore = new WeakMap<IntentStore, Set<string>>();

function unreached(store: IntentStore): Set<string> {
  let set = unreachedByStore.get(store);
  if (!set) unreachedByStore.set(store, (set = new Set()));
  return set;
}

function intentId(intent: Pick<Intent, 'tenant' | 'operation' | 'key'>): string {
  return JSON.stringify([intent.tenant, intent.operation, intent.key]);
}

/** Whether `error` is the store refusing an answer over its limit (the operation's `maxResultBytes`). */
function tooLarge(error: unknown): boolean {
  return (error as { code?: unknown } | null)?.code === 'IDEMDB_TOO_LARGE';
}

/** The answer as it can be stored when its body cannot: status and headers. */
function withoutBody(answer: IntentResponse): IntentResponse {
  return { ...answer, body: new Uint8Array() };
}

/** The retry schedule of `options`, defaults filled in. */
function retrySchedule(options: SendOptions): Required<RetryOptions> {
  return {
    maxAttempts: options.retry?.maxAttempts ?? RETRY_DEFAULTS.attemptsPerCall,
    attemptsPerIntent: options.retry?.attemptsPerIntent ?? RETRY_DEFAULTS.attemptsPerIntent,
    maxPendingMs: options.retry?.maxPendingMs ?? DEFAULT_MAX_PENDING_MS,
    baseDelayMs: options.retry?.baseDelayMs ?? RETRY_DEFAULTS.baseDelayMs,
    maxDelayMs: options.retry?.maxDelayMs ?? RETRY_DEFAULTS.maxDelayMs,
    timeoutMs: options.retry?.timeoutMs ?? RETRY_DEFAULTS.timeoutMs,
  };
}

/**
 * Whether the intent's time is spent: it has been sent, is still without a final answer
 * `maxPendingMs` after its creation, and was never reopened (a reopened one got a new budget).
 */
function pendingTooLong(intent: Intent, retry: Required<RetryOptions>): boolean {
  return intent.attempts > 0 && (intent.budgetStart ?? 0) === 0 && Date.now() - intent.createdAt >= retry.maxPendingMs;
}

/**
 * `sendIntent`, answering with the intent as finally recorded too. `premarked`: the store
 * recorded the first send's marker with the intent (`createIntent(…, { sending: true })`), so
 * the first attempt does not write it again.
 */
async function deliver(
  store: IntentStore,
  intent: Intent,
  options: SendOptions,
  extra: Record<string, string> = {},
  premarked = false,
): Promise<{ response: Response; intent: Intent }> {
  const scope = { tenant: intent.tenant, operation: intent.operation };
  const retry = retrySchedule(options);
  const id = intentId(intent);
  const gone = unreached(store);
  let lastAnswer: IntentResponse | null = null;
  const budgetUsed = (i: Intent) => i.attempts - (i.budgetStart ?? 0);
  const doFetch = options.fetch ?? globalThis.fetch.bind(globalThis);
  const headerName = options.headerName ?? KEY_HEADER;
  let lastStatus: number | undefined;
  let lastError: unknown;
  let why = '';
  // Another sender (a second tab, an overlapping resume) may finish the intent while this one
  // runs: the store then refuses our update, and we answer with what it recorded.
  const record = async (update: () => Intent | Promise<Intent>): Promise<Intent> => {
    try {
      return await update();
    } catch (error) {
      if ((error as { code?: string })?.code !== 'IDEMDB_INTENT_FINISHED') throw error;
      const stored = await store.getIntent(scope, intent.key);
      if (!stored) throw error;
      return stored;
    }
  };
  const attention = async (cause: AttentionCause, answer: IntentResponse | null) => {
    const before = intent;
    const mark = (kept: IntentResponse | null) => record(() => store.markNeedsAttention(scope, before.key, cause, kept));
    let after: Intent;
    try {
      after = await mark(answer);
    } catch (error) {
      // An answer too large to keep must not keep the intent from needing attention.
      if (answer === null || !tooLarge(error)) throw error;
      after = await mark(withoutBody(answer));
    }
    if (before.state === 'pending' && after.state === 'needs_attention') options.onNeedsAttention?.(after);
    return after;
  };
  for (let attempt = 1; ; attempt++) {
    if (intent.state === 'completed') {
      gone.delete(id);
      const replayed = intent.response.headers.some(([name, value]) => name === REPLAYED_HEADER && value === 'true');
      if (intent.response.status === 422 && !replayed) {
        throw new KeyMismatchError('IDEMDB_KEY_MISMATCH', `the server refused key ${intent.key} as bound to a different request (422)`, {
          response: responseOf(intent.response),
        });
      }
      return { response: responseOf(intent.response), intent };
    }
    if (intent.state === 'abandoned') throw new AbandonedError(`intent ${intent.key} was abandoned: ${intent.reason}`, intent.reason);
    if (intent.state === 'needs_attention') {
      gone.delete(id);
      throw new NeedsAttentionError(
        `intent ${intent.key} needs attention (${intent.cause})${why}; it is not sent again until reopened or abandoned`,
        intent.key,
        intent.cause,
        intent.response ? responseOf(intent.response) : undefined,
      );
    }
    if (options.signal?.aborted) throw new AbortedError('IDEMDB_ABORTED', 'aborted; the intent stays pending');
    // The budgets are checked as before the first send: its marker, written with the intent,
    // is that send's, not an earlier one's.
    const ahead = premarked && attempt === 1 ? 1 : 0;
    if (budgetUsed(intent) - ahead >= retry.attemptsPerIntent) {
      intent = await attention('retries_exhausted', lastAnswer);
      continue;
    }
    if (pendingTooLong({ ...intent, attempts: intent.attempts - ahead }, retry)) {
      why = `: pending for more than retry.maxPendingMs (${retry.maxPendingMs} ms) since it was created`;
      intent = await attention('retries_exhausted', lastAnswer);
      continue;
    }
    if (attempt > retry.maxAttempts) {
      throw new RetriesExhaustedError(
        `no final response for intent ${intent.key} after ${retry.maxAttempts} attempts; it stays pending and is resumed later`,
        intent.key,
        lastStatus,
        { cause: lastError },
      );
    }

    const descriptor = rebuild(intent);
    const url = target(descriptor.url, options.baseUrl);
    const headers = new Headers(descriptor.headers);
    for (const [name, value] of Object.entries(extra)) headers.set(name, value);
    const transport = typeof options.transportHeaders === 'function' ? await options.transportHeaders(intent) : options.transportHeaders;
    for (const [name, value] of Object.entries(transport ?? {})) headers.set(name, value);
    headers.set(headerName, keyHeaderValue(intent.key, options.keyFormat ?? 'sf-string'));
    const body = descriptor.body !== undefined ? JSON.stringify(descriptor.body) : descriptor.bodyText;

    // Durable before the request leaves: a crash mid-send is seen as an attempt at start-up.
    // Not while the platform is offline (nothing is sent), nor after a send that never reached
    // the server (`unreached`).
    const isOffline = offline();
    const withIntent = premarked && attempt === 1; // written with the intent, one flush for both
    const markedFirst = withIntent || (!isOffline && !gone.has(id));
    if (markedFirst && !withIntent) {
      intent = await record(() => store.recordAttempt(scope, intent.key, { outcome: 'sent' }));
      if (intent.state !== 'pending') continue;
    }
    // An abort that came while the marker was written: the request has not left.
    if (options.signal?.aborted) throw new AbortedError('IDEMDB_ABORTED', 'aborted before the request left; the intent stays pending');
    let response: Response | undefined;
    let timedOut = false;
    if (isOffline) {
      lastError = new Error('the platform is offline (navigator.onLine is false): nothing was sent');
    } else {
      const timeout = new AbortController();
      const timer = setTimeout(() => timeout.abort(), retry.timeoutMs);
      const onAbort = () => timeout.abort();
      options.signal?.addEventListener('abort', onAbort, { once: true });
      try {
        response = await doFetch(url, { method: descriptor.method, headers, body, signal: timeout.signal });
      } catch (error) {
        lastError = error;
      } finally {
        clearTimeout(timer);
        options.signal?.removeEventListener('abort', onAbort);
      }
      timedOut = timeout.signal.aborted;
    }

    if (response === undefined) {
      if (options.signal?.aborted) throw new AbortedError('IDEMDB_ABORTED', 'aborted; the intent stays pending', { cause: lastError });
      if (isOffline || (!timedOut && neverReached(lastError))) {
        // Not at the server: not charged. The first send of an outage closes its marker.
        if (markedFirst) intent = await record(() => store.recordAttempt(scope, intent.key, { outcome: 'network_error' }));
        gone.add(id);
        if (intent.state !== 'pending') continue;
        await sleep(backoffMs(attempt, retry), options.signal);
        continue;
      }
      gone.delete(id); // it may have reached the server: charged (an outcome alone counts as a send)
      intent = await record(() => store.recordAttempt(scope, intent.key, { outcome: timedOut ? 'timeout' : 'network_error' }));
      if (intent.state !== 'pending') continue;
      await sleep(backoffMs(budgetUsed(intent), retry), options.signal);
      continue;
    }
    if (!markedFirst) {
      // It reached the server after an unreached one: recorded (and charged) now that it did.
      gone.delete(id);
      intent = await record(() => store.recordAttempt(scope, intent.key, { outcome: 'sent' }));
      if (intent.state !== 'pending') continue;
    }
    lastStatus = response.status;
    const wait = retryAfterMs(response, retry.maxDelayMs) ?? backoffMs(budgetUsed(intent), retry);
    let bytes: Uint8Array<ArrayBuffer>;
    try {
      bytes = new Uint8Array(await response.arrayBuffer());
    } catch (error) {
      // The body was lost in transit: the server has answered, but we did not hear all of it.
      lastError = error;
      intent = await record(() => store.recordAttempt(scope, intent.key, { outcome: 'network_error' }));
      if (intent.state !== 'pending') continue;
      await sleep(backoffMs(budgetUsed(intent), retry), options.signal);
      continue;
    }
    const answer: IntentResponse = { status: response.status, headers: keptHeaders(response, (options.storedResponseHeaders ?? STORED_RESPONSE_HEADERS).map((name) => name.toLowerCase())), body: bytes };
    const verdict = classify(response, bytes, options.problemBase);
    if (verdict.class === 'retry') {
      const status = response.status;
      intent = await record(() => store.recordAttempt(scope, intent.key, { outcome: 'status', status }));
      lastAnswer = answer;
      if (intent.state !== 'pending') continue;
      await sleep(wait, options.signal);
    } else if (verdict.class === 'needs_attention') {
      intent = await attention(verdict.cause, answer);
    } else {
      try {
        intent = await record(() => store.recordResponse(scope, intent.key, answer));
      } catch (error) {
        if (!tooLarge(error)) throw error;
        intent = await attention('answer_too_large', answer);
        if (intent.state !== 'needs_attention') continue;
        // Sending again would only bring the same answer: the caller gets it whole, now.
        throw new NeedsAttentionError(
          `intent ${intent.key} got its final answer (${answer.status}, ${bytes.length} bytes), too large to store (${(error as Error).message}): ` +
            "it needs attention (its status and headers are kept) and is not sent again; raise the operation's maxResultBytes policy for such answers",
          intent.key,
          'answer_too_large',
          responseOf(answer),
        );
      }
    }
  }
}

/** The contract's class of an answer: replayed or not, and the problem its body names. */
function classify(response: Response, body: Uint8Array, problemBase: string | undefined) {
  const replayed = response.headers.get(REPLAYED_HEADER) === 'true';
  let problem;
  if ((response.headers.get('content-type') ?? '').startsWith('application/problem+json')) {
    try {
      const parsed = JSON.parse(decoder.decode(body)) as { type?: unknown; code?: unknown };
      problem = problemCode(parsed?.type, parsed?.code, problemBase);
    } catch {
      // not a readable problem: the status decides
    }
  }
  return classifyAnswer(response.status, replayed, problem);
}

/**
 * `fetch` that cannot run the same mutation twice: persists the intent (key, canonical
 * request, fingerprint) **before the request leaves**, sets `Idempotency-Key`, retries
 * safely, records the final response and returns it. Throws `KeyMismatchError` on 422,
 * `NeedsAttentionError` when the answer needs a person (the intent is not resumed),
 * `RetriesExhaustedError` when this call's attempts failed (the intent stays pending: call
 * `resumePending` later, or `autoResume`), `AbortedError` for an aborted signal (nothing is
 * stored when it was aborted before the call). `onStored` is called with the intent (its key
 * included) once it is durable, before the first send.
 */
export async function idempotentFetch(
  store: IntentStore,
  input: Request | string | URL,
  options: IdempotentFetchOptions & { init?: RequestInit; onStored?: (intent: Intent) => void },
): Promise<Response> {
  if (!options?.scope) throw new InvalidInputError('IDEMDB_INVALID_ARGUMENT', 'idempotentFetch needs options.scope');
  if (options.signal?.aborted) throw new AbortedError('IDEMDB_ABORTED', 'aborted before the intent was stored; nothing was stored or sent');
  let intent: Intent;
  let transport: Record<string, string>;
  try {
    const described = await describe(input, options.init, options.storedHeaders ?? STORED_HEADERS);
    transport = described.transport;
    target(described.descriptor.url, options.baseUrl); // a request that cannot be sent is not stored
    // About to send at once (online, not an intent whose last send never arrived): the store
    // records the first send's marker with the intent, one commit and one flush for both.
    const sending =
      !offline() && !(options.key !== undefined && unreached(store).has(intentId({ ...options.scope, key: options.key })));
    intent = await storeIntent(store, options.scope, described.descriptor, options.key, options.canonical, sending);
  } catch (error) {
    throw toIdemdbError(error);
  }
  // The intent is durable: tell the app (its key included) before anything is sent.
  options.onStored?.(intent);
  // A store that took `sending` shows the marker; one that did not gets it from `deliver`.
  const premarked = intent.state === 'pending' && intent.lastAttempt?.outcome === 'sent';
  return (await deliver(store, intent, options, transport, premarked)).response;
}

/**
 * Stores the intent with the request as it is sent, every field included: `canonical` decides
 * only whether an intent already stored under `key` is the same request (a field it excludes,
 * such as a trace id, may differ; a field it normalises may be written another way). The
 * store's own size limit (`canonical.maxBodyBytes`) still applies.
 */
async function storeIntent(
  store: IntentStore,
  scope: Scope,
  descriptor: Descriptor,
  key: string | undefined,
  canonical: CanonicalOptions | undefined,
  sending: boolean,
): Promise<Intent> {
  const limit = canonical?.maxBodyBytes === undefined ? undefined : { maxBodyBytes: canonical.maxBodyBytes };
  try {
    return await store.createIntent(scope, descriptor, { key, canonical: limit, sending });
  } catch (error) {
    if (key === undefined || canonical === undefined || toIdemdbError(error).code !== 'IDEMDB_KEY_MISMATCH') throw error;
    const stored = await store.getIntent(scope, key);
    if (!stored || fingerprint(stored.request, canonical) !== fingerprint(descriptor, canonical)) throw error;
    return stored;
  }
}

/**
 * The outcome of resuming one intent: `intent` as recorded after the sends (completed, or
 * still pending with its attempts counted), with the final response or the error.
 */
export type Resumed = { intent: Intent; response: Response } | { intent: Intent; error: Error };

/** Sends every pending intent again, oldest first, with its own key; one at a time. */
export async function resumePending(
  store: IntentStore,
  options: SendOptions & { filter?: (intent: Intent) => boolean } = {},
): Promise<Resumed[]> {
  const results: Resumed[] = [];
  for (const intent of await store.pendingIntents()) {
    if (options.filter && !options.filter(intent)) continue;
    try {
      results.push(await deliver(store, intent, options));
    } catch (error) {
      let latest: Intent | null = null;
      try {
        latest = await store.getIntent({ tenant: intent.tenant, operation: intent.operation }, intent.key);
      } catch {
        // the store itself failed (closed, storage): report the intent as it was
      }
      results.push({ intent: latest ?? intent, error: error as Error });
      if (error instanceof AbortedError) break;
    }
  }
  return results;
}

/** Options of `autoResume`. */
export interface AutoResumeOptions extends NonNullable<Parameters<typeof resumePending>[1]> {
  /** Called after every resume pass. */
  onResumed?: (results: Resumed[]) => void;
  /**
   * How often to check `navigator.onLine` for an offline → online change, in ms (default 1000;
   * 0 turns it off). Some environments (workers under network emulation, some WebViews) change
   * `navigator.onLine` without firing `online`.
   */
  onlinePollMs?: number;
  /** Also resume every this many ms while intents are pending (default 60 000; 0 turns it off). */
  retryEveryMs?: number;
}

/**
 * Resumes pending intents now, every time the platform comes back online (the `online` event
 * of the window or worker, or `navigator.onLine` turning true), periodically while some
 * are pending, and, while the server cannot be reached (a pass left an intent whose sends never
 * reached it), again after a backoff that doubles from `retry.baseDelayMs` to
 * `retry.maxDelayMs`: the intent goes out soon after the network or the server is back, and
 * those passes charge no attempts. Stops when `options.signal` aborts (it also stops the sends
 * under way); the returned function stops it too.
 */
export function autoResume(store: IntentStore, options: AutoResumeOptions = {}): () => void {
  let running: Promise<void> | undefined;
  let again = false;
  let stopped = false;
  const retry = retrySchedule(options);
  let outagePasses = 0;
  let outageTimer: ReturnType<typeof setTimeout> | undefined;
  /** After a pass: while an intent waits for an unreachable server, another pass after a backoff. */
  const backOff = (results: Resumed[]) => {
    const gone = unreached(store);
    if (!results.some(({ intent }) => intent.state === 'pending' && gone.has(intentId(intent)))) {
      outagePasses = 0;
      return;
    }
    outagePasses += 1;
    clearTimeout(outageTimer);
    outageTimer = setTimeout(run, Math.min(retry.maxDelayMs, retry.baseDelayMs * 2 ** Math.min(outagePasses - 1, 30)));
  };
  const run = () => {
    if (stopped || !store.isOpen) return;
    if (running) {
      again = true;
      return;
    }
    running = resumePending(store, options)
      .then((results) => {
        backOff(results);
        options.onResumed?.(results);
      })
      .catch(() => undefined)
      .finally(() => {
        running = undefined;
        if (again) {
          again = false;
          run();
        }
      });
  };
  const scope = globalThis as unknown as {
    addEventListener?: (type: string, listener: () => void) => void;
    removeEventListener?: (type: string, listener: () => void) => void;
    navigator?: { onLine?: boolean };
  };
  scope.addEventListener?.('online', run);
  const timers: ReturnType<typeof setInterval>[] = [];
  const pollMs = options.onlinePollMs ?? 1000;
  if (pollMs > 0 && typeof scope.navigator?.onLine === 'boolean') {
    let online = scope.navigator.onLine;
    timers.push(
      setInterval(() => {
        const now = scope.navigator?.onLine !== false;
        if (now && !online) run();
        online = now;
      }, pollMs),
    );
  }
  const retryEveryMs = options.retryEveryMs ?? 60_000;
  if (retryEveryMs > 0) {
    timers.push(
      setInterval(() => {
        if (store.isOpen && scope.navigator?.onLine !== false) {
          Promise.resolve(store.pendingIntents()).then((pending) => pending.length > 0 && run(), () => undefined);
        }
      }, retryEveryMs),
    );
  }
  const stop = () => {
    stopped = true;
    scope.removeEventListener?.('online', run);
    for (const timer of timers) clearInterval(timer);
    clearTimeout(outageTimer);
  };
  if (options.signal?.aborted) {
    stop();
    return stop;
  }
  options.signal?.addEventListener('abort', stop, { once: true });
  run();
  return stop;
}
