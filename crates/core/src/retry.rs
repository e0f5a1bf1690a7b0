//! The client retry contract, as pure rules: what answer is final, what is retried, what needs
//! a person; the defaults; backoff with full jitter; `Retry-After`; the key header's forms.
//!
//! Both clients follow it: the Rust `IdempotentClient` calls these functions, and the npm
//! package's `idempotentFetch` reads the same rules from `generated/retry-contract.ts`, which
//! is generated from this module (a test fails when the two differ). The cases of
//! `tests/testdata/answers.json` run against both.
//!
//! ```
//! use idemdb_core::{AnswerClass, AttentionCause, ErrorCode, classify_answer};
//! // A replayed response is final, whatever its status: the server stored it.
//! assert_eq!(classify_answer(500, true, None), AnswerClass::Final);
//! // A 503 from a busy store is retried with the same key.
//! assert_eq!(classify_answer(503, false, Some(ErrorCode::Unavailable)), AnswerClass::Retry);
//! // The status decides: a 400 is final, whatever its problem type says.
//! assert_eq!(classify_answer(400, false, Some(ErrorCode::Unavailable)), AnswerClass::Final);
//! // An answer that needs a reconciliation is never resent.
//! assert_eq!(
//!     classify_answer(409, false, Some(ErrorCode::NeedsReconciliation)),
//!     AnswerClass::NeedsAttention(AttentionCause::NeedsReconciliation),
//! );
//! ```

use core::time::Duration;

use serde::{Deserialize, Serialize};

use crate::{ErrorCode, Named, Timestamp};

/// Attempts per call (the first included), by default.
pub const DEFAULT_ATTEMPTS_PER_CALL: u32 = 5;
/// Attempts over an intent's life (across every resume) before it needs attention, by default.
pub const DEFAULT_ATTEMPTS_PER_INTENT: u32 = 20;
/// The first backoff delay, by default; it doubles per attempt.
pub const DEFAULT_BASE_DELAY: Duration = Duration::from_millis(250);
/// The largest backoff delay, and the cap on a server's `Retry-After`, by default.
pub const DEFAULT_MAX_DELAY: Duration = Duration::from_secs(30);
/// The timeout of one attempt, by default.
pub const DEFAULT_ATTEMPT_TIMEOUT: Duration = Duration::from_secs(15);
/// The request header carrying the key, as the IETF draft spells it (lower case).
pub const KEY_HEADER: &str = "idempotency-key";
/// The response header of a replayed response (value `true`).
pub const REPLAYED_HEADER: &str = "idempotent-replayed";
/// Statuses retried with the same key besides every 5xx: the server timed out reading (408),
/// another attempt is running (409), or it asks to come back (429).
pub const RETRIED_STATUSES: &[u16] = &[408, 409, 429];
/// The response headers a client stores with a recorded answer, by default: those that say what
/// the answer is. The list is an allow-list — a header a server adds (`authorization`,
/// `x-api-key`, `www-authenticate`, `set-cookie`, a session token of its own) is never written
/// to the store unless the app names it. `idempotent-replayed` is kept: it decides the class of
/// the recorded answer.
pub const STORED_RESPONSE_HEADERS: &[&str] =
    &["content-type", "content-language", "etag", "last-modified", "location", "retry-after", REPLAYED_HEADER];

/// The value a stored response header keeps: a `location` without its query and fragment (a
/// token there never reaches the store); any other header as it came.
///
/// ```
/// use idemdb_core::stored_response_value;
/// assert_eq!(stored_response_value("location", "/v1/payments/p_1?token=s3cret#x"), "/v1/payments/p_1");
/// assert_eq!(stored_response_value("etag", "\"v1?\""), "\"v1?\"");
/// ```
pub fn stored_response_value<'a>(name: &str, value: &'a str) -> &'a str {
    if name.eq_ignore_ascii_case("location") {
        return value.split(['?', '#']).next().unwrap_or(value);
    }
    value
}

