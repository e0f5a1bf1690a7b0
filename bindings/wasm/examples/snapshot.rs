//! Native side of the cross-read test: a store written in a browser (or Node, or workerd) opens
//! with the Rust crate, and a store written here opens there.
//!
//! ```text
//! cargo run -p idemdb-wasm --example snapshot -- read FILE    # prints intents and records
//! cargo run -p idemdb-wasm --example snapshot -- write FILE   # writes the fixture below
//! cargo run -p idemdb-wasm --example snapshot -- hold FILE N   # holds FILE, creates N intents
//! ```
//!
//! `hold` is the native side of the cross-runtime lock test: it opens FILE (printing
//! `refused <code> <message>` and exiting 3 when the open is refused), creates N intents,
//! printing `ack <key>` once each is stored, prints `held`, keeps the store open until its
//! standard input closes, and closes it.

use std::process::ExitCode;

use idemdb::{
    AttemptOutcome, Canonicalizer, Fingerprint, IdempotencyKey, ListFilter, Reservation, Reserve, Scope, Store,
};

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
    let Reservation::Acquired(lease) = store.reserve(Reserve::new(&scope, &record_key, &fingerprint))? else {
        return Err("fixture key already used".into());
    };
    store.complete(&lease, b"native-body".to_vec())?;
    println!("fingerprint {}", fingerprint.to_hex());
    Ok(())
}

fn hold(path: &str, count: &str) -> Result<ExitCode, Box<dyn std::error::Error>> {
    use std::io::Write;
    let count: u32 = count.parse()?;
    let store = match Store::open(path) {
        Ok(store) => store,
        Err(refused) => {
            println!("refused {} {refused}", refused.code().as_str());
            return Ok(ExitCode::from(3));
        }
    };
    let scope = Scope::new("native", "hold")?;
    let mut out = std::io::stdout().lock();
    for _ in 0..count {
        let key = Store::new_key()?;
        store.create_intent(&scope, &key, br#"{"from":"native"}"#, &Canonicalizer::new())?;
        writeln!(out, "ack {}", key.as_str())?;
        out.flush()?;
    }
    writeln!(out, "held")?;
    out.flush()?;
    drop(out);
    let mut line = String::new();
    while std::io::stdin().read_line(&mut line)? > 0 {}
    drop(store);
    Ok(ExitCode::SUCCESS)
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.as_slice() {
        [cmd, path] if cmd == "read" => read(path),
        [cmd, path] if cmd == "write" => write(path),
        [cmd, path, count] if cmd == "hold" => match hold(path, count) {
            Ok(code) => return code,
            Err(error) => Err(error),
        },
        _ => Err("usage: snapshot (read|write) FILE | snapshot hold FILE N".into()),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error}");
            ExitCode::FAILURE
        }
    }
}
