//! Storage backends that call JavaScript: an OPFS `FileSystemSyncAccessHandle` (dedicated
//! workers) and host callbacks (an edge host's storage, a Node file descriptor).
//!
//! This is the only file of the crate with `unsafe`: redb requires `Send + Sync` backends, and
//! JS values are neither.
#![allow(unsafe_code)]

use wasm_bindgen::prelude::*;
use web_sys::{FileSystemReadWriteOptions, FileSystemSyncAccessHandle};

#[wasm_bindgen]
extern "C" {
    /// Storage provided by the host, as an object with five synchronous methods (see the
    /// `HostStorage` type of the npm package).
    #[wasm_bindgen(typescript_type = "HostStorage")]
    #[derive(Debug, Clone)]
    pub type HostStorage;

    #[wasm_bindgen(method, catch)]
    fn read(this: &HostStorage, offset: f64, out: &mut [u8]) -> Result<(), JsValue>;
    #[wasm_bindgen(method, catch)]
    fn write(this: &HostStorage, offset: f64, data: &[u8]) -> Result<(), JsValue>;
    #[wasm_bindgen(method, catch)]
    fn size(this: &HostStorage) -> Result<f64, JsValue>;
    #[wasm_bindgen(method, catch)]
    fn truncate(this: &HostStorage, len: f64) -> Result<(), JsValue>;
    #[wasm_bindgen(method, catch)]
    fn flush(this: &HostStorage) -> Result<(), JsValue>;
}

/// A redb backend over JS storage.
#[derive(Debug)]
pub(crate) enum JsBackend {
    /// An OPFS file opened with `createSyncAccessHandle()`.
    Opfs(FileSystemSyncAccessHandle),
    /// Host callbacks.
    Host(HostStorage),
}

// Safety: wasm32-unknown-unknown, as these bindings are built, has one thread: no value of
// this type can be reached from a second thread, because there is none. redb's `Send + Sync`
// bounds exist for native builds, where a store is shared across threads. Built with the
// `atomics` target feature (wasm threads), JS values would be confined to the thread that made
// them and this would be unsound; the compile_error below refuses that build.
unsafe impl Send for JsBackend {}
// Safety: as above.
unsafe impl Sync for JsBackend {}

#[cfg(target_feature = "atomics")]
compile_error!("idemdb-wasm's JS storage backends are single-threaded; build without the atomics target feature");

fn io(action: &str, error: JsValue) -> std::io::Error {
    let message = match error.dyn_ref::<js_sys::Error>() {
        Some(error) => String::from(error.message()),
        None => error.as_string().unwrap_or_else(|| format!("{error:?}")),
    };
    std::io::Error::other(format!("{action}: {message}"))
}

fn at(offset: u64) -> f64 {
    // Offsets stay far below 2^53 (a store of 8 PiB), so the conversion is exact.
    offset as f64
}

impl redb::StorageBackend for JsBackend {
    fn len(&self) -> std::io::Result<u64> {
        let size = match self {
            JsBackend::Opfs(handle) => handle.get_size().map_err(|e| io("OPFS getSize", e))?,
            JsBackend::Host(host) => host.size().map_err(|e| io("host size", e))?,
        };
        if !(size >= 0.0 && size.fract() == 0.0) {
            return Err(std::io::Error::other(format!("storage reported an invalid size {size}")));
        }
        Ok(size as u64)
    }

    fn read(&self, offset: u64, out: &mut [u8]) -> std::io::Result<()> {
        match self {
            JsBackend::Opfs(handle) => {
                let options = FileSystemReadWriteOptions::new();
                options.set_at(at(offset));
                let read = handle.read_with_u8_array_and_options(out, &options).map_err(|e| io("OPFS read", e))?;
                if (read as usize) != out.len() {
                    return Err(std::io::Error::new(
                        std::io::ErrorKind::UnexpectedEof,
                        format!("OPFS read {read} of {} bytes at {offset}", out.len()),
                    ));
                }
                Ok(())
            }
            JsBackend::Host(host) => host.read(at(offset), out).map_err(|e| io("host read", e)),
        }
    }

    fn set_len(&self, len: u64) -> std::io::Result<()> {
        match self {
            JsBackend::Opfs(handle) => handle.truncate_with_f64(at(len)).map_err(|e| io("OPFS truncate", e)),
            JsBackend::Host(host) => host.truncate(at(len)).map_err(|e| io("host truncate", e)),
        }
    }

    fn sync_data(&self) -> std::io::Result<()> {
        match self {
            JsBackend::Opfs(handle) => handle.flush().map_err(|e| io("OPFS flush", e)),
            JsBackend::Host(host) => host.flush().map_err(|e| io("host flush", e)),
        }
    }

    fn write(&self, offset: u64, data: &[u8]) -> std::io::Result<()> {
        match self {
            JsBackend::Opfs(handle) => {
                let options = FileSystemReadWriteOptions::new();
                options.set_at(at(offset));
                let written =
                    handle.write_with_u8_array_and_options(data, &options).map_err(|e| io("OPFS write", e))?;
                if (written as usize) != data.len() {
                    return Err(std::io::Error::new(
                        std::io::ErrorKind::WriteZero,
                        format!("OPFS wrote {written} of {} bytes at {offset} (quota?)", data.len()),
                    ));
                }
                Ok(())
            }
            JsBackend::Host(host) => host.write(at(offset), data).map_err(|e| io("host write", e)),
        }
    }
}