/// The base of idemdb's own problem types: `urn:idemdb:problem:<slug>` (what the HTTP layer
/// answers unless the service names another base, which its clients are then told).
pub const DEFAULT_PROBLEM_BASE: &str = "urn:idemdb:problem:";

/// A problem that needs a person when idemdb answers it with its status: retrying cannot help.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AttentionProblem {
    /// The problem's code.
    pub code: ErrorCode,
    /// The status idemdb answers it with.
    pub status: u16,
    /// What the intent needs attention for.
    pub cause: AttentionCause,
}

/// The problems that stop a client for a person, each with the status the idemdb HTTP layer
/// answers it with. The same code under another status is not idemdb's answer (another
/// service's problem type that happens to end the same way): the status decides then.
pub const ATTENTION_PROBLEMS: &[AttentionProblem] = &[
    AttentionProblem { code: ErrorCode::NeedsReconciliation, status: 409, cause: AttentionCause::NeedsReconciliation },
    AttentionProblem { code: ErrorCode::ProviderKeyExpired, status: 409, cause: AttentionCause::ProviderKeyExpired },
    AttentionProblem { code: ErrorCode::Expired, status: 410, cause: AttentionCause::Expired },
    AttentionProblem { code: ErrorCode::Corrupt, status: 500, cause: AttentionCause::Unreadable },
    AttentionProblem { code: ErrorCode::NewerFormat, status: 500, cause: AttentionCause::Unreadable },
];

/// How a client writes the key in its header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum KeyForm {
    /// The IETF draft's structured-field string, `"<key>"` (what the idemdb HTTP layer reads).
    #[default]
    SfString,
    /// The key alone, for servers that take the header as an opaque token.
    Bare,
}

crate::names!(KeyForm, "key form", { SfString => "sf-string", Bare => "bare" });

/// The header value carrying `key` in `form`. Keys are visible ASCII (the core refuses
/// others), a subset of the sf-string alphabet, so the string form only escapes `"` and `\`.
///
/// ```
/// use idemdb_core::{KeyForm, key_header_value};
/// assert_eq!(key_header_value(r#"a"b"#, KeyForm::SfString), r#""a\"b""#);
/// assert_eq!(key_header_value("k-1", KeyForm::Bare), "k-1");
/// ```
pub fn key_header_value(key: &str, form: KeyForm) -> String {
    match form {
        KeyForm::Bare => key.to_string(),
        KeyForm::SfString => {
            let mut out = String::with_capacity(key.len() + 2);
            out.push('"');
            for c in key.chars() {
                if c == '"' || c == '\\' {
                    out.push('\\');
                }
                out.push(c);
            }
            out.push('"');
            out
        }
    }
}

/// Why an intent needs a person (or a reconciliation) before anything else is sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[non_exhaustive]
pub enum AttentionCause {
    /// The server does not know whether an earlier attempt took effect: reconcile, then
    /// retry or abandon.
    NeedsReconciliation,
    /// The server processed the key and its stored response expired: it never runs it again.
    Expired,
    /// The provider's key retention passed for an effect of unknown outcome.
    ProviderKeyExpired,
    /// The server cannot read what it stored for the key.
    Unreadable,
    /// Every attempt of the intent's budget failed without a final answer.
    RetriesExhausted,
    /// The final answer arrived but is over the operation's result limit, so it could not be
    /// stored: the intent keeps its status and headers and is not sent again (raise the
    /// operation's `max_result_bytes` for such answers).
    AnswerTooLarge,
}

crate::names!(AttentionCause, "attention cause", {
    NeedsReconciliation => "needs_reconciliation",
    Expired => "expired",
    ProviderKeyExpired => "provider_key_expired",
    Unreadable => "unreadable",
    RetriesExhausted => "retries_exhausted",
    AnswerTooLarge => "answer_too_large",
});

