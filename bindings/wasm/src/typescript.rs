//! The TypeScript twin of the core's vocabularies, generated from Rust.
//!
//! `bindings/npm/src/generated/vocabulary.ts` holds a string-literal union (and the list of
//! values) for every vocabulary that crosses the JS boundary: error codes, reservation
//! answers, record states, outcomes, causes, failures, resolutions, intent states, attempt
//! outcomes, expired-lease rules, normalisers, durability. The npm package imports its types
//! from there and never spells a name again. The test below fails when the file is not
//! exactly what the Rust vocabularies produce — a Rust code without its TypeScript twin, or
//! a stale name; `IDEMDB_BLESS=1 cargo test -p idemdb-wasm --lib` rewrites it.

#[cfg(test)]
mod tests {
    use std::fmt::Write;

    use idemdb::{
        ATTENTION_PROBLEMS, DEFAULT_ATTEMPT_TIMEOUT, DEFAULT_ATTEMPTS_PER_CALL, DEFAULT_ATTEMPTS_PER_INTENT,
        DEFAULT_BASE_DELAY, DEFAULT_MAX_DELAY, DEFAULT_PROBLEM_BASE, KEY_HEADER, KeyForm, REPLAYED_HEADER,
        RETRIED_STATUSES, STORED_RESPONSE_HEADERS,
    };
    use idemdb::{
        AttemptOutcomeKind, AttentionCause, Durability, ErrorCode, ExpiredLease, FailureKind, IntentStateKind, Named,
        Normaliser, OutcomeClass, ReservationKind, ResolutionKind, StateKind, UncertainCause,
    };

    const PATH: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../npm/src/generated/vocabulary.ts");

    /// `export type Name = 'a' | 'b';` and `export const NAMES = ['a', 'b'] as const;`.
    fn vocabulary<T: Named>(out: &mut String, type_name: &str, const_name: &str, doc: &str) {
        let names: Vec<String> = T::ALL.iter().map(|value| format!("'{}'", value.as_str())).collect();
        let _ = writeln!(out, "\n/** {doc} */");
        let _ = writeln!(out, "export const {const_name} = [\n  {},\n] as const;", names.join(",\n  "));
        let _ = writeln!(out, "/** {doc} */");
        let _ = writeln!(out, "export type {type_name} = (typeof {const_name})[number];");
    }

    fn render() -> String {
        let mut out = String::from(
            "/**\n * Generated from the Rust vocabularies of idemdb (bindings/wasm/src/typescript.rs); do not edit.\n \
             * Regenerate with `IDEMDB_BLESS=1 cargo test -p idemdb-wasm --lib`.\n */\n",
        );
        vocabulary::<ErrorCode>(&mut out, "EngineErrorCode", "ENGINE_ERROR_CODES", "Every stable error code.");
        vocabulary::<ReservationKind>(
            &mut out,
            "ReservationStatus",
            "RESERVATION_STATUSES",
            "What a reservation answers.",
        );
        vocabulary::<StateKind>(&mut out, "RecordState", "RECORD_STATES", "Where a record is in its life.");
        vocabulary::<OutcomeClass>(&mut out, "Outcome", "OUTCOMES", "The final outcome a record reached.");
        vocabulary::<UncertainCause>(&mut out, "UncertainCause", "UNCERTAIN_CAUSES", "Why a record is uncertain.");
        vocabulary::<FailureKind>(&mut out, "FailureKind", "FAILURE_KINDS", "How an attempt failed.");
        vocabulary::<ResolutionKind>(
            &mut out,
            "ResolutionKind",
            "RESOLUTION_KINDS",
            "How an uncertain record is resolved.",
        );
        vocabulary::<IntentStateKind>(
            &mut out,
            "IntentState",
            "INTENT_STATES",
            "Where a client intent is in its life.",
        );
        vocabulary::<AttemptOutcomeKind>(
            &mut out,
            "AttemptOutcomeKind",
            "ATTEMPT_OUTCOMES",
            "What one attempt to send an intent ended with.",
        );
        vocabulary::<ExpiredLease>(
            &mut out,
            "ExpiredLeaseRule",
            "EXPIRED_LEASE_RULES",
            "What a retry that finds an expired lease means.",
        );
        vocabulary::<Normaliser>(
            &mut out,
            "NormaliserName",
            "NORMALISERS",
            "Rewrites applied to request values before hashing.",
        );
        vocabulary::<Durability>(
            &mut out,
            "Durability",
            "DURABILITIES",
            "How durable a commit is when the call returns.",
        );
        vocabulary::<AttentionCause>(
            &mut out,
            "AttentionCause",
            "ATTENTION_CAUSES",
            "Why an intent needs a person before anything else is sent.",
        );
        vocabulary::<KeyForm>(&mut out, "KeyForm", "KEY_FORMS", "How a client writes the key in its header.");
        retry_contract(&mut out);
        out
    }

