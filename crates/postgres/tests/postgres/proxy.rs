//! A TCP proxy between the adapter and the server, to make the database unreachable at chosen
//! moments: refuse connections, cut every connection, or cut one connection exactly at its
//! `COMMIT` (before passing it on, or after the server had it). With it the typed errors are
//! tested deterministically:
//!
//! * an unreachable database is `Unavailable` — for `connect`, `reserve`, `get`, `complete` —
//!   never "not found" and never an answer;
//! * a `COMMIT` cut before the server saw it is learnt (by transaction id) to be rolled back,
//!   and the adapter repeats the call by itself;
//! * a `COMMIT` cut after the server committed is learnt to be committed: the call succeeds;
//! * a `COMMIT` cut while the database cannot be asked is `CommitUnknown`; repeating the call
//!   afterwards tells what was stored;
//! * a statement waiting on a lock past `statement_timeout` fails as `Unavailable`, in time.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

use idemdb_postgres::{
    Error, ErrorCode, Fingerprint, IdempotencyKey, PgStore, Refusal, Reservation, Reserve, Scope, State,
    TransitionError,
};
use libtest_mimic::Failed;

use crate::support::{Env, admin, block_on, count, fresh_schema};

const PASS: u8 = 0;
const CUT_BEFORE_COMMIT: u8 = 1;
const CUT_AFTER_COMMIT: u8 = 2;
/// As `CUT_AFTER_COMMIT`, and the proxy goes down at the same moment.
const CUT_AFTER_COMMIT_AND_DOWN: u8 = 3;

/// What the proxy's tasks share.
struct Shared {
    accepting: AtomicBool,
    /// The cut the next `COMMIT` gets (then back to `PASS`).
    mode: AtomicU8,
    cuts: AtomicU64,
    /// Bumped by `down`: connections of an older generation stop passing anything.
    generation: AtomicU64,
    kill: watch::Sender<u64>,
}

impl Shared {
    fn down(&self) {
        self.accepting.store(false, Ordering::SeqCst);
        let generation = self.generation.fetch_add(1, Ordering::SeqCst) + 1;
        self.kill.send_replace(generation);
    }
}

struct Proxy {
    addr: SocketAddr,
    shared: Arc<Shared>,
}

impl Proxy {
    async fn start(target: SocketAddr) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind the proxy");
        let addr = listener.local_addr().expect("proxy address");
        let shared = Arc::new(Shared {
            accepting: AtomicBool::new(true),
            mode: AtomicU8::new(PASS),
            cuts: AtomicU64::new(0),
            generation: AtomicU64::new(0),
            kill: watch::channel(0).0,
        });
        let serving = Arc::clone(&shared);
        tokio::spawn(async move {
            loop {
                let Ok((client, _)) = listener.accept().await else { return };
                if !serving.accepting.load(Ordering::SeqCst) {
                    drop(client);
                    continue;
                }
                tokio::spawn(pipe(client, target, Arc::clone(&serving)));
            }
        });
        Proxy { addr, shared }
    }

    fn url(&self) -> String {
        format!("postgresql://postgres@{}/postgres", self.addr)
    }

    /// Refuses new connections and cuts every open one.
    fn down(&self) {
        self.shared.down();
    }

    fn up(&self) {
        self.shared.accepting.store(true, Ordering::SeqCst);
    }

    /// Cuts the next connection that sends `COMMIT` (once).
    fn cut_at_commit(&self, mode: u8) {
        self.shared.mode.store(mode, Ordering::SeqCst);
    }

    fn cuts(&self) -> u64 {
        self.shared.cuts.load(Ordering::SeqCst)
    }
}

/// One protocol message: the type byte (none for the startup message), the length, the body.
async fn read_message(from: &mut (impl AsyncReadExt + Unpin), typed: bool) -> std::io::Result<(Vec<u8>, Vec<u8>)> {
    let mut header = vec![0u8; if typed { 5 } else { 4 }];
    from.read_exact(&mut header).await?;
    let at = header.len() - 4;
    let length = u32::from_be_bytes([header[at], header[at + 1], header[at + 2], header[at + 3]]) as usize;
    let mut body = vec![0u8; length.saturating_sub(4)];
    from.read_exact(&mut body).await?;
    Ok((header, body))
}

