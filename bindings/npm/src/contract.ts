/**
 * The client retry contract, read from the data generated out of the Rust core
 * (`generated/vocabulary.ts`, from `idemdb_core::classify_answer` and its constants): the Rust
 * client and `idempotentFetch` decide alike. The shared cases (`tests/testdata/answers.json`)
 * run against both.
 */
import {
  ATTENTION_PROBLEMS,
  ENGINE_ERROR_CODES,
  RETRIED_PROBLEMS,
  RETRIED_STATUSES,
  type AttentionCause,
  type EngineErrorCode,
} from './generated/vocabulary.js';

/** What a client does with one answer: record it as final, send again, or stop for a person. */
export type AnswerClass = { class: 'final' } | { class: 'retry' } | { class: 'needs_attention'; cause: AttentionCause };

const CODES = new Set<string>(ENGINE_ERROR_CODES);
const slug = (code: string) => code.replace(/^IDEMDB_/, '').toLowerCase().replace(/_/g, '-');
const BY_SLUG = new Map<string, EngineErrorCode>(ENGINE_ERROR_CODES.map((code) => [slug(code), code]));

/** The code a problem body names: its `code` member, or the slug ending its `type` URI. */
export function problemCode(type: unknown, code: unknown): EngineErrorCode | undefined {
  if (typeof code === 'string' && CODES.has(code)) return code as EngineErrorCode;
  if (typeof type !== 'string') return undefined;
  return BY_SLUG.get(type.split(/[:/]/).pop() ?? '');
}

/**
 * The class of an answer: a replayed response is final whatever its status; a problem that
 * needs a person (`needs-reconciliation`, `expired`, ...) stops; a problem that says a retry may
 * help is retried; 422 is final; 408, 409, 429 and 5xx are retried; anything else is final.
 */
export function classifyAnswer(status: number, replayed: boolean, problem?: EngineErrorCode): AnswerClass {
  if (replayed) return { class: 'final' };
  if (problem !== undefined) {
    const cause = ATTENTION_PROBLEMS[problem];
    if (cause) return { class: 'needs_attention', cause };
    if (RETRIED_PROBLEMS.includes(problem)) return { class: 'retry' };
  }
  if (status === 422) return { class: 'final' };
  if (status >= 500 || RETRIED_STATUSES.includes(status)) return { class: 'retry' };
  return { class: 'final' };
}
