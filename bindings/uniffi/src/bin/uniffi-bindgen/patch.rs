//! The bindings' changes to what UniFFI generates, where its runtime code breaks a promise of
//! the store and no setting of UniFFI changes it:
//!
//! - **Cancelled async calls** (Kotlin, Python). UniFFI's helper stops waiting for a call when
//!   the coroutine or task is cancelled, while the call goes on in Rust and commits: a
//!   `reserveAsync` leaves a key reserved whose lease nobody got, a `completeAsync` commits
//!   while its caller sees `CancellationException`. The helper is put behind one that does not
//!   start a call for a cancelled caller and, once a call has started, waits for it and
//!   delivers its result (`foreign/call_async.kt`, `foreign/call_async.py`). Swift needs no
//!   change: its helper already waits for the call (`withUnsafeContinuation` ignores
//!   cancellation).
//! - **Kotlin's `close()`** frees the handle, so `isClosed()` and every later call throw an
//!   untyped `IllegalStateException`; it closes the store instead (`foreign/close.kt`).
//! - **Lone surrogates** (Kotlin, Python) fail in the string conversion with the platform's
//!   exception (`MalformedInputException`, `UnicodeEncodeError`); they get the store's typed
//!   `InvalidArgument` (`foreign/to_utf8.kt`, `foreign/check_lower.py`).
//!
//! Each change replaces a piece of generated text that must be found exactly once: a UniFFI
//! upgrade that changes it makes generation fail here, naming the change, rather than ship
//! bindings without it.

use std::fs;
use std::path::{Path, PathBuf};

/// One replacement in a generated file.
struct Patch {
    /// What it is for, named in errors.
    why: &'static str,
    /// Where the search starts: after this text (found once); the anchor must then come before
    /// the next Kotlin class. `None`: the whole file, where the anchor must be found once.
    within: Option<&'static str>,
    /// The generated text that is replaced.
    anchor: &'static str,
    /// What replaces it.
    replacement: String,
}

/// Where a code string of the core goes in the foreign snippets, so that none is spelled
/// there by hand.
const INVALID_ARGUMENT: &str = "@INVALID_ARGUMENT@";

fn snippet(text: &str) -> String {
    text.replace(INVALID_ARGUMENT, idemdb::ErrorCode::InvalidArgument.as_str())
}

/// The changes to the Kotlin module (`idemdb_uniffi.kt`).
fn kotlin() -> Vec<Patch> {
    const HELPER: &str = "internal suspend fun<T, F, E: kotlin.Exception> uniffiRustCallAsync(";
    vec![
        Patch {
            why: "imports of the async helper",
            within: None,
            anchor: "import kotlinx.coroutines.suspendCancellableCoroutine\n",
            replacement: [
                "import kotlinx.coroutines.suspendCancellableCoroutine",
                "import kotlinx.coroutines.NonCancellable",
                "import kotlinx.coroutines.currentCoroutineContext",
                "import kotlinx.coroutines.ensureActive",
                "import kotlinx.coroutines.withContext\n",
            ]
            .join("\n"),
        },
        Patch {
            why: "async calls run to their end once started",
            within: None,
            anchor: HELPER,
            replacement: snippet(include_str!("foreign/call_async.kt"))
                + &HELPER.replace("uniffiRustCallAsync(", "uniffiRustCallAsyncStarted("),
        },
        Patch {
            why: "IdemStore.close() closes the store",
            within: Some("\nopen class IdemStore:"),
            anchor: "    @Synchronized\n    override fun close() {\n        this.destroy()\n    }\n",
            replacement: snippet(include_str!("foreign/close.kt")),
        },
        Patch {
            why: "a lone surrogate is a typed error",
            within: None,
            anchor: "    fun toUtf8(value: String): ByteBuffer {
        // Make sure we don't have invalid UTF-16, check for lone surrogates.
        return Charsets.UTF_8.newEncoder().run {
            onMalformedInput(CodingErrorAction.REPORT)
            encode(CharBuffer.wrap(value))
        }
    }
",
            replacement: snippet(include_str!("foreign/to_utf8.kt")),
        },
    ]
}