/// Passes messages both ways, cutting the connection at `COMMIT` when armed: before passing
/// `COMMIT` on, or when the server's `CommandComplete` for it comes back (the server has
/// committed; the client never hears it).
async fn pipe(client: TcpStream, target: SocketAddr, shared: Arc<Shared>) {
    let Ok(server) = TcpStream::connect(target).await else { return };
    let generation = shared.generation.load(Ordering::SeqCst);
    let alive = || shared.generation.load(Ordering::SeqCst) == generation;
    let armed = AtomicU8::new(PASS);
    let (mut client_read, mut client_write) = client.into_split();
    let (mut server_read, mut server_write) = server.into_split();
    let upstream = async {
        // The startup message has no type byte (tokio-postgres sends no SSL request without TLS).
        let mut typed = false;
        loop {
            let (header, body) = read_message(&mut client_read, typed).await?;
            typed = true;
            if !alive() {
                return Ok::<(), std::io::Error>(());
            }
            let commit = header[0] == b'Q' && body.starts_with(b"COMMIT");
            let cut = if commit { shared.mode.swap(PASS, Ordering::SeqCst) } else { PASS };
            if cut == CUT_BEFORE_COMMIT {
                shared.cuts.fetch_add(1, Ordering::SeqCst);
                return Ok(());
            }
            server_write.write_all(&header).await?;
            server_write.write_all(&body).await?;
            if cut != PASS {
                armed.store(cut, Ordering::SeqCst);
            }
        }
    };
    let downstream = async {
        loop {
            let (header, body) = read_message(&mut server_read, true).await?;
            if !alive() {
                return Ok::<(), std::io::Error>(());
            }
            if header[0] == b'C' && body.starts_with(b"COMMIT") {
                match armed.load(Ordering::SeqCst) {
                    CUT_AFTER_COMMIT => {
                        shared.cuts.fetch_add(1, Ordering::SeqCst);
                        return Ok(());
                    }
                    CUT_AFTER_COMMIT_AND_DOWN => {
                        shared.down();
                        shared.cuts.fetch_add(1, Ordering::SeqCst);
                        return Ok(());
                    }
                    _ => {}
                }
            }
            client_write.write_all(&header).await?;
            client_write.write_all(&body).await?;
        }
    };
    let mut kill = shared.kill.subscribe();
    let killed = async {
        while alive() {
            if kill.changed().await.is_err() {
                return;
            }
        }
    };
    tokio::select! {
        _ = upstream => {}
        _ = downstream => {}
        () = killed => {}
    }
}

pub fn server_addr(url: &str) -> SocketAddr {
    let config: idemdb_postgres::tokio_postgres::Config = url.parse().expect("IDEMDB_PG_URL parses");
    let port = config.get_ports().first().copied().unwrap_or(5432);
    match config.get_hosts().first() {
        Some(idemdb_postgres::tokio_postgres::config::Host::Tcp(host)) => {
            let host = if host == "localhost" { "127.0.0.1" } else { host.as_str() };
            format!("{host}:{port}").parse().expect("a numeric loopback address in IDEMDB_PG_URL")
        }
        _ => panic!("the proxy test needs a TCP IDEMDB_PG_URL"),
    }
}

const SCHEMA: &str = "idemdb_proxy";

async fn store(proxy: &Proxy) -> Result<PgStore, idemdb_postgres::ConnectError> {
    PgStore::builder(proxy.url())
        .schema(SCHEMA)
        .pool_size(4)
        .connect_timeout(Duration::from_secs(1))
        .pool_wait_timeout(Duration::from_secs(1))
        .operation_timeout(Duration::from_secs(3))
        .statement_timeout(Duration::from_millis(500))
        .connect()
        .await
}

fn key(name: &str) -> IdempotencyKey {
    IdempotencyKey::new(name).expect("key")
}

