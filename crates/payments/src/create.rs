//! `POST /v1/payments`: validate, find the charge the layer enqueued in the outbox with the
//! reservation (one commit; provider key `<key>:charge-v1`), and answer with the response the
//! dispatcher hands over once it has settled the charge (it writes the payment row and
//! completes the idempotency record with that response in one commit).

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Extension;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use bytes::Bytes;
use idemdb_core::{OutboxStateKind, State as RecordState};
use idemdb_http::{LeaseHandle, StoredResponse};
use idemdb_interface::{IdempotencyStore, WorkflowStore};

use crate::app::{App, WaitOutcome};
use crate::backend::Backend;
use crate::charge::{CHARGE_VERSION, ChargeOrder};
use crate::payment::{PaymentRequest, nothing_changed, problem};

/// The handler. The layer has reserved the key before it runs, so it runs at most once per
/// key. It finds the charge enqueued with the reservation and waits (at most the operation's
/// lease TTL) for the dispatcher to hand over the response it finished the payment's record
/// with (`Charges::settled`): the payment's `201`, answered as a retry would replay it.
pub(crate) async fn create<B: Backend>(
    State(app): State<Arc<App<B>>>,
    Extension(handle): Extension<LeaseHandle<B::Store>>,
    body: Bytes,
) -> Response {
    let request = match PaymentRequest::parse(&body) {
        Ok(request) => request,
        Err(detail) => {
            // Nothing happened: release the key so the corrected request may use it.
            let _ = handle.release().await;
            return problem(StatusCode::BAD_REQUEST, "invalid-payment", &detail);
        }
    };
    let (scope, key) = (handle.scope(), handle.key());
    let store = app.backend.store();
    let order = ChargeOrder::for_request(request, handle.key_hash());
    if app.provider.crashes_after_reserve(&order.payment.destination) {
        eprintln!("payments-example: fault injection: aborting after the reservation, before the charge is sent");
        std::process::abort();
    }
    let limit = store.policy(scope.operation()).lease_ttl();
    // The layer enqueued the charge with the reservation (`payment_operation`); a router
    // whose operation does not has the handler enqueue it, in a commit of its own.
    let enqueued = match find_charge(&app, &handle, &order.payment.destination, limit).await {
        Found::Item(item) => Ok(item),
        Found::Missing => {
            store.enqueue_effect(&handle.lease(), &app.charges.effect, CHARGE_VERSION, order.to_payload()).await
        }
        Found::Unreadable => {
            // Whether the charge is in the outbox is not known (it usually is: it was enqueued
            // with the reservation). Never release on a failed read: marked uncertain (or left
            // in progress if even that fails), the record is completed by the dispatcher's
            // report, or released by the reconciler if no charge was enqueued.
            let _ = handle.mark_uncertain().await;
            return problem(
                StatusCode::SERVICE_UNAVAILABLE,
                "store-unavailable",
                "the payment's state could not be read",
            );
        }
    };
    let item = match enqueued {
        Ok(item) => item,
        Err(error) if nothing_changed(&error) => {
            // Nothing was enqueued (the store's commit says so): release the key, a retry
            // runs again.
            let _ = handle.release().await;
            return problem(StatusCode::SERVICE_UNAVAILABLE, "outbox-unavailable", "the charge could not be enqueued");
        }
        Err(_) => {
            // Whether the charge was enqueued is not known: never guess.
            let _ = handle.mark_uncertain().await;
            return problem(StatusCode::SERVICE_UNAVAILABLE, "outbox-unavailable", "the charge could not be enqueued");
        }
    };
    app.charges.wake();
    let unreadable = || async {
        // The charge is enqueued and the dispatcher settles it: the layer must not store this
        // 503 as the payment's answer. Marked uncertain (or, if the store cannot even do that,
        // left in progress), the record is completed by the dispatcher's report, and the
        // reconciler decides what the provider did if that report is lost.
        let _ = handle.mark_uncertain().await;
        problem(StatusCode::SERVICE_UNAVAILABLE, "store-unavailable", "the payment's state could not be read")
    };
    let response = match app.charges.settled(store, &item, limit).await {
        // The dispatcher here finished the record with this response and handed it over.
        Ok(WaitOutcome::Answered(response)) => Some(response),
        // Finished elsewhere (another instance, a reconciliation): the record has the answer.
        Ok(WaitOutcome::Seen(OutboxStateKind::Confirmed | OutboxStateKind::Failed)) => {
            match store.get(&scope, &key).await {
                Ok(record) => record.and_then(|record| match &record.state {
                    RecordState::Completed { result: stored, .. } | RecordState::Failed { error: stored, .. } => {
                        StoredResponse::decode(stored).ok()
                    }
                    _ => None,
                }),
                Err(_) => return unreadable().await,
            }
        }
        Ok(WaitOutcome::Seen(_) | WaitOutcome::Waiting) => None,
        Err(_) => return unreadable().await,
    };
    if let Some(response) = response {
        let _ = handle.completed_by_handler();
        return response.into_response::<axum::body::Body>(false);
    }
    // Unknown (the provider's answer was lost), or not settled in time: retries are refused
    // until the charge is reconciled; the dispatcher's later report settles the record.
    let _ = handle.mark_uncertain().await;
    problem(StatusCode::BAD_GATEWAY, "provider-uncertain", "the provider did not confirm the charge")
}

/// Whether the payment's charge is in the outbox, as far as the handler could read.
enum Found<I> {
    /// It is (enqueued with the reservation).
    Item(I),
    /// The store says there is none.
    Missing,
    /// The store could not be read within [`READ_PATIENCE`]: not an answer either way.
    Unreadable,
}

/// How long the handler keeps reading the outbox item through a store outage, at most (and at
/// most a quarter of the lease): a database blip of a few hundred milliseconds ends within it.
const READ_PATIENCE: Duration = Duration::from_secs(2);

/// Reads the outbox item of the lease's charge, again (20 ms, doubling to 500 ms) while the
/// store cannot be read, up to [`READ_PATIENCE`]. A failed read says nothing about what is
/// stored: it is never taken for "not enqueued".
async fn find_charge<B: Backend>(
    app: &App<B>,
    handle: &LeaseHandle<B::Store>,
    destination: &str,
    lease: Duration,
) -> Found<idemdb_core::OutboxItem> {
    let (scope, key) = (handle.scope(), handle.key());
    let give_up = Instant::now() + READ_PATIENCE.min(lease / 4);
    let mut pause = Duration::from_millis(20);
    loop {
        let read = if app.provider.read_fails_after_reserve(destination) {
            eprintln!("payments-example: fault injection: the read of the enqueued charge fails");
            Err(())
        } else {
            app.backend.store().effect(&scope, &key, &app.charges.effect).await.map_err(drop)
        };
        match read {
            Ok(Some(item)) => return Found::Item(item),
            Ok(None) => return Found::Missing,
            Err(()) if Instant::now() + pause < give_up => {
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_millis(500));
            }
            Err(()) => return Found::Unreadable,
        }
    }
}