impl AttentionCause {
    /// The cause an answer of `status` naming the problem `code` gives, when it is one of
    /// idemdb's answers that need a person ([`ATTENTION_PROBLEMS`]).
    pub fn of_answer(code: ErrorCode, status: u16) -> Option<AttentionCause> {
        ATTENTION_PROBLEMS
            .iter()
            .find(|problem| problem.code == code && problem.status == status)
            .map(|problem| problem.cause)
    }
}

/// What a client does with one answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum AnswerClass {
    /// The answer is final: record it, never send the intent again.
    Final,
    /// Send again with the same key (after a backoff or `Retry-After`).
    Retry,
    /// Stop: the intent needs a person; record the answer with it.
    NeedsAttention(AttentionCause),
}

/// The class of an answer with `status`, `Idempotent-Replayed: true` or not, and the problem
/// code its body names (see [`problem_code`]). The status decides; a problem code only tells
/// which of idemdb's own answers of that status needs a person:
///
/// 1. a replayed response is final, whatever its status (the server stored it);
/// 2. an idemdb problem that needs a person, with the status idemdb answers it with
///    ([`ATTENTION_PROBLEMS`]: `needs-reconciliation` 409, `expired` 410, ...);
/// 3. 422 is final (the key is bound to a different request);
/// 4. 408, 409, 429 and every 5xx are retried;
/// 5. anything else (2xx, 3xx, 4xx) is final — a 400 or 403 whose problem type happens to end
///    in `/unavailable` included.
pub fn classify_answer(status: u16, replayed: bool, problem: Option<ErrorCode>) -> AnswerClass {
    if replayed {
        return AnswerClass::Final;
    }
    if let Some(cause) = problem.and_then(|code| AttentionCause::of_answer(code, status)) {
        return AnswerClass::NeedsAttention(cause);
    }
    if status == 422 {
        return AnswerClass::Final;
    }
    if status >= 500 || RETRIED_STATUSES.contains(&status) {
        return AnswerClass::Retry;
    }
    AnswerClass::Final
}

/// The idemdb problem code a problem body names: its `code` member (`IDEMDB_NEEDS_RECONCILIATION`),
/// or its `type` when that is an idemdb problem type in full — [`DEFAULT_PROBLEM_BASE`] or the
/// service's own `base` followed by the code's slug (`urn:idemdb:problem:needs-reconciliation`,
/// `https://api.example.com/problems/expired` with that base). Another service's type that
/// only ends the same way names nothing.
///
/// ```
/// use idemdb_core::{ErrorCode, problem_code};
/// assert_eq!(problem_code(Some("urn:idemdb:problem:expired"), None, None), Some(ErrorCode::Expired));
/// assert_eq!(problem_code(Some("https://api.example.com/problems/expired"), None, None), None);
/// let base = Some("https://api.example.com/problems/");
/// assert_eq!(problem_code(Some("https://api.example.com/problems/expired"), None, base), Some(ErrorCode::Expired));
/// ```
pub fn problem_code(type_uri: Option<&str>, code: Option<&str>, base: Option<&str>) -> Option<ErrorCode> {
    if let Some(code) = code.and_then(|code| ErrorCode::parse_name(code).ok()) {
        return Some(code);
    }
    let type_uri = type_uri?;
    let slug = [Some(DEFAULT_PROBLEM_BASE), base].into_iter().flatten().find_map(|base| type_uri.strip_prefix(base))?;
    ErrorCode::ALL.iter().copied().find(|code| code.slug() == slug)
}

/// The ceiling of the backoff after attempt `attempt` (counted from 1): `base × 2^(attempt-1)`,
/// at most `max`. The delay is drawn uniformly below it (full jitter).
pub fn backoff_ceiling(attempt: u32, base: Duration, max: Duration) -> Duration {
    let doublings = attempt.saturating_sub(1).min(30);
    base.saturating_mul(1 << doublings).min(max)
}