pub fn run(env: &Env) -> Result<(), Failed> {
    block_on(async {
        fresh_schema(&env.url, SCHEMA).await;
        let proxy = Proxy::start(server_addr(&env.url)).await;
        let scope = Scope::new("acme", "create_payment").expect("scope");
        let fp = Fingerprint::from_bytes([9; 32]);

        // Unreachable at connect.
        proxy.down();
        let started = Instant::now();
        let refused = store(&proxy).await.expect_err("no database behind the proxy");
        assert_eq!(refused.code(), ErrorCode::Unavailable, "{refused}");
        assert!(started.elapsed() < Duration::from_secs(15), "connect gave up in bounded time");
        proxy.up();
        let pg = store(&proxy).await.expect("connect through the proxy");

        // Unreachable while connected: typed errors, never an answer or "not found".
        let Reservation::Acquired(lease) =
            pg.reserve(Reserve::new(&scope, &key("k-down"), &fp)).await.expect("reserve")
        else {
            panic!("a new key is acquired")
        };
        proxy.down();
        let error = pg.reserve(Reserve::new(&scope, &key("k-down"), &fp)).await.expect_err("database down");
        // A reservation is one autocommit insert: when a pooled connection dies under it, the
        // adapter cannot tell whether it reached the server, nor read the row back while the
        // database is down, so the outcome is unknown (never an answer); when the connection
        // was already seen closed, nothing was sent: unavailable.
        assert!(matches!(error.code(), ErrorCode::Unavailable | ErrorCode::CommitUnknown), "reserve: {error}");
        let error = pg.get(&scope, &key("k-down")).await.expect_err("database down");
        assert_eq!(error.code(), ErrorCode::Unavailable, "get: {error}");
        let error = pg.complete(&lease, b"r".to_vec()).await.expect_err("database down");
        assert_eq!(error.code(), ErrorCode::Unavailable, "complete: {error}");
        proxy.up();
        pg.complete(&lease, b"r".to_vec()).await.expect("the same call, repeated once the database is back");

        // A new key's reservation is one autocommit statement (no COMMIT): the commits cut
        // below are renewals, transactions of their own.
        let Reservation::Acquired(before) =
            pg.reserve(Reserve::new(&scope, &key("k-before"), &fp)).await.expect("reserve")
        else {
            panic!("a new key is acquired")
        };
        let Reservation::Acquired(lease) =
            pg.reserve(Reserve::new(&scope, &key("k-after"), &fp)).await.expect("reserve")
        else {
            panic!("a new key is acquired")
        };

        // COMMIT cut before the server saw it: rolled back, learnt, and retried by the adapter.
        proxy.cut_at_commit(CUT_BEFORE_COMMIT);
        let renewed = pg.renew(&before).await.expect("retried after the cut");
        assert_eq!(proxy.cuts(), 1, "one commit was cut");
        let stored = pg.get(&scope, &key("k-before")).await.expect("get").expect("record");
        assert_eq!(stored.state, State::InProgress { lease_expires_at: renewed.expires_at() });

        // COMMIT cut after the server committed: learnt to be committed, the call succeeds with
        // the answer it committed.
        proxy.cut_at_commit(CUT_AFTER_COMMIT);
        let lease = pg.renew(&lease).await.expect("committed despite the cut");
        assert_eq!(proxy.cuts(), 2, "a second commit was cut");
        let stored = pg.get(&scope, &key("k-after")).await.expect("get").expect("record");
        assert_eq!(stored.fence, lease.fence(), "the lease answered is the one stored");
        assert_eq!(stored.state, State::InProgress { lease_expires_at: lease.expires_at() });

        // COMMIT cut after the server committed, and the database unreachable while the adapter
        // asks: the outcome is unknown. Repeating tells: the completion had been stored.
        proxy.cut_at_commit(CUT_AFTER_COMMIT_AND_DOWN);
        let error = pg.complete(&lease, b"done".to_vec()).await.expect_err("outcome unknown");
        assert_eq!(proxy.cuts(), 3, "a third commit was cut");
        assert_eq!(error.code(), ErrorCode::CommitUnknown, "{error}");
        proxy.up();
        let repeated = pg.complete(&lease, b"done".to_vec()).await;
        assert!(
            matches!(repeated, Err(Error::Refused(Refusal::Transition(TransitionError::WrongState { .. })))),
            "the repeat says the record is already completed: {repeated:?}"
        );
        match pg.reserve(Reserve::new(&scope, &key("k-after"), &fp)).await.expect("reserve") {
            Reservation::Replay { body, .. } => assert_eq!(body, b"done"),
            other => panic!("expected the stored completion, got {other:?}"),
        }

        // A statement waiting on a lock longer than statement_timeout: unavailable, in time.
        let Reservation::Acquired(lease) =
            pg.reserve(Reserve::new(&scope, &key("k-locked"), &fp)).await.expect("reserve")
        else {
            panic!("a new key is acquired")
        };
        let mut holder = admin(&env.url).await;
        let holding = holder.transaction().await.expect("begin");
        holding
            .execute(&format!("SELECT 1 FROM {SCHEMA}.idemdb_records WHERE key = 'k-locked' FOR UPDATE"), &[])
            .await
            .expect("lock the row");
        let started = Instant::now();
        let error = pg.complete(&lease, b"late".to_vec()).await.expect_err("the row is locked");
        assert_eq!(error.code(), ErrorCode::Unavailable, "{error}");
        assert!(started.elapsed() < Duration::from_secs(10), "bounded by the statement timeout");
        holding.rollback().await.expect("release the row");
        pg.complete(&lease, b"late".to_vec()).await.expect("the repeat succeeds once the row is free");
        let record = pg.get(&scope, &key("k-locked")).await.expect("get").expect("record");
        assert!(matches!(record.state, State::Completed { .. }));
    });
    Ok(())
}

