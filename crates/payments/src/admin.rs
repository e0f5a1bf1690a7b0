//! `POST /v1/admin/backup`: a verified backup of the store the service holds, written into the
//! configured backup directory while requests carry on (see [`Store::backup_with`]).
//!
//! Enabled only with an [`Admin`] configuration (`--admin-token` and `--backup-dir`). The
//! caller sends `Authorization: Bearer <admin token>` — never a tenant's token — and a JSON body
//! `{"name": "nightly.idemdb"}` naming a file **inside** the backup directory (or `{}` for a
//! timestamped name): a name is 1..=100 bytes of `[A-Za-z0-9._-]`, not starting with a dot, so
//! no request reaches a path outside that directory. An existing file is never replaced.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use idemdb_http::admin::ProviderFact;
use serde_json::json;

use crate::app::{Admin, App};
use crate::backend::{Backend, BackupOutcome};
use crate::payment::problem;

/// Where backups are asked for.
pub const BACKUP_PATH: &str = "/v1/admin/backup";

/// A backup file name a request may ask for: 1..=100 bytes of `[A-Za-z0-9._-]`, not starting
/// with a dot (no path separator, no `..`, no hidden file).
pub fn valid_backup_name(name: &str) -> bool {
    (1..=100).contains(&name.len())
        && !name.starts_with('.')
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

/// A timestamped backup name: `idemdb-<milliseconds since the Unix epoch>.idemdb`.
pub fn timestamped_backup_name() -> String {
    let ms = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis()).unwrap_or(0);
    format!("idemdb-{ms}.idemdb")
}

/// The backup `name` in `dir`.
pub(crate) fn backup_path(dir: &Path, name: &str) -> PathBuf {
    dir.join(name)
}

/// The handler.
pub(crate) async fn backup<B: Backend>(State(app): State<Arc<App<B>>>, headers: HeaderMap, body: Bytes) -> Response {
    let Some(admin) = &app.admin else {
        return problem(StatusCode::NOT_FOUND, "not-enabled", "admin requests are not enabled (--admin-token)");
    };
    if !admin.authorised(&headers) {
        return problem(StatusCode::UNAUTHORIZED, "unauthorized", "Authorization: Bearer <admin token> required");
    }
    let request: serde_json::Value = if body.is_empty() {
        json!({})
    } else {
        match serde_json::from_slice(&body) {
            Ok(value @ serde_json::Value::Object(_)) => value,
            _ => return problem(StatusCode::BAD_REQUEST, "invalid-request", "the body is a JSON object"),
        }
    };
    let name = match request.get("name") {
        None | Some(serde_json::Value::Null) => timestamped_backup_name(),
        Some(serde_json::Value::String(name)) if valid_backup_name(name) => name.clone(),
        Some(_) => {
            let detail = "`name` is 1..=100 bytes of [A-Za-z0-9._-], not starting with a dot";
            return problem(StatusCode::BAD_REQUEST, "invalid-name", detail);
        }
    };
    let Some(dir) = &admin.backup_dir else {
        return not_on_this_backend();
    };
    match app.backend.backup(backup_path(dir, &name)).await {
        Ok(BackupOutcome::Written(report)) => {
            let body = json!({
                "name": name,
                "path": report.path.display().to_string(),
                "records": report.records,
                "index_entries": report.index_entries,
                "audit_events": report.audit_events,
                "entries": report.entries,
                "bytes": report.bytes,
                "snapshot_ms": report.snapshot_took.as_millis() as u64,
                "took_ms": report.took.as_millis() as u64,
                "verified": true,
            });
            (StatusCode::CREATED, [(header::CONTENT_TYPE, "application/json")], body.to_string()).into_response()
        }
        Ok(BackupOutcome::NotOnThisBackend) => not_on_this_backend(),
        Ok(BackupOutcome::Exists) => {
            problem(StatusCode::CONFLICT, "backup-exists", &format!("{name} exists already in the backup directory"))
        }
        Err(error) => problem(StatusCode::INTERNAL_SERVER_ERROR, "backup-failed", &error.to_string()),
    }
}

