//! Canonicalise + fingerprint (RFC 8785, BLAKE3) against parsing the same JSON with
//! serde_json alone.

use std::hint::black_box;
use std::time::{Duration, Instant};

use idemdb::Canonicalizer;

use crate::data::{Res, mix};
use crate::measure::median;

pub(crate) struct CanonRow {
    pub(crate) bytes: usize,
    /// MB/s (10^6 bytes per second) of `Canonicalizer::fingerprint`.
    pub(crate) fingerprint_mbs: f64,
    /// MB/s of `serde_json::from_slice::<Value>`.
    pub(crate) parse_mbs: f64,
}

/// A payment-like JSON object of about `target` bytes: customer, addresses, metadata and as
/// many line items as it takes, with keys in a non-canonical order and some whitespace.
pub(crate) fn payment_document(target: usize) -> String {
    let mut doc = String::from(
        r#"{"trace_id": "t-9f1c2e7a", "currency": "brl", "amount": "1050.00", "capture": true,
  "customer": {"name": "Ana Souza", "id": "cus_8Hc2kL0aQ", "email": "ana.souza@example.com",
    "address": {"line1": "Rua das Flores, 123", "city": "São Paulo", "postal_code": "01234-567", "country": "BR"}},
  "metadata": {"order_id": "ord_552013", "channel": "mobile", "campaign": null, "risk_score": 12.5},
  "payment_method": {"type": "card", "card": {"brand": "visa", "last4": "4242", "exp_month": 12, "exp_year": 2031}},
  "line_items": ["#,
    );
    let mut i = 0u64;
    while doc.len() + 120 < target || i == 0 {
        if i > 0 {
            doc.push(',');
        }
        let r = mix(i);
        doc.push_str(&format!(
            r#"{{"sku": "SKU-{:06}", "quantity": {}, "unit_amount": "{}.{:02}", "description": "item {} \u00e9 {:x}", "tax_rate": 0.{}}}"#,
            r % 1_000_000,
            1 + r % 5,
            r % 500,
            r % 100,
            i,
            r >> 40,
            r % 30
        ));
        i += 1;
    }
    doc.push_str("]}");
    doc
}

/// MB/s of `f` (over a `bytes`-long input) run repeatedly for `each`.
fn throughput(bytes: usize, each: Duration, mut f: impl FnMut() -> Res<()>) -> Res<f64> {
    let start = Instant::now();
    let mut iterations = 0u64;
    while start.elapsed() < each {
        f()?;
        iterations += 1;
    }
    Ok(iterations as f64 * bytes as f64 / start.elapsed().as_secs_f64() / 1e6)
}

pub(crate) fn run(sizes: &[usize], rounds: usize, each: Duration) -> Res<Vec<CanonRow>> {
    let canon = Canonicalizer::new();
    let mut rows = Vec::new();
    for &size in sizes {
        let doc = payment_document(size);
        let body = doc.as_bytes();
        // The document must be valid and canonicalisable.
        canon.fingerprint(body)?;
        let mut fingerprint_mbs = Vec::with_capacity(rounds);
        let mut parse_mbs = Vec::with_capacity(rounds);
        // Alternate the two so both see the same machine state.
        for _ in 0..rounds {
            fingerprint_mbs.push(throughput(body.len(), each, || {
                black_box(canon.fingerprint(black_box(body))?);
                Ok(())
            })?);
            parse_mbs.push(throughput(body.len(), each, || {
                black_box(serde_json::from_slice::<serde_json::Value>(black_box(body))?);
                Ok(())
            })?);
        }
        rows.push(CanonRow {
            bytes: body.len(),
            fingerprint_mbs: median(&fingerprint_mbs),
            parse_mbs: median(&parse_mbs),
        });
    }
    Ok(rows)
}
