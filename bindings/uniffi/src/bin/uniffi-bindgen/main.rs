//! `uniffi-bindgen` of the same UniFFI version as the library: generates the Kotlin, Swift and
//! Python sources from the built `libidemdb_uniffi` (library mode), then makes the bindings'
//! own changes to the generated Kotlin and Python ([`patch`]).
//!
//! ```sh
//! cargo run -p idemdb-uniffi --features cli --bin uniffi-bindgen -- \
//!   generate --library target/debug/libidemdb_uniffi.so --language kotlin --out-dir out
//! ```

mod patch;

use std::path::PathBuf;
use std::process::ExitCode;

fn main() -> ExitCode {
    uniffi::uniffi_bindgen_main();
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) != Some("generate") {
        return ExitCode::SUCCESS;
    }
    let Some(out_dir) = out_dir(&args) else {
        eprintln!("uniffi-bindgen: give --out-dir: the generated sources are patched there");
        return ExitCode::FAILURE;
    };
    match patch::patch_dir(&out_dir) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("uniffi-bindgen: {error}");
            ExitCode::FAILURE
        }
    }
}

/// The value of `--out-dir` / `-o` (`--out-dir DIR` or `--out-dir=DIR`).
fn out_dir(args: &[String]) -> Option<PathBuf> {
    args.iter().enumerate().find_map(|(i, arg)| match arg.split_once('=') {
        Some(("--out-dir" | "-o", value)) => Some(PathBuf::from(value)),
        _ if arg == "--out-dir" || arg == "-o" => args.get(i + 1).map(PathBuf::from),
        _ => None,
    })
}