/// Sets `synchronous_standby_names` for the whole server (`""`: none) and waits for the reload.
async fn standby(admin: &idemdb_postgres::tokio_postgres::Client, names: &str) {
    admin.batch_execute("SET synchronous_commit = local").await.expect("a local commit for this session");
    admin
        .batch_execute(&format!("ALTER SYSTEM SET synchronous_standby_names = '{names}'"))
        .await
        .expect("set synchronous_standby_names");
    admin.batch_execute("SELECT pg_reload_conf()").await.expect("reload");
    tokio::time::sleep(Duration::from_millis(300)).await;
}

/// A new key's reservation whose commit waits for a synchronous standby that is not there,
/// and whose connection is lost meanwhile: no row is visible, and no timeout proves it never
/// will be. The adapter ends the process that runs the statement (its client is gone), and
/// only then reads what is stored: here the commit lands, and the reservation is acquired. It
/// used to answer "nothing changed" (`Unavailable`) a statement timeout after sending, while
/// the commit landed later, leaving a record in progress whose handler never ran.
pub fn a_commit_waiting_for_a_standby_is_never_taken_for_nothing_changed(env: &Env) -> Result<(), Failed> {
    const STALLED: &str = "idemdb_stalled_commit";
    block_on(async {
        fresh_schema(&env.url, STALLED).await;
        let proxy = Proxy::start(server_addr(&env.url)).await;
        let pg = PgStore::builder(proxy.url())
            .schema(STALLED)
            .pool_size(2)
            .operation_timeout(Duration::from_secs(8))
            .statement_timeout(Duration::from_millis(500))
            .connect()
            .await
            .expect("connect through the proxy");
        let scope = Scope::new("acme", "create_payment").expect("scope");
        let fp = Fingerprint::from_bytes([7; 32]);
        pg.reserve(Reserve::new(&scope, &key("warm"), &fp))
            .await
            .expect("a reservation before the standby is required");

        let admin = admin(&env.url).await;
        standby(&admin, "idemdb_no_such_standby").await;
        // The stalled reservation runs on a task of its own: whatever it does (a panic
        // included), the standby requirement is lifted before anything else runs.
        let stalled = {
            let (pg, scope) = (pg.clone(), scope.clone());
            tokio::spawn(async move {
                let reserving =
                    tokio::spawn(async move { pg.reserve(Reserve::new(&scope, &key("k-standby"), &fp)).await });
                // The statement has inserted and waits for the standby; its connection is lost.
                tokio::time::sleep(Duration::from_millis(700)).await;
                proxy.down();
                tokio::time::sleep(Duration::from_millis(100)).await;
                proxy.up();
                reserving.await
            })
        };
        let outcome = stalled.await;
        standby(&admin, "").await;
        let outcome = match outcome {
            Ok(Ok(outcome)) => outcome,
            Ok(Err(panicked)) | Err(panicked) => std::panic::resume_unwind(panicked.into_panic()),
        };
        let stored =
            count(&admin, &format!("SELECT count(*) FROM \"{STALLED}\".idemdb_records WHERE key = 'k-standby'")).await;
        match &outcome {
            Ok(Reservation::Acquired(_)) => assert_eq!(stored, 1, "acquired, and the row is there"),
            Err(error) if error.code() == ErrorCode::CommitUnknown => {}
            Err(error) => assert_eq!(stored, 0, "told \"{error}\" ({:?}), but the row committed", error.code()),
            Ok(other) => panic!("a new key: {other:?}"),
        }
        assert!(
            matches!(outcome, Ok(Reservation::Acquired(_))),
            "the stalled commit is learnt, not guessed: {outcome:?} (row stored: {stored})"
        );
    });
    Ok(())
}
