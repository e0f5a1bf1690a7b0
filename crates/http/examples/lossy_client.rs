//! The Rust client of the cross-runtime client test (`bindings/uniffi/tests/clients/run.mjs`):
//! `IdempotentClient` against a lossy service, killed with SIGKILL once and started again on
//! the same store file.
//!
//! ```sh
//! cargo run -p idemdb-http --features client --example lossy_client -- STORE BASE_URL N RUN
//! ```
//!
//! Resumes what the store holds pending, then sends payments `RUN-00` .. `RUN-<N-1>` (a
//! finished one answers from the store, unsent), each until it has a final answer or needs
//! attention, and prints one line `report <json>`: every intent's state, status, attention
//! cause and attempts, read back from the store.

use std::time::Duration;

use idemdb::{IdempotencyKey, IntentState, Scope, Store};
use idemdb_http::client::{IdempotentClient, IntentRequest, Retry};
use serde_json::json;

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [path, base, count, run] = args.as_slice() else {
        return Err("usage: lossy_client STORE BASE_URL N RUN".into());
    };
    let count: usize = count.parse()?;
    let scope = Scope::new("acme", "create_payment")?;
    let key_of = |i: usize| IdempotencyKey::new(format!("{run}-{i:02}"));

    // 800 ms per attempt (the service's stalls are longer), Retry-After honoured up to 1 s, at
    // most 20 attempts charged per intent (the default) and more per call, so one call ends final.
    let retry = Retry::default()
        .max_attempts(40)
        .base_delay(Duration::from_millis(20))
        .max_delay(Duration::from_secs(1))
        .timeout(Duration::from_millis(800));
    let client = IdempotentClient::new(Store::open(path)?, reqwest::Client::new()).base_url(base.parse()?).retry(retry);

    let resumed = client.resume_pending().await?;
    println!("resumed {}", resumed.len());
    for i in 0..count {
        let key = key_of(i)?;
        let payment = json!({"amount": format!("{}.00", i + 1), "currency": "EUR", "ref": key.as_str()});
        for _ in 0..5 {
            match client.send_with_key(&scope, &key, IntentRequest::post("/payments").json(payment.clone())).await {
                // This call's attempts ran out: the intent is pending, send it again.
                Err(error) if error.is_retries_exhausted() => continue,
                // A result, a final refusal (422, 4xx) or an intent that needs attention: the
                // store says which.
                _ => break,
            }
        }
    }

    let mut report = Vec::with_capacity(count);
    for i in 0..count {
        let key = key_of(i)?;
        let intent = client.store().intent(&scope, &key)?;
        let (state, response, cause) = match intent.as_ref().map(|intent| &intent.state) {
            None => ("missing", None, None),
            Some(IntentState::Completed { response }) => ("completed", Some(response), None),
            Some(IntentState::NeedsAttention { cause, response }) => {
                ("needs_attention", response.as_ref(), Some(cause.as_str()))
            }
            Some(state) => (state.name(), None, None),
        };
        report.push(json!({
            "key": key.as_str(),
            "state": state,
            "status": response.map(|r| r.status),
            "cause": cause,
            "attempts": intent.as_ref().map_or(0, |intent| intent.attempts),
            "body": response.map(|r| String::from_utf8_lossy(&r.body).into_owned()),
        }));
    }
    println!("report {}", json!({ "intents": report }));
    Ok(())
}
