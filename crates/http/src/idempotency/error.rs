//! Errors of the idempotency middleware's handler-facing API.

use idemdb_core::{Coded, ErrorCode};

use super::settled::Settled;

/// A [`LeaseHandle`](super::LeaseHandle) call failed.
#[derive(Debug)]
pub struct HandleError {
    kind: Kind,
}

#[derive(Debug)]
enum Kind {
    /// The lease was settled before (by the handler or by the layer).
    Settled(Settled),
    /// The store refused or failed.
    Store { code: ErrorCode, source: Box<dyn std::error::Error + Send + Sync> },
}

impl HandleError {
    pub(crate) fn settled(how: Settled) -> Self {
        HandleError { kind: Kind::Settled(how) }
    }

    pub(crate) fn store<E: std::error::Error + Coded + Send + Sync + 'static>(error: E) -> Self {
        HandleError { kind: Kind::Store { code: error.code(), source: Box::new(error) } }
    }

    /// The stable code: [`ErrorCode::WrongState`] for a settled lease, the store error's code
    /// otherwise (for example [`ErrorCode::StaleLease`] after a takeover).
    pub fn code(&self) -> ErrorCode {
        match &self.kind {
            Kind::Settled(_) => ErrorCode::WrongState,
            Kind::Store { code, .. } => *code,
        }
    }

    /// Whether the lease was already settled (completed, marked uncertain or released).
    pub fn is_settled(&self) -> bool {
        matches!(self.kind, Kind::Settled(_))
    }
}

impl std::fmt::Display for HandleError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.kind {
            Kind::Settled(how) => write!(f, "the lease was already {}", how.name()),
            Kind::Store { source, .. } => write!(f, "idempotency store failed: {source}"),
        }
    }
}

impl std::error::Error for HandleError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match &self.kind {
            Kind::Settled(_) => None,
            Kind::Store { source, .. } => Some(source.as_ref()),
        }
    }
}

impl Coded for HandleError {
    fn code(&self) -> ErrorCode {
        HandleError::code(self)
    }
}