/// A backoff delay after attempt `attempt` with full jitter: `unit` (drawn uniformly in
/// `[0, 1)`, clamped) times the [ceiling](backoff_ceiling).
pub fn backoff_delay(attempt: u32, unit: f64, base: Duration, max: Duration) -> Duration {
    backoff_ceiling(attempt, base, max).mul_f64(unit.clamp(0.0, 1.0))
}

/// The wait a `Retry-After` value asks for — delay seconds, or an IMF-fixdate
/// (`Sun, 06 Nov 1994 08:49:37 GMT`) after `now` — at most `max`; `None` when it is neither.
///
/// ```
/// use std::time::Duration;
/// use idemdb_core::{Timestamp, retry_after};
/// let now = Timestamp::from_millis(784_111_777_000); // Sun, 06 Nov 1994 08:49:37 GMT
/// assert_eq!(retry_after("3", now, Duration::from_secs(30)), Some(Duration::from_secs(3)));
/// assert_eq!(retry_after("Sun, 06 Nov 1994 08:49:41 GMT", now, Duration::from_secs(30)), Some(Duration::from_secs(4)));
/// assert_eq!(retry_after("soon", now, Duration::from_secs(30)), None);
/// ```
pub fn retry_after(value: &str, now: Timestamp, max: Duration) -> Option<Duration> {
    let value = value.trim();
    let wait = if !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit()) {
        Duration::from_secs(value.parse::<u64>().unwrap_or(u64::MAX))
    } else {
        Timestamp::from_millis(imf_fixdate_millis(value)?).saturating_since(now)
    };
    Some(wait.min(max))
}

