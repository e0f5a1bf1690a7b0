//! Native side of the cross-read test: a store written in a browser (or Node, or workerd) opens
//! with the Rust crate, and a store written here opens there.
//!
//! ```text
//! cargo run -p idemdb-wasm --example snapshot -- read FILE    # prints intents and records
//! cargo run -p idemdb-wasm --example snapshot -- write FILE   # writes the fixture below
//! ```

use std::process::ExitCode;

use idemdb::{AttemptOutcome, Canonicalizer, Fingerprint, IdempotencyKey, ListFilter, Reservation, Scope, Store};

fn read(path: &str) -> Result<(), Box<dyn std::error::Error>> {
    let mut store = Store::open(path)?;
    let report = store.verify()?;
    println!("verify {}", if report.is_ok() { "ok" } else { "problems" });
    for intent in store.all_intents()? {
        println!(
            "intent {} {} {} {} attempts={} request={}",
            intent.scope.tenant(),
            intent.scope.operation(),
            intent.key.as_str(),
            intent.state.name(),
            intent.attempts,
            String::from_utf8_lossy(&intent.request)
        );
    }
    for record in store.list(&ListFilter::default())?.records {
        let scope = &record.scoped.scope;
        let body = match &record.record.state {
            idemdb::State::Completed { result, .. } => String::from_utf8_lossy(result).into_owned(),
            _ => String::new(),
        };
        println!(
            "record {} {} {} {} body={body}",
            scope.tenant(),
            scope.operation(),
            record.scoped.key.as_str(),
            record.record.state.kind().as_str()
        );
    }
    Ok(())
}

fn write(path: &str) -> Result<(), Box<dyn std::error::Error>> {
    let store = Store::open(path)?;
    let scope = Scope::new("native", "pay")?;
    let key = IdempotencyKey::new("native-intent-1")?;
    store.create_intent(&scope, &key, br#"{"from":"native","amount":"1.00"}"#, &Canonicalizer::new())?;
    store.record_attempt(&scope, &key, AttemptOutcome::NetworkError)?;
    let record_key = IdempotencyKey::new("native-record-1")?;
    let fingerprint = Fingerprint::of_canonical_json(br#"{"from":"native"}"#);
    let Reservation::Acquired(lease) = store.reserve(&scope, &record_key, &fingerprint)? else {
        return Err("fixture key already used".into());
    };
    store.complete(&lease, b"native-body".to_vec())?;
    println!("fingerprint {}", fingerprint.to_hex());
    Ok(())
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.as_slice() {
        [cmd, path] if cmd == "read" => read(path),
        [cmd, path] if cmd == "write" => write(path),
        _ => Err("usage: snapshot (read|write) FILE".into()),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error}");
            ExitCode::FAILURE
        }
    }
}