fn not_on_this_backend() -> Response {
    let detail = "backups are for the embedded store (--data); back up PostgreSQL with its own tools";
    problem(StatusCode::NOT_IMPLEMENTED, "not-on-this-backend", detail)
}

/// Where the admin API of `idemdb-http` is mounted: the reconciliation queue, one record and
/// its history, resolutions, the outbox and the inbox, and the operator's page at
/// `GET /v1/admin`.
pub const ADMIN_API_PATH: &str = "/v1/admin";

/// The admin routes: `POST /v1/admin/backup` and, with `admin`, the admin API behind the admin
/// bearer token (the page itself, `GET /v1/admin`, holds no data and loads without it; every
/// call it makes carries the token).
pub(crate) fn routes<B: Backend>(app: &Arc<App<B>>) -> axum::Router {
    let backup = axum::Router::new().route("/backup", axum::routing::post(backup::<B>)).with_state(Arc::clone(app));
    let Some(admin) = app.admin.clone() else { return backup };
    let api = idemdb_http::admin::AdminApi::new(app.backend.store().clone())
        .hook(PaymentRow { app: Arc::clone(app) })
        .router()
        .layer(axum::middleware::from_fn_with_state(admin, operators_only));
    backup.merge(api)
}

/// Lets through requests with the admin token, and the page.
async fn operators_only(
    State(admin): State<Admin>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let page = request.method() == axum::http::Method::GET && request.uri().path() == "/";
    if !page && !admin.authorised(request.headers()) {
        return problem(StatusCode::UNAUTHORIZED, "unauthorized", "Authorization: Bearer <admin token> required");
    }
    next.run(request).await
}

/// The payments' part in operator resolutions: a confirmed charge writes the payment row and
/// the resolution in one commit, as the reconciler does, so the retry replays the payment's
/// `201` and the ledger has its row; every operator's fact about a charge is checked against
/// the provider's lookup by the charge's provider key first; and the page shows a charge by
/// its amount, currency and destination.
struct PaymentRow<B> {
    app: Arc<App<B>>,
}

impl<B: Backend> idemdb_http::admin::ConfirmHook<B::Store> for PaymentRow<B> {
    async fn confirmed(
        &self,
        _store: &B::Store,
        item: &idemdb_core::OutboxItem,
        reference: &str,
    ) -> Result<bool, idemdb_http::admin::HookError> {
        if item.effect != self.app.charges.effect {
            return Ok(false);
        }
        let order = crate::charge::ChargeOrder::from_payload(&item.payload).map_err(idemdb_http::admin::HookError)?;
        let (payment, response) = crate::charge::confirmed_payment(item, &order, reference);
        let state =
            idemdb_core::ProviderState::Confirmed { reference: reference.to_string(), result: response.encode() };
        crate::ledger::record_payment(
            self.app.backend.store(),
            item.scope.tenant(),
            &payment,
            item,
            crate::ledger::ChargeOutcome::Resolved(state, idemdb_core::ResolutionCause::Operator),
        )
        .await
        .map_err(|error| idemdb_http::admin::HookError(error.to_string()))?;
        Ok(true)
    }

    async fn lookup(
        &self,
        _store: &B::Store,
        item: &idemdb_core::OutboxItem,
    ) -> Result<Option<ProviderFact>, idemdb_http::admin::HookError> {
        if item.effect != self.app.charges.effect {
            return Ok(None);
        }
        let found = self.app.provider.find(item.scope.tenant(), item.provider_key.as_str()).await;
        match found.map_err(|error| idemdb_http::admin::HookError(error.to_string()))? {
            None => Ok(Some(ProviderFact::NotMade)),
            Some(charge) => match charge["id"].as_str() {
                Some(reference) => Ok(Some(ProviderFact::Made { reference: reference.to_string() })),
                None => Err(idemdb_http::admin::HookError("the provider's charge has no id".into())),
            },
        }
    }

    fn describe(&self, item: &idemdb_core::OutboxItem) -> Option<serde_json::Value> {
        if item.effect != self.app.charges.effect {
            return None;
        }
        let order = crate::charge::ChargeOrder::from_payload(&item.payload).ok()?;
        let payment = &order.payment;
        Some(json!({ "amount": payment.amount, "currency": payment.currency, "destination": payment.destination }))
    }
}
