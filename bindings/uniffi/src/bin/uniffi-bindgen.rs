//! `uniffi-bindgen` of the same UniFFI version as the library: generates the Kotlin, Swift and
//! Python sources from the built `libidemdb_uniffi` (library mode).
//!
//! ```sh
//! cargo run -p idemdb-uniffi --features cli --bin uniffi-bindgen -- \
//!   generate --library target/debug/libidemdb_uniffi.so --language kotlin --out-dir out
//! ```

fn main() {
    uniffi::uniffi_bindgen_main()
}