/// Milliseconds since the Unix epoch of an IMF-fixdate.
fn imf_fixdate_millis(value: &str) -> Option<u64> {
    const MONTHS: [&str; 12] = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"];
    let mut parts = value.split(' ');
    let (_weekday, day, month, year, time, zone) =
        (parts.next()?, parts.next()?, parts.next()?, parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() || zone != "GMT" || day.len() != 2 || year.len() != 4 {
        return None;
    }
    let number = |text: &str| -> Option<u64> {
        if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        text.parse().ok()
    };
    let (day, year) = (number(day)?, number(year)?);
    let month = MONTHS.iter().position(|m| *m == month)? as u64 + 1;
    let mut clock = time.split(':');
    let (hour, minute, second) = (number(clock.next()?)?, number(clock.next()?)?, number(clock.next()?)?);
    if clock.next().is_some() || year < 1970 || !(1..=31).contains(&day) || hour > 23 || minute > 59 || second > 60 {
        return None;
    }
    // Days from the civil date (Howard Hinnant's algorithm), for years from 1970.
    let (y, m) = if month <= 2 { (year - 1, month + 9) } else { (year, month - 3) };
    let era = y / 400;
    let yoe = y - era * 400;
    let doy = (153 * m + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = (era * 146_097 + doe).checked_sub(719_468)?;
    let seconds = days.checked_mul(86_400)?.checked_add(hour * 3600 + minute * 60 + second)?;
    seconds.checked_mul(1000)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The cases both clients run (`tests/testdata/answers.json`).
    const CASES: &str = include_str!("../../../tests/testdata/answers.json");

    #[test]
    fn the_shared_answer_cases_hold() {
        let cases: serde_json::Value = serde_json::from_str(CASES).unwrap();
        let cases = cases["cases"].as_array().unwrap();
        assert!(cases.len() >= 20);
        for case in cases {
            let problem = problem_code(case["type"].as_str(), case["code"].as_str(), case["base"].as_str());
            let class = classify_answer(case["status"].as_u64().unwrap() as u16, case["replayed"] == true, problem);
            let name = match class {
                AnswerClass::Final => "final".to_string(),
                AnswerClass::Retry => "retry".to_string(),
                AnswerClass::NeedsAttention(cause) => format!("needs_attention:{cause}"),
            };
            assert_eq!(name, case["class"].as_str().unwrap(), "{case}");
        }
    }

    #[test]
    fn every_problem_code_is_named_by_its_full_type_or_its_code() {
        for code in ErrorCode::ALL {
            assert_eq!(problem_code(Some(&format!("urn:idemdb:problem:{}", code.slug())), None, None), Some(*code));
            assert_eq!(problem_code(None, Some(code.as_str()), None), Some(*code));
            // Another service's type ending the same way is not idemdb's.
            assert_eq!(problem_code(Some(&format!("https://other.example/{}", code.slug())), None, None), None);
            assert_eq!(problem_code(Some(&format!("urn:other:{}", code.slug())), None, None), None);
        }
        assert_eq!(problem_code(Some("about:blank"), None, None), None);
        assert_eq!(problem_code(None, None, None), None);
    }

    /// A problem that needs a person does so only with the status idemdb answers it with: an
    /// idemdb type under another status is another answer, and the status decides it.
    #[test]
    fn an_attention_problem_under_another_status_is_classified_by_the_status() {
        for problem in ATTENTION_PROBLEMS {
            assert_eq!(
                classify_answer(problem.status, false, Some(problem.code)),
                AnswerClass::NeedsAttention(problem.cause)
            );
            for status in [400, 401, 402, 403, 404] {
                assert_eq!(
                    classify_answer(status, false, Some(problem.code)),
                    AnswerClass::Final,
                    "{status} {problem:?}"
                );
            }
        }
        for code in [ErrorCode::Unavailable, ErrorCode::Closed, ErrorCode::InProgress, ErrorCode::Storage] {
            assert_eq!(classify_answer(400, false, Some(code)), AnswerClass::Final, "{code}");
            assert_eq!(classify_answer(503, false, Some(code)), AnswerClass::Retry, "{code}");
        }
    }

    #[test]
    fn backoff_doubles_to_the_cap_with_full_jitter() {
        let (base, max) = (Duration::from_millis(100), Duration::from_secs(1));
        assert_eq!(backoff_ceiling(1, base, max), Duration::from_millis(100));
        assert_eq!(backoff_ceiling(2, base, max), Duration::from_millis(200));
        assert_eq!(backoff_ceiling(4, base, max), Duration::from_millis(800));
        assert_eq!(backoff_ceiling(5, base, max), Duration::from_secs(1));
        assert_eq!(backoff_ceiling(u32::MAX, base, max), Duration::from_secs(1));
        assert_eq!(backoff_delay(3, 0.0, base, max), Duration::ZERO);
        assert_eq!(backoff_delay(3, 0.5, base, max), Duration::from_millis(200));
        assert_eq!(backoff_delay(3, 7.0, base, max), Duration::from_millis(400), "the unit is clamped");
    }

    #[test]
    fn retry_after_reads_seconds_and_dates_and_is_capped() {
        let now = Timestamp::from_millis(1_700_000_000_000); // Tue, 14 Nov 2023 22:13:20 GMT
        let max = Duration::from_secs(10);
        assert_eq!(retry_after("3", now, max), Some(Duration::from_secs(3)));
        assert_eq!(retry_after("3600", now, max), Some(max));
        assert_eq!(retry_after("99999999999999999999999", now, max), Some(max));
        assert_eq!(retry_after("Tue, 14 Nov 2023 22:13:24 GMT", now, max), Some(Duration::from_secs(4)));
        assert_eq!(retry_after("Tue, 14 Nov 2023 22:13:16 GMT", now, max), Some(Duration::ZERO));
        for bad in ["soon", "", "-1", "1.5", "Tue, 14 Nov 2023 22:13:24 UTC", "Tue, 14 Foo 2023 22:13:24 GMT"] {
            assert_eq!(retry_after(bad, now, max), None, "{bad}");
        }
    }

    #[test]
    fn key_forms_quote_or_not() {
        assert_eq!(key_header_value("k-1", KeyForm::SfString), "\"k-1\"");
        assert_eq!(key_header_value(r"a\b", KeyForm::SfString), r#""a\\b""#);
        assert_eq!("bare".parse::<KeyForm>(), Ok(KeyForm::Bare));
    }
}
