//! The running example (a child process on port 0) on redb or PostgreSQL, HTTP calls, the
//! ledger's effect counts, and a proxy that loses responses.

use std::collections::HashMap;
use std::ffi::OsString;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};

use serde_json::Value;
use tokio::io::AsyncReadExt;
use tokio::net::{TcpListener, TcpStream};

/// The example server, started by the test, listening on a port the system chose.
pub struct Server {
    child: Child,
    pub url: String,
}

impl Server {
    /// Starts `payments-example --addr 127.0.0.1:0 --data DATA EXTRA...` and waits for its
    /// `listening on` line.
    pub fn start(data: &Path, extra: &[&str]) -> Server {
        Server::start_with([OsString::from("--data"), data.into()], extra)
    }

    /// Starts `payments-example --addr 127.0.0.1:0 BACKEND... EXTRA...` and waits for its
    /// `listening on` line.
    pub fn start_with(backend: impl IntoIterator<Item = OsString>, extra: &[&str]) -> Server {
        let mut child = Command::new(env!("CARGO_BIN_EXE_payments-example"))
            .args(["--addr", "127.0.0.1:0"])
            .args(backend)
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("the example starts");
        let mut stdout = BufReader::new(child.stdout.take().expect("stdout"));
        let mut line = String::new();
        stdout.read_line(&mut line).expect("read the first line");
        let Some(url) = line.trim().strip_prefix("listening on ") else {
            let mut stderr = String::new();
            child.stderr.take().expect("stderr").read_to_string(&mut stderr).ok();
            panic!("the example did not start: {line:?} {stderr}");
        };
        Server { url: url.to_string(), child }
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// SIGTERM, the normal shutdown: how the process ended and what it wrote on stderr.
    #[cfg(unix)]
    pub fn stop(mut self) -> (std::process::ExitStatus, String) {
        let pid = self.child.id().to_string();
        assert!(Command::new("kill").args(["-TERM", &pid]).status().expect("kill").success(), "the process runs");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        let status = loop {
            if let Some(status) = self.child.try_wait().expect("wait") {
                break status;
            }
            assert!(std::time::Instant::now() < deadline, "no exit within 30 s of SIGTERM");
            std::thread::sleep(std::time::Duration::from_millis(20));
        };
        let mut stderr = String::new();
        if let Some(mut pipe) = self.child.stderr.take() {
            pipe.read_to_string(&mut stderr).ok();
        }
        (status, stderr)
    }

    /// SIGKILL: no shutdown, no flush.
    pub fn kill(mut self) {
        self.child.kill().expect("kill");
        self.child.wait().expect("wait");
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Where a test's servers keep their state: a temporary directory, or a schema of its own in
/// the PostgreSQL database of `IDEMDB_PG_URL`.
pub enum Db {
    Redb(tempfile::TempDir),
    Postgres { url: String, schema: String },
}

impl Db {
    pub fn redb() -> Db {
        Db::Redb(tempfile::tempdir().unwrap())
    }

    /// A fresh schema `pay_e2e_<name>` (dropped first if a previous run left it), or `None`
    /// when `IDEMDB_PG_URL` is not set: the test is then skipped with a notice on the terminal
    /// (written past the test harness's capture), or fails when `IDEMDB_PG_REQUIRED=1`.
    pub async fn postgres(name: &str) -> Option<Db> {
        let url = match std::env::var("IDEMDB_PG_URL") {
            Ok(url) if !url.is_empty() => url,
            _ => {
                let required = std::env::var("IDEMDB_PG_REQUIRED").is_ok_and(|v| v == "1");
                assert!(!required, "IDEMDB_PG_REQUIRED=1 but IDEMDB_PG_URL is not set");
                let _ = writeln!(
                    std::io::stderr(),
                    "payments-example e2e: IDEMDB_PG_URL is not set: the PostgreSQL test on schema pay_e2e_{name} is SKIPPED \
                     (it passes without running). Run it with a throwaway server: \
                     bash scripts/with-postgres.sh cargo test -p payments-example"
                );
                return None;
            }
        };
        let schema = format!("pay_e2e_{name}");
        assert!(schema.len() <= 63, "{schema}: a schema name is at most 63 bytes");
        let (client, connection) =
            idemdb_postgres::tokio_postgres::connect(&url, idemdb_postgres::tokio_postgres::NoTls).await.unwrap();
        let connection = tokio::spawn(connection);
        client.batch_execute(&format!("DROP SCHEMA IF EXISTS \"{schema}\" CASCADE")).await.unwrap();
        drop(client);
        let _ = connection.await;
        Some(Db::Postgres { url, schema })
    }

    /// Starts a server on this state (another one on the same state is another instance).
    pub fn start(&self, extra: &[&str]) -> Server {
        match self {
            Db::Redb(dir) => Server::start(dir.path(), extra),
            Db::Postgres { url, schema } => {
                Server::start_with(["--postgres", url, "--schema", schema].map(OsString::from), extra)
            }
        }
    }
}

pub fn http() -> reqwest::Client {
    reqwest::Client::builder().pool_max_idle_per_host(0).build().expect("client")
}

pub fn payment(amount: &str) -> String {
    format!(r#"{{"amount":"{amount}","currency":"BRL","destination":"acct_x"}}"#)
}

/// What one `POST /v1/payments` got.
#[derive(Debug, Clone)]
pub struct Reply {
    pub status: u16,
    pub replayed: bool,
    pub problem: Option<String>,
    pub body: Vec<u8>,
}

pub async fn pay(
    http: &reqwest::Client,
    url: &str,
    tenant: &str,
    key: &str,
    body: &str,
) -> Result<Reply, reqwest::Error> {
    send_payment(http, url, tenant, &format!("\"{key}\""), body).await
}

async fn send_payment(
    http: &reqwest::Client,
    url: &str,
    tenant: &str,
    key_header: &str,
    body: &str,
) -> Result<Reply, reqwest::Error> {
    let response = http
        .post(format!("{url}/v1/payments"))
        .header("authorization", format!("Bearer {tenant}"))
        .header("idempotency-key", key_header)
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .await?;
    let status = response.status().as_u16();
    let replayed = response.headers().get("idempotent-replayed").is_some_and(|v| v == "true");
    let body = response.bytes().await?.to_vec();
    let problem = serde_json::from_slice::<Value>(&body).ok().and_then(|v| v["type"].as_str().map(str::to_string));
    Ok(Reply { status, replayed, problem, body })
}

/// The effects of a tenant, per idempotency key: payments, provider charges (what the
/// provider did) and provider calls (how often it was asked; a repeat of the same provider key
/// is answered with the first charge).
#[derive(Debug, Default)]
pub struct Effects {
    pub payments: HashMap<String, usize>,
    pub calls: HashMap<String, u64>,
    pub charges: HashMap<String, Vec<String>>,
    pub payment_charges: HashMap<String, Vec<String>>,
}

impl Effects {
    pub fn payments_of(&self, key: &str) -> usize {
        self.payments.get(key).copied().unwrap_or(0)
    }

    pub fn calls_of(&self, key: &str) -> u64 {
        self.calls.get(key).copied().unwrap_or(0)
    }

    /// The provider's charge ids for `key`.
    pub fn charges_of(&self, key: &str) -> &[String] {
        self.charges.get(key).map_or(&[], Vec::as_slice)
    }

    /// The charge ids the payment rows of `key` name.
    pub fn payment_charges_of(&self, key: &str) -> &[String] {
        self.payment_charges.get(key).map_or(&[], Vec::as_slice)
    }
}

pub async fn effects(http: &reqwest::Client, url: &str, tenant: &str) -> Effects {
    let response = http
        .get(format!("{url}/v1/ledger"))
        .header("authorization", format!("Bearer {tenant}"))
        .send()
        .await
        .expect("ledger");
    let ledger: Value = serde_json::from_slice(&response.bytes().await.expect("ledger body")).expect("ledger JSON");
    let mut effects = Effects::default();
    for payment in ledger["payments"].as_array().expect("payments") {
        let key = payment["idempotency_key"].as_str().expect("key").to_string();
        *effects.payments.entry(key.clone()).or_default() += 1;
        let charge = payment["provider_charge"].as_str().expect("the payment names its charge").to_string();
        effects.payment_charges.entry(key).or_default().push(charge);
    }
    for charge in ledger["provider_charges"].as_array().expect("charges") {
        let provider_key = charge["provider_key"].as_str().expect("provider key");
        // A long key's provider key is its hashed form: counted under the provider key itself.
        let key = provider_key.strip_suffix(":charge-v1").unwrap_or(provider_key);
        *effects.calls.entry(key.to_string()).or_default() += charge["calls"].as_u64().expect("calls");
        let id = charge["id"].as_str().expect("charge id").to_string();
        effects.charges.entry(key.to_string()).or_default().push(id);
    }
    effects
}

/// The reconciliation queue of `tenant` (`GET /v1/reconciliation`): its entries.
pub async fn reconciliation(http: &reqwest::Client, url: &str, tenant: &str) -> Vec<Value> {
    let response = http
        .get(format!("{url}/v1/reconciliation"))
        .header("authorization", format!("Bearer {tenant}"))
        .send()
        .await
        .expect("reconciliation");
    assert_eq!(response.status(), 200);
    let queue: Value = serde_json::from_slice(&response.bytes().await.expect("body")).expect("queue JSON");
    queue["entries"].as_array().expect("entries").clone()
}

/// `POST /v1/webhooks/provider` with `body`: the status and the JSON answer.
pub async fn webhook(http: &reqwest::Client, url: &str, body: &str) -> (u16, Value) {
    json_answer(http.post(format!("{url}/v1/webhooks/provider")), body).await
}

/// Sends `request` with the JSON `body`: the status and the JSON answer (`null` if none).
pub async fn json_answer(request: reqwest::RequestBuilder, body: &str) -> (u16, Value) {
    let response =
        request.header("content-type", "application/json").body(body.to_string()).send().await.expect("request");
    let status = response.status().as_u16();
    let body = response.bytes().await.expect("body");
    (status, serde_json::from_slice(&body).unwrap_or(Value::Null))
}

/// What the proxy does with each connection.
pub const FORWARD: u8 = 0;
/// Forward the request, wait until the server has started answering, then close the
/// connection: the server did the work, the client hears nothing. Every other connection
/// (the first, third, ...) is treated so; the rest are forwarded.
pub const DROP_EVERY_OTHER_RESPONSE: u8 = 1;
/// Close every connection before forwarding anything (the server is unreachable).
pub const REFUSE: u8 = 2;

/// A TCP proxy in front of the server.
pub struct Proxy {
    pub url: String,
    pub mode: Arc<AtomicU8>,
    pub dropped: Arc<AtomicUsize>,
}

impl Proxy {
    pub async fn start(upstream: &str) -> Proxy {
        let upstream = upstream.trim_start_matches("http://").to_string();
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind proxy");
        let url = format!("http://{}", listener.local_addr().expect("addr"));
        let mode = Arc::new(AtomicU8::new(FORWARD));
        let dropped = Arc::new(AtomicUsize::new(0));
        let (m, d) = (mode.clone(), dropped.clone());
        tokio::spawn(async move {
            let mut connection = 0usize;
            while let Ok((client, _)) = listener.accept().await {
                connection += 1;
                let (mode, dropped, upstream) = (m.load(Ordering::SeqCst), d.clone(), upstream.clone());
                tokio::spawn(async move {
                    if mode == REFUSE {
                        return;
                    }
                    let Ok(server) = TcpStream::connect(&upstream).await else { return };
                    if mode == DROP_EVERY_OTHER_RESPONSE && connection % 2 == 1 {
                        lose_response(client, server).await;
                        dropped.fetch_add(1, Ordering::SeqCst);
                    } else {
                        let (mut client, mut server) = (client, server);
                        let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
                    }
                });
            }
        });
        Proxy { url, mode, dropped }
    }
}

/// Sends the client's bytes to the server until the server's first response byte arrives,
/// then drops both connections.
async fn lose_response(client: TcpStream, server: TcpStream) {
    let (mut client_read, _client_write) = client.into_split();
    let (mut server_read, mut server_write) = server.into_split();
    let upload = tokio::spawn(async move {
        let _ = tokio::io::copy(&mut client_read, &mut server_write).await;
    });
    let mut first = [0u8; 1];
    let _ = server_read.read(&mut first).await;
    upload.abort();
}

/// `POST /v1/payments` with the raw `Idempotency-Key` header value `key_header` (unquoted,
/// quoted, or anything a client might send).
pub async fn pay_raw(http: &reqwest::Client, url: &str, tenant: &str, key_header: &str, body: &str) -> Reply {
    send_payment(http, url, tenant, key_header, body).await.expect("payment")
}
