//! Randomness from the platform's CSPRNG, `crypto.getRandomValues` (browsers, workers, Node
//! 20+, workerd).

use idemdb::IdempotencyKey;
use wasm_bindgen::prelude::*;

use crate::convert::js_error;

#[wasm_bindgen]
extern "C" {
    #[wasm_bindgen(catch, js_namespace = crypto, js_name = getRandomValues)]
    fn get_random_values(buf: &mut [u8]) -> Result<JsValue, JsValue>;
}

fn fill(buf: &mut [u8]) -> Result<(), JsValue> {
    get_random_values(buf).map(drop).map_err(|error| {
        let cause = error
            .dyn_ref::<js_sys::Error>()
            .map(|e| String::from(e.message()))
            .unwrap_or_else(|| "not available".into());
        js_error(
            idemdb::ErrorCode::NoRandomness,
            format!(
                "crypto.getRandomValues failed ({cause}); in an edge worker, open the store inside a request handler, \
                 not at the top level of a module"
            ),
        )
    })
}

/// 32 random bytes for a new store's secret.
pub(crate) fn seed() -> Result<[u8; 32], JsValue> {
    let mut seed = [0u8; 32];
    fill(&mut seed)?;
    Ok(seed)
}

/// A UUID v4 idempotency key.
pub(crate) fn key() -> Result<IdempotencyKey, JsValue> {
    let mut bytes = [0u8; 16];
    fill(&mut bytes)?;
    Ok(IdempotencyKey::from_random_bytes(bytes))
}
