/**
 * The client retry contract, read from the data generated out of the Rust core
 * (`generated/vocabulary.ts`, from `idemdb_core::classify_answer` and its constants): the Rust
 * client and `idempotentFetch` decide alike. The shared cases (`tests/testdata/answers.json`)
 * run against both.
 */
import {
  ATTENTION_PROBLEMS,
  DEFAULT_PROBLEM_BASE,
  ENGINE_ERROR_CODES,
  RETRIED_STATUSES,
  type AttentionCause,
  type EngineErrorCode,
} from './generated/vocabulary.js';

/** What a client does with one answer: record it as final, send again, or stop for a person. */
export type AnswerClass = { class: 'final' } | { class: 'retry' } | { class: 'needs_attention'; cause: AttentionCause };

const CODES = new Set<string>(ENGINE_ERROR_CODES);
const slug = (code: string) => code.replace(/^IDEMDB_/, '').toLowerCase().replace(/_/g, '-');
const BY_SLUG = new Map<string, EngineErrorCode>(ENGINE_ERROR_CODES.map((code) => [slug(code), code]));

/**
 * The idemdb problem code a problem body names: its `code` member (`IDEMDB_EXPIRED`), or its
 * `type` when that is an idemdb problem type in full — `urn:idemdb:problem:<slug>`, or the
 * service's own `base` followed by the slug. Another service's type that only ends the same way
 * names nothing.
 */
export function problemCode(type: unknown, code: unknown, base?: string): EngineErrorCode | undefined {
  if (typeof code === 'string' && CODES.has(code)) return code as EngineErrorCode;
  if (typeof type !== 'string') return undefined;
  for (const prefix of [DEFAULT_PROBLEM_BASE, base]) {
    if (prefix && type.startsWith(prefix)) {
      const found = BY_SLUG.get(type.slice(prefix.length));
      if (found) return found;
    }
  }
  return undefined;
}

/**
 * The class of an answer. The status decides; a problem code only tells which of idemdb's own
 * answers of that status needs a person: a replayed response is final whatever its status; an
 * idemdb problem that needs a person with the status idemdb answers it with
 * (`needs-reconciliation` 409, `expired` 410, ...) stops; 422 is final; 408, 409, 429 and 5xx
 * are retried; anything else is final (a 400 whose problem type ends in `/unavailable` included).
 */
export function classifyAnswer(status: number, replayed: boolean, problem?: EngineErrorCode): AnswerClass {
  if (replayed) return { class: 'final' };
  if (problem !== undefined) {
    const attention = ATTENTION_PROBLEMS.find((entry) => entry.code === problem && entry.status === status);
    if (attention) return { class: 'needs_attention', cause: attention.cause };
  }
  if (status === 422) return { class: 'final' };
  if (status >= 500 || RETRIED_STATUSES.includes(status)) return { class: 'retry' };
  return { class: 'final' };
}
