//! The running example (a child process on port 0), HTTP calls, the ledger's effect counts,
//! and a proxy that loses responses.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read};
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
        let mut child = Command::new(env!("CARGO_BIN_EXE_payments-example"))
            .args(["--addr", "127.0.0.1:0", "--data"])
            .arg(data)
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
    let response = http
        .post(format!("{url}/v1/payments"))
        .header("authorization", format!("Bearer {tenant}"))
        .header("idempotency-key", format!("\"{key}\""))
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

/// The effects of a tenant, per idempotency key: (payments, provider calls).
#[derive(Debug, Default)]
pub struct Effects {
    pub payments: HashMap<String, usize>,
    pub calls: HashMap<String, u64>,
}

impl Effects {
    pub fn payments_of(&self, key: &str) -> usize {
        self.payments.get(key).copied().unwrap_or(0)
    }

    pub fn calls_of(&self, key: &str) -> u64 {
        self.calls.get(key).copied().unwrap_or(0)
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
        *effects.payments.entry(payment["idempotency_key"].as_str().expect("key").to_string()).or_default() += 1;
    }
    for charge in ledger["provider_charges"].as_array().expect("charges") {
        let provider_key = charge["provider_key"].as_str().expect("provider key");
        let key = provider_key.strip_suffix(":charge-v1").expect("derived provider key");
        *effects.calls.entry(key.to_string()).or_default() += charge["calls"].as_u64().expect("calls");
    }
    effects
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
