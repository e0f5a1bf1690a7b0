//! The idempotency middleware: [`IdempotencyLayer`] and its [`IdempotencyService`].
//!
//! One request goes through these steps (the status of each refusal is in the crate docs):
//!
//! 1. **Operation.** The method and matched route select an [`Operation`]; requests the
//!    layer does not cover pass through untouched.
//! 2. **Key.** `Idempotency-Key` is parsed as a structured-field string and checked with the
//!    core's key rules. Missing: 400 when the operation requires a key, else pass-through.
//! 3. **Tenant** from the application's [`TenantSource`]; none: 401.
//! 4. **Body**, read up to the operation's limit (413 beyond), and **fingerprint** (400 for
//!    a JSON body without a canonical form).
//! 5. **Reservation**, atomic in the store, before the handler runs. Only an acquired
//!    reservation reaches the handler, with a [`LeaseHandle`] in its request extensions.
//! 6. **Settlement** of the handler's response by the operation's [`ResponsePolicy`], unless
//!    the handler settled the lease itself.
//!
//! Steps 1–4 refuse before anything is stored; a retry after fixing the request is free to
//! run.
//!
//! **Hang-ups never cut a request.** Steps 4–6 of a covered request run on a Tokio task of
//! their own (the layer needs a Tokio runtime), so when the client disconnects and the server
//! drops the response future, the reserved request still runs to its end and is settled: its
//! retry is a replay, never `409 in-progress` for the whole lease. A panic anywhere after the
//! reservation — in the handler, while the layer collects the response body, while it stores
//! it — marks the record uncertain (the handler may have had its effect), never leaves it in
//! progress.

mod config;
mod error;
mod future;
mod handle;
mod holders;
mod layer;
mod refusal;
mod service;
mod settled;
mod tenant;

pub use config::{
    DEFAULT_IN_PROGRESS_RETRY_AFTER, DEFAULT_MAX_BODY_BYTES, EffectPayload, OnResponse, Operation, ResponsePolicy,
};
pub use error::HandleError;
pub use future::ResponseFuture;
pub use handle::LeaseHandle;
pub use holders::{HeldKeys, KeyHold};
pub use layer::IdempotencyLayer;
pub use service::IdempotencyService;
pub use tenant::{SingleTenant, TenantSource};
