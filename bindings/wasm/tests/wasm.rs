//! The bindings as JavaScript sees them, inside wasm32 (run by `wasm-bindgen-test-runner` in
//! Node): stores on every backend that needs no browser, snapshots, typed JS errors, keys.
#![cfg(target_arch = "wasm32")]

use idemdb_wasm::{HostStorage, WasmStore, new_key};
use js_sys::Reflect;
use wasm_bindgen::prelude::*;
use wasm_bindgen_test::wasm_bindgen_test;

#[wasm_bindgen(inline_js = "
export function memoryHost() {
  const host = { bytes: new Uint8Array(0), flushes: 0, failWrites: false };
  host.read = (offset, out) => out.set(host.bytes.subarray(offset, offset + out.length));
  host.write = (offset, data) => { if (host.failWrites) throw new Error('disk full'); host.bytes.set(data, offset); };
  host.size = () => host.bytes.length;
  host.truncate = (length) => { const next = new Uint8Array(length); next.set(host.bytes.subarray(0, Math.min(length, host.bytes.length))); host.bytes = next; };
  host.flush = () => { host.flushes += 1; };
  return host;
}
")]
extern "C" {
    fn memoryHost() -> HostStorage;
}

fn get(value: &JsValue, key: &str) -> JsValue {
    Reflect::get(value, &key.into()).expect("property")
}

fn string(value: &JsValue, key: &str) -> String {
    get(value, key).as_string().expect("a string")
}

fn request(json: &str) -> Vec<u8> {
    json.as_bytes().to_vec()
}

