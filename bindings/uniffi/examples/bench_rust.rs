//! The Rust baseline of the bindings benchmark (bindings/uniffi/scripts/bench.sh): `n` reserve +
//! complete pairs of new keys on the store file at `path`, through the `idemdb` crate directly.
//! Prints `rust ops/s`.
//!
//! ```sh
//! cargo run --release -p idemdb-uniffi --example bench_rust -- FILE N PREFIX
//! ```

use std::time::Instant;

use idemdb::{Fingerprint, IdempotencyKey, Reservation, Reserve, Scope, Store};

/// `n` reserve + complete pairs of new keys; pairs per second.
fn pairs(store: &Store, prefix: &str, n: usize) -> Result<f64, Box<dyn std::error::Error>> {
    let scope = Scope::new("bench", "pay")?;
    let fingerprint = Fingerprint::of_canonical_json(b"{\"amount\":\"1.00\"}");
    let started = Instant::now();
    for i in 0..n {
        let key = IdempotencyKey::new(format!("{prefix}-{i}"))?;
        let Reservation::Acquired(lease) = store.reserve(Reserve::new(&scope, &key, &fingerprint))? else {
            return Err(format!("{key:?} was not acquired").into());
        };
        store.complete(&lease, b"{\"ok\":true}".to_vec())?;
    }
    Ok(n as f64 / started.elapsed().as_secs_f64())
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let path = args.next().ok_or("usage: bench_rust FILE N PREFIX")?;
    let n: usize = args.next().ok_or("N")?.parse()?;
    let prefix = args.next().unwrap_or_else(|| "rust".into());
    let store = std::sync::Arc::new(Store::open(&path)?);
    // On the main thread, then the same loop on a spawned thread (where the bindings' `…Async`
    // forms run it).
    println!("rust {:.1}", pairs(&store, &format!("{prefix}-main"), n)?);
    let on_thread = std::sync::Arc::clone(&store);
    let worker =
        std::thread::spawn(move || pairs(&on_thread, &format!("{prefix}-thread"), n).map_err(|e| e.to_string()));
    println!("rust-thread {:.1}", worker.join().map_err(|_| "the thread panicked")??);
    Ok(())
}
