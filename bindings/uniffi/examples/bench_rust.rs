//! The Rust baseline of the bindings benchmark (bindings/uniffi/scripts/bench.sh): `n` reserve +
//! complete pairs of new keys on the store file at `path`, through the `idemdb` crate directly.
//! Prints `rust ops/s`.
//!
//! ```sh
//! cargo run --release -p idemdb-uniffi --example bench_rust -- FILE N PREFIX
//! ```

use std::time::Instant;

use idemdb::{Fingerprint, IdempotencyKey, Reservation, Scope, Store};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let path = args.next().ok_or("usage: bench_rust FILE N PREFIX")?;
    let n: usize = args.next().ok_or("N")?.parse()?;
    let prefix = args.next().unwrap_or_else(|| "rust".into());
    let store = Store::open(&path)?;
    let scope = Scope::new("bench", "pay")?;
    let fingerprint = Fingerprint::of_canonical_json(b"{\"amount\":\"1.00\"}");
    let started = Instant::now();
    for i in 0..n {
        let key = IdempotencyKey::new(format!("{prefix}-{i}"))?;
        let Reservation::Acquired(lease) = store.reserve(&scope, &key, &fingerprint)? else {
            return Err(format!("{key:?} was not acquired").into());
        };
        store.complete(&lease, b"{\"ok\":true}".to_vec())?;
    }
    println!("rust {:.1}", n as f64 / started.elapsed().as_secs_f64());
    Ok(())
}