    /// The core's client retry contract (`idemdb_core::classify_answer` and its constants), as data.
    fn retry_contract(out: &mut String) {
        let ms = |d: std::time::Duration| d.as_millis();
        let _ = writeln!(out, "\n/** The retry contract's defaults (the core's `DEFAULT_*`). */");
        let _ = writeln!(
            out,
            "export const RETRY_DEFAULTS = {{\n  attemptsPerCall: {},\n  attemptsPerIntent: {},\n  baseDelayMs: {},\n  \
             maxDelayMs: {},\n  timeoutMs: {},\n}} as const;",
            DEFAULT_ATTEMPTS_PER_CALL,
            DEFAULT_ATTEMPTS_PER_INTENT,
            ms(DEFAULT_BASE_DELAY),
            ms(DEFAULT_MAX_DELAY),
            ms(DEFAULT_ATTEMPT_TIMEOUT)
        );
        let _ = writeln!(out, "/** The request header carrying the key. */");
        let _ = writeln!(out, "export const KEY_HEADER = '{KEY_HEADER}';");
        let _ = writeln!(out, "/** The response header of a replayed response (value `true`). */");
        let _ = writeln!(out, "export const REPLAYED_HEADER = '{REPLAYED_HEADER}';");
        let statuses: Vec<String> = RETRIED_STATUSES.iter().map(u16::to_string).collect();
        let _ = writeln!(out, "/** Statuses retried besides every 5xx. */");
        let _ = writeln!(out, "export const RETRIED_STATUSES: readonly number[] = [{}];", statuses.join(", "));
        let stored: Vec<String> = STORED_RESPONSE_HEADERS.iter().map(|name| format!("'{name}'")).collect();
        let _ = writeln!(out, "/** The response headers stored with a recorded answer, by default (an allow-list). */");
        let _ = writeln!(out, "export const STORED_RESPONSE_HEADERS: readonly string[] = [{}];", stored.join(", "));
        let _ = writeln!(out, "/** The base of idemdb's own problem types. */");
        let _ = writeln!(out, "export const DEFAULT_PROBLEM_BASE = '{DEFAULT_PROBLEM_BASE}';");
        let attention: Vec<String> = ATTENTION_PROBLEMS
            .iter()
            .map(|problem| {
                format!(
                    "{{ code: '{}', status: {}, cause: '{}' }}",
                    problem.code.as_str(),
                    problem.status,
                    problem.cause.as_str()
                )
            })
            .collect();
        let _ = writeln!(
            out,
            "/** idemdb's answers that need a person: the problem, the status it comes with, the cause. */"
        );
        let _ = writeln!(
            out,
            "export const ATTENTION_PROBLEMS: readonly {{ code: EngineErrorCode; status: number; cause: AttentionCause }}[] = [\n  {},\n];",
            attention.join(",\n  ")
        );
    }

    /// `'a' | 'b' | ...` of a vocabulary, in its order.
    fn union<T: Named>() -> String {
        T::ALL.iter().map(|value| format!("'{}'", value.as_str())).collect::<Vec<_>>().join(" | ")
    }

    /// The raw engine's declarations (`types.rs`, and the parameter types in `store.rs`) spell
    /// some unions inline, where wasm-bindgen needs literal text: each must be exactly the
    /// Rust vocabulary, so a name added or renamed in Rust fails here until they follow.
    #[test]
    fn the_raw_engine_declarations_spell_the_rust_vocabularies() {
        let types = include_str!("types.rs");
        let store = include_str!("store.rs");
        for (what, union, text) in [
            ("normalisers", union::<Normaliser>(), types),
            ("expired-lease rules", union::<ExpiredLease>(), types),
            ("durability", union::<Durability>(), types),
            ("attention causes", union::<AttentionCause>(), types),
            ("outcomes", union::<OutcomeClass>(), types),
            ("uncertain causes", union::<UncertainCause>(), types),
            ("record states", union::<StateKind>(), types),
            ("failure kinds", union::<FailureKind>(), store),
            ("resolutions", union::<ResolutionKind>(), store),
        ] {
            assert!(text.contains(&union), "the {what} union `{union}` is not spelled as in Rust");
        }
        for status in ReservationKind::ALL {
            assert!(types.contains(&format!("status: '{}'", status.as_str())), "reservation status {status}");
        }
        // The tagged unions of intents and attempts: one arm per name of the core, in its order.
        let tags = |prefix: &str| -> Vec<String> {
            let prefix = format!("{prefix}: '");
            types
                .match_indices(&prefix)
                .filter_map(|(at, _)| {
                    let rest = &types[at + prefix.len()..];
                    rest.find('\'').map(|end| rest[..end].to_string())
                })
                .collect()
        };
        let names = |all: Vec<&str>| all.into_iter().map(str::to_string).collect::<Vec<_>>();
        assert_eq!(
            tags("IntentBase & { state"),
            names(IntentStateKind::ALL.iter().map(|state| state.as_str()).collect()),
            "the `Intent` union's states are not the core's intent states"
        );
        assert_eq!(
            tags("| { outcome"),
            names(AttemptOutcomeKind::ALL.iter().map(|outcome| outcome.as_str()).collect()),
            "the `AttemptOutcome` union is not the core's attempt outcomes"
        );
    }

    #[test]
    fn the_typescript_vocabulary_is_generated_from_rust() {
        let expected = render();
        if std::env::var_os("IDEMDB_BLESS").is_some() {
            std::fs::write(PATH, &expected).expect("write the generated vocabulary");
        }
        let found = std::fs::read_to_string(PATH).unwrap_or_default();
        assert!(
            found == expected,
            "{PATH} is not what the Rust vocabularies produce (a code or name without its TypeScript twin); \
             regenerate it with `IDEMDB_BLESS=1 cargo test -p idemdb-wasm --lib`"
        );
        for code in ErrorCode::ALL {
            assert!(found.contains(&format!("'{}'", code.as_str())), "{code} has no TypeScript twin");
        }
    }
}
