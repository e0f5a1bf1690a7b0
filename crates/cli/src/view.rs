//! The JSON shape of one record, shared by `get`, `list`, `export` and `import`.
//!
//! Keys appear only when asked (`--show-keys`), payloads only when asked (`--show-payloads`);
//! the keyed hash of the key and the payload's size are always there. A payload is written as
//! text when it is UTF-8 (`payload`), otherwise as hexadecimal (`payload_hex`).

use serde::{Deserialize, Serialize};

use idemdb::{
    Fingerprint, IdempotencyKey, KeyHash, OutcomeClass, Record, Scope, ScopedKey, State, Timestamp, UncertainCause,
};

/// What to reveal.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Reveal {
    pub(crate) keys: bool,
    pub(crate) payloads: bool,
}

/// One record as JSON. Reading one (`import`) refuses fields it does not know.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RecordView {
    pub(crate) tenant: String,
    pub(crate) operation: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) key: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) key_hash: Option<String>,
    pub(crate) state: String,
    pub(crate) fingerprint: String,
    pub(crate) fence: u64,
    pub(crate) attempts: u32,
    pub(crate) created_at: u64,
    pub(crate) updated_at: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) lease_expires_at: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) expires_at: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) forget_at: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) outcome: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) cause: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) payload_bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) payload: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) payload_hex: Option<String>,
}

fn outcome_name(outcome: OutcomeClass) -> &'static str {
    match outcome {
        OutcomeClass::Completed => "completed",
        OutcomeClass::Failed => "failed",
    }
}

fn cause_name(cause: UncertainCause) -> &'static str {
    match cause {
        UncertainCause::LeaseExpired => "lease_expired",
        UncertainCause::Reported => "reported",
    }
}

impl RecordView {
    /// The view of a stored record.
    pub(crate) fn new(scoped: &ScopedKey, hash: &KeyHash, record: &Record, reveal: Reveal) -> Self {
        let mut view = RecordView {
            tenant: scoped.scope.tenant().to_string(),
            operation: scoped.scope.operation().to_string(),
            key: reveal.keys.then(|| scoped.key.as_str().to_string()),
            key_hash: Some(hash.to_string()),
            state: record.state.kind().as_str().to_string(),
            fingerprint: record.fingerprint.to_hex(),
            fence: record.fence,
            attempts: record.attempts,
            created_at: record.created_at.as_millis(),
            updated_at: record.updated_at.as_millis(),
            lease_expires_at: None,
            expires_at: None,
            forget_at: None,
            outcome: None,
            cause: None,
            payload_bytes: None,
            payload: None,
            payload_hex: None,
        };
        let mut body: Option<&[u8]> = None;
        match &record.state {
            State::InProgress { lease_expires_at } => view.lease_expires_at = Some(lease_expires_at.as_millis()),
            State::Completed { result: payload, expires_at, forget_at }
            | State::Failed { error: payload, expires_at, forget_at } => {
                view.expires_at = Some(expires_at.as_millis());
                view.forget_at = Some(forget_at.as_millis());
                body = Some(payload);
            }
            State::Released { forget_at } => view.forget_at = Some(forget_at.as_millis()),
            State::Uncertain { cause } => view.cause = Some(cause_name(*cause).to_string()),
            State::Tombstone { outcome, forget_at } => {
                view.outcome = Some(outcome_name(*outcome).to_string());
                view.forget_at = Some(forget_at.as_millis());
            }
        }
        if let Some(body) = body {
            view.payload_bytes = Some(body.len() as u64);
            if reveal.payloads {
                match std::str::from_utf8(body) {
                    Ok(text) => view.payload = Some(text.to_string()),
                    Err(_) => view.payload_hex = Some(hex(body)),
                }
            }
        }
        view
    }