#[wasm_bindgen_test]
fn memory_store_intents_and_snapshot_round_trip() {
    let store = WasmStore::open_memory(None, JsValue::NULL).expect("open");
    let intent =
        store.create_intent("me", "pay", None, &request(r#"{"b":1,"a":2}"#), JsValue::NULL, None).expect("create");
    assert_eq!(string(&intent, "state"), "pending");
    let key = string(&intent, "key");
    assert_eq!(key.len(), 36);
    let canonical = js_sys::Uint8Array::from(get(&intent, "request")).to_vec();
    assert_eq!(canonical, br#"{"a":2,"b":1}"#);

    let snapshot = store.export_snapshot().expect("export");
    let copy = WasmStore::open_memory(Some(snapshot), JsValue::NULL).expect("reopen");
    let pending = copy.pending_intents().expect("pending");
    assert_eq!(pending.length(), 1);
    assert_eq!(string(&pending.get(0), "key"), key);
}

#[wasm_bindgen_test]
fn host_backend_flushes_once_per_commit_and_reports_failed_writes() {
    let host = memoryHost();
    let store = WasmStore::open_host(host.clone(), JsValue::NULL).expect("open");
    let flushes = || get(&host, "flushes").as_f64().expect("count");
    let before = flushes();
    store.create_intent("me", "pay", Some("k-1".into()), &request("{}"), JsValue::NULL, None).expect("create");
    assert_eq!(flushes() - before, 1.0);

    Reflect::set(&host, &"failWrites".into(), &true.into()).expect("set");
    let error =
        store.create_intent("me", "pay", Some("k-2".into()), &request("{}"), JsValue::NULL, None).expect_err("fails");
    assert!(error.is_instance_of::<js_sys::Error>());
    assert_eq!(string(&error, "code"), "IDEMDB_STORAGE");
    assert!(string(&error, "message").contains("disk full"));

    Reflect::set(&host, &"failWrites".into(), &false.into()).expect("set");
    let mut store = store;
    store.close();
    let reopened = WasmStore::open_host(host, JsValue::NULL).expect("reopen");
    let all = reopened.list_intents().expect("list");
    assert_eq!(all.length(), 1, "the failed intent was not stored; the earlier one was");
    assert_eq!(string(&all.get(0), "key"), "k-1");
}

#[wasm_bindgen_test]
fn errors_are_js_errors_with_stable_codes() {
    let store = WasmStore::open_memory(None, JsValue::NULL).expect("open");
    let cases: [(Result<JsValue, JsValue>, &str); 3] = [
        (store.create_intent("me", "pay", None, &request("{oops"), JsValue::NULL, None), "IDEMDB_INVALID_REQUEST"),
        (
            store.create_intent("me", "pay", Some("bad key".into()), &request("{}"), JsValue::NULL, None),
            "IDEMDB_INVALID_KEY",
        ),
        (store.abandon_intent("me", "pay", "missing", "reason"), "IDEMDB_NOT_FOUND"),
    ];
    for (result, code) in cases {
        let error = result.expect_err(code);
        assert!(error.is_instance_of::<js_sys::Error>(), "{code} is an Error");
        assert_eq!(string(&error, "code"), code);
        assert_eq!(string(&error, "name"), "IdemdbError");
    }
    // Names are parsed by the core's vocabularies: an intent state or attempt outcome that is
    // not one of them is refused with a typed error, never taken as another.
    let intent = store.create_intent("me", "pay", None, &request("{}"), JsValue::NULL, None).expect("create");
    let key = string(&intent, "key");
    let unknown: [Result<JsValue, JsValue>; 3] = [
        store.record_attempt("me", "pay", &key, "teleported", None),
        store.record_attempt("me", "pay", &key, "Sent", None),
        store.intent_page(None, 10, Some("dormant".into())),
    ];
    for result in unknown {
        let error = result.expect_err("an unknown name");
        assert!(error.is_instance_of::<js_sys::Error>());
        assert_eq!(string(&error, "code"), "IDEMDB_UNKNOWN_NAME");
    }
    for outcome in idemdb::AttemptOutcomeKind::ALL {
        let status = (*outcome == idemdb::AttemptOutcomeKind::Status).then_some(503);
        store.record_attempt("me", "pay", &key, outcome.as_str(), status).expect("every outcome of the core");
    }
    for state in idemdb::IntentStateKind::ALL {
        store.intent_page(None, 10, Some(state.as_str().into())).expect("every intent state of the core");
    }
    let mut store = store;
    store.close();
    assert_eq!(string(&store.pending_intents().map(JsValue::from).expect_err("closed"), "code"), "IDEMDB_CLOSED");
}

#[wasm_bindgen_test]
fn keys_are_uuid_v4_from_the_platform_csprng() {
    let a = new_key().expect("key");
    let b = new_key().expect("key");
    assert_ne!(a, b);
    assert_eq!(&a[14..15], "4");
    assert!(matches!(&a[19..20], "8" | "9" | "a" | "b"));
}

/// The shared decision table against the redb store compiled to wasm32 (memory backend),
/// through the store interface: the same answers as the native build.
#[wasm_bindgen_test]
fn decision_table_on_the_wasm32_build() {
    use idemdb::{AsyncStore, ManualClock, Policy, Store};
    use idemdb_interface::conformance::{self, Backend};

    struct Stores(ManualClock, usize);
    impl Backend for Stores {
        type Store = AsyncStore;
        async fn open(&mut self, operations: &[(&'static str, Policy)]) -> AsyncStore {
            self.1 += 1;
            // A clock of its own per store: time only goes forward from its open.
            self.0 = ManualClock::new(idemdb::Clock::now(&self.0).as_millis());
            let mut builder = Store::builder().clock(self.0.clone()).secret_seed([7; 32]);
            for (operation, policy) in operations {
                builder = builder.policy(*operation, policy.clone());
            }
            builder.in_memory().expect("open a memory store in wasm32").asynchronous()
        }
        fn set_time(&mut self, millis: u64) {
            self.0.set(millis);
        }
    }

    let mut stores = Stores(ManualClock::new(conformance::T), 0);
    // Every future of the redb store is ready when first polled on wasm32 (no threads).
    let cases = pollster::block_on(conformance::run_decision_table(&mut stores, "wasm32 memory store"));
    assert_eq!(cases, stores.1);
    assert!(cases >= 50);
    // The workflow primitives (outbox, inbox, jobs) tell the same stories in wasm32.
    assert_eq!(pollster::block_on(conformance::run_workflow_stories(&mut stores, "wasm32 memory store")), 6);
}