/// The changes to the Python module (`idemdb_uniffi.py`).
fn python() -> Vec<Patch> {
    const HELPER: &str = "async def _uniffi_rust_call_async(rust_future, ffi_poll, ffi_complete, ffi_free, lift_func, error_ffi_converter):";
    vec![
        Patch {
            why: "async calls run to their end once started",
            within: None,
            anchor: HELPER,
            replacement: snippet(include_str!("foreign/call_async.py"))
                + &HELPER.replace("_uniffi_rust_call_async(", "_uniffi_rust_call_async_started("),
        },
        Patch {
            why: "a lone surrogate is a typed error",
            within: None,
            anchor: "    @staticmethod
    def check_lower(value):
        if not isinstance(value, str):
            raise TypeError(\"argument must be str, not {}\".format(type(value).__name__))
        return value
",
            replacement: snippet(include_str!("foreign/check_lower.py")),
        },
    ]
}

/// Applies `patches` to `text`.
fn apply(text: &str, patches: &[Patch]) -> Result<String, String> {
    let mut text = text.to_string();
    for patch in patches {
        let at = find(&text, patch).map_err(|found| {
            format!(
                "cannot make the change \"{}\": the generated text it replaces was found {found} times, not once \
                 (did UniFFI's output change? see src/bin/uniffi-bindgen/patch.rs)",
                patch.why
            )
        })?;
        text.replace_range(at..at + patch.anchor.len(), &patch.replacement);
    }
    Ok(text)
}

/// Where `patch.anchor` is, or how many times it was found instead of once.
fn find(text: &str, patch: &Patch) -> Result<usize, usize> {
    let Some(marker) = patch.within else {
        let found: Vec<usize> = text.match_indices(patch.anchor).map(|(at, _)| at).collect();
        return if let [at] = found[..] { Ok(at) } else { Err(found.len()) };
    };
    let [start] = text.match_indices(marker).map(|(at, _)| at + marker.len()).collect::<Vec<_>>()[..] else {
        return Err(0);
    };
    let section = &text[start..];
    let end = section.find("\nopen class ").unwrap_or(section.len());
    section[..end].find(patch.anchor).map(|at| start + at).ok_or(0)
}

/// Patches every generated module under `dir` (the ones of the languages just generated, and
/// any left from an earlier run, which are patched already and left alone).
pub(crate) fn patch_dir(dir: &Path) -> Result<(), String> {
    for file in files(dir).map_err(|error| format!("reading {}: {error}", dir.display()))? {
        let (patches, done) = match file.file_name().and_then(|name| name.to_str()) {
            Some("idemdb_uniffi.kt") => (kotlin(), "uniffiRustCallAsyncStarted"),
            Some("idemdb_uniffi.py") => (python(), "_uniffi_rust_call_async_started"),
            _ => continue,
        };
        let text = fs::read_to_string(&file).map_err(|error| format!("reading {}: {error}", file.display()))?;
        if text.contains(done) {
            continue;
        }
        let patched = apply(&text, &patches).map_err(|error| format!("{}: {error}", file.display()))?;
        fs::write(&file, patched).map_err(|error| format!("writing {}: {error}", file.display()))?;
    }
    Ok(())
}

/// Every file under `dir`.
fn files(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    let mut found = Vec::new();
    for entry in fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_dir() {
            found.extend(files(&path)?);
        } else {
            found.push(path);
        }
    }
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn patch(within: Option<&'static str>, anchor: &'static str) -> Patch {
        Patch { why: "test", within, anchor, replacement: "NEW".into() }
    }

    #[test]
    fn an_anchor_found_once_is_replaced() {
        assert_eq!(apply("a OLD b", &[patch(None, "OLD")]).unwrap(), "a NEW b");
    }

    #[test]
    fn an_anchor_missing_or_repeated_fails_naming_the_change() {
        let missing = apply("a b", &[patch(None, "OLD")]).unwrap_err();
        assert!(missing.contains("\"test\"") && missing.contains("found 0 times"), "{missing}");
        let twice = apply("OLD OLD", &[patch(None, "OLD")]).unwrap_err();
        assert!(twice.contains("found 2 times"), "{twice}");
    }

    #[test]
    fn within_a_class_only_that_class_is_changed() {
        let text = "\nopen class A: x\n close\n\nopen class B: y\n close\n";
        assert_eq!(
            apply(text, &[patch(Some("\nopen class B:"), "close")]).unwrap(),
            "\nopen class A: x\n close\n\nopen class B: y\n NEW\n"
        );
        assert!(
            apply("\nopen class B: y\n\nopen class A: close\n", &[patch(Some("\nopen class B:"), "close")]).is_err()
        );
    }

    #[test]
    fn snippets_carry_the_cores_code() {
        assert!(!snippet(include_str!("foreign/to_utf8.kt")).contains(INVALID_ARGUMENT));
        let code = format!("\"{}\"", idemdb::ErrorCode::InvalidArgument.as_str());
        assert!(snippet(include_str!("foreign/check_lower.py")).contains(&code));
    }
}