    /// The record this view describes, for `import`. Returns whether a completed or failed
    /// record had to become a tombstone because its payload was left out of the export.
    ///
    /// # Errors
    /// A message naming the missing or malformed field.
    pub(crate) fn to_record(&self) -> Result<(ScopedKey, Record, bool), String> {
        let key = self
            .key
            .as_deref()
            .ok_or("no `key` (the export hid keys; export with --show-keys to make a file that can be imported)")?;
        let scope = Scope::new(self.tenant.as_str(), self.operation.as_str()).map_err(|e| e.to_string())?;
        let key = IdempotencyKey::new(key).map_err(|e| e.to_string())?;
        let fingerprint = unhex(&self.fingerprint)
            .and_then(|bytes| <[u8; 32]>::try_from(bytes).ok())
            .map(Fingerprint::from_bytes)
            .ok_or("`fingerprint` is not 64 hexadecimal digits")?;
        let at = |value: Option<u64>, name: &str| {
            value.map(Timestamp::from_millis).ok_or_else(|| format!("state {} needs `{name}`", self.state))
        };
        self.fields_belong_to_the_state()?;
        let payload = match (&self.payload, &self.payload_hex) {
            (Some(_), Some(_)) => return Err("give `payload` or `payload_hex`, not both".into()),
            (Some(text), None) => Some(text.as_bytes().to_vec()),
            (None, Some(hex)) => Some(unhex(hex).ok_or("`payload_hex` is not hexadecimal")?),
            (None, None) => None,
        };
        if let (Some(payload), Some(declared)) = (&payload, self.payload_bytes)
            && payload.len() as u64 != declared
        {
            return Err(format!("`payload_bytes` is {declared} but the payload has {} bytes", payload.len()));
        }
        let mut tombstoned = false;
        let mut finished = |outcome: OutcomeClass, payload: Option<Vec<u8>>| -> Result<State, String> {
            let expires_at = at(self.expires_at, "expires_at")?;
            let forget_at = at(self.forget_at, "forget_at")?;
            Ok(match (outcome, payload) {
                (OutcomeClass::Completed, Some(result)) => State::Completed { result, expires_at, forget_at },
                (OutcomeClass::Failed, Some(error)) => State::Failed { error, expires_at, forget_at },
                (outcome, None) => {
                    tombstoned = true;
                    State::Tombstone { outcome, forget_at }
                }
            })
        };
        let state = match self.state.as_str() {
            "in_progress" => State::InProgress { lease_expires_at: at(self.lease_expires_at, "lease_expires_at")? },
            "completed" => finished(OutcomeClass::Completed, payload)?,
            "failed" => finished(OutcomeClass::Failed, payload)?,
            "released" => State::Released { forget_at: at(self.forget_at, "forget_at")? },
            "uncertain" => State::Uncertain {
                cause: match self.cause.as_deref() {
                    Some("lease_expired") => UncertainCause::LeaseExpired,
                    Some("reported") => UncertainCause::Reported,
                    _ => return Err("state uncertain needs `cause`: lease_expired or reported".into()),
                },
            },
            "tombstone" => State::Tombstone {
                outcome: match self.outcome.as_deref() {
                    Some("completed") => OutcomeClass::Completed,
                    Some("failed") => OutcomeClass::Failed,
                    _ => return Err("state tombstone needs `outcome`: completed or failed".into()),
                },
                forget_at: at(self.forget_at, "forget_at")?,
            },
            other => return Err(format!("unknown state `{other}`")),
        };
        let record = Record {
            fingerprint,
            state,
            fence: self.fence,
            attempts: self.attempts,
            created_at: Timestamp::from_millis(self.created_at),
            updated_at: Timestamp::from_millis(self.updated_at),
        };
        Ok((ScopedKey::new(scope, key), record, tombstoned))
    }
}

impl RecordView {
    /// Refuses a field the record's state does not have (`cause` on a completed record, a
    /// payload on a tombstone): `export` never writes one.
    fn fields_belong_to_the_state(&self) -> Result<(), String> {
        let allowed: &[&str] = match self.state.as_str() {
            "in_progress" => &["lease_expires_at"],
            "completed" | "failed" => &["expires_at", "forget_at", "payload_bytes", "payload", "payload_hex"],
            "released" => &["forget_at"],
            "uncertain" => &["cause"],
            "tombstone" => &["outcome", "forget_at"],
            other => return Err(format!("unknown state `{other}`")),
        };
        let present = [
            ("lease_expires_at", self.lease_expires_at.is_some()),
            ("expires_at", self.expires_at.is_some()),
            ("forget_at", self.forget_at.is_some()),
            ("outcome", self.outcome.is_some()),
            ("cause", self.cause.is_some()),
            ("payload_bytes", self.payload_bytes.is_some()),
            ("payload", self.payload.is_some()),
            ("payload_hex", self.payload_hex.is_some()),
        ];
        match present.iter().find(|(name, here)| *here && !allowed.contains(name)) {
            Some((name, _)) => Err(format!("state {} has no `{name}`", self.state)),
            None => Ok(()),
        }
    }
}

/// Lower-case hexadecimal.
pub(crate) fn hex(bytes: &[u8]) -> String {
    hex::encode(bytes)
}

/// Parses hexadecimal (either case).
pub(crate) fn unhex(text: &str) -> Option<Vec<u8>> {
    hex::decode(text).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn record_round_trips_through_the_view() {
        let scoped =
            ScopedKey::new(Scope::new("acme", "pay").expect("scope"), IdempotencyKey::new("k-1").expect("key"));
        let record = Record {
            fingerprint: Fingerprint::from_bytes([7; 32]),
            state: State::Failed {
                error: vec![0xff, 0x00],
                expires_at: Timestamp::from_millis(5),
                forget_at: Timestamp::from_millis(9),
            },
            fence: 3,
            attempts: 2,
            created_at: Timestamp::from_millis(1),
            updated_at: Timestamp::from_millis(2),
        };
        let hash = idemdb::Store::in_memory().expect("store").key_hash(&scoped.scope, &scoped.key);
        let view = RecordView::new(&scoped, &hash, &record, Reveal { keys: true, payloads: true });
        assert_eq!(view.payload_hex.as_deref(), Some("ff00"));
        let (back_key, back, tombstoned) = view.to_record().expect("record");
        assert_eq!((back_key, back, tombstoned), (scoped.clone(), record.clone(), false));

        let hidden = RecordView::new(&scoped, &hash, &record, Reveal { keys: true, payloads: false });
        let (_, tomb, tombstoned) = hidden.to_record().expect("record");
        assert!(tombstoned);
        assert_eq!(
            tomb.state,
            State::Tombstone { outcome: OutcomeClass::Failed, forget_at: Timestamp::from_millis(9) }
        );
        assert!(RecordView::new(&scoped, &hash, &record, Reveal::default()).to_record().is_err());
    }
}
