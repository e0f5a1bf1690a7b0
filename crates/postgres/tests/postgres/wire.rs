//! Statements and round trips per call, counted on the wire: a proxy between the adapter and
//! the server reads the protocol's messages. A statement is one `Bind` (extended protocol) or
//! one `Query` (simple protocol); a round trip begins when the client sends while it waits for
//! no answer (every `Sync` and `Query` it sent has had its `ReadyForQuery`), so statements
//! pipelined behind one another share one round trip (the proxy holds each `ReadyForQuery` back
//! 20 ms, so that pipelined messages always arrive before it).

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};

use idemdb_postgres::{Fingerprint, IdempotencyKey, PgStore, Reservation, Reserve, Scope};
use libtest_mimic::Failed;

use crate::support::{Env, block_on, fresh_schema};

const SCHEMA: &str = "idemdb_wire";

/// What the proxy counted since the last reset.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Counts {
    pub statements: u32,
    pub round_trips: u32,
    /// `Sync` and `Query` messages not yet answered by `ReadyForQuery`.
    outstanding: u32,
    /// Whether a round trip is open (sent, not every answer back yet).
    open: bool,
}

/// A counting proxy in front of the server at `target`.
pub struct WireCounter {
    pub addr: SocketAddr,
    counts: Arc<Mutex<Counts>>,
}

impl WireCounter {
    pub async fn start(target: SocketAddr) -> WireCounter {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind the counting proxy");
        let addr = listener.local_addr().expect("proxy address");
        let counts = Arc::new(Mutex::new(Counts::default()));
        let shared = Arc::clone(&counts);
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let Ok(server) = TcpStream::connect(target).await else { continue };
                let (client_read, client_write) = client.into_split();
                let (server_read, server_write) = server.into_split();
                tokio::spawn(frontend(client_read, server_write, Arc::clone(&shared)));
                tokio::spawn(backend(server_read, client_write, Arc::clone(&shared)));
            }
        });
        WireCounter { addr, counts }
    }

    /// The counts so far, then zero.
    pub fn take(&self) -> Counts {
        let mut counts = self.counts.lock().expect("counts");
        let taken = *counts;
        counts.statements = 0;
        counts.round_trips = 0;
        taken
    }
}

async fn read_message(from: &mut OwnedReadHalf, tagged: bool) -> Option<(u8, Vec<u8>)> {
    let tag = if tagged { from.read_u8().await.ok()? } else { 0 };
    let length = from.read_u32().await.ok()?;
    let mut body = vec![0; usize::try_from(length).ok()?.checked_sub(4)?];
    from.read_exact(&mut body).await.ok()?;
    let mut message = Vec::with_capacity(body.len() + 5);
    if tagged {
        message.push(tag);
    }
    message.extend_from_slice(&length.to_be_bytes());
    message.extend_from_slice(&body);
    Some((tag, message))
}

/// Client to server: counts statements and the start of round trips.
async fn frontend(mut from: OwnedReadHalf, mut to: OwnedWriteHalf, counts: Arc<Mutex<Counts>>) {
    // The startup message has no tag.
    let mut tagged = false;
    while let Some((tag, message)) = read_message(&mut from, tagged).await {
        if tagged {
            let mut counts = counts.lock().expect("counts");
            if !counts.open {
                counts.round_trips += 1;
                counts.open = true;
            }
            match tag {
                b'B' => counts.statements += 1,
                b'Q' => {
                    counts.statements += 1;
                    counts.outstanding += 1;
                }
                b'S' => counts.outstanding += 1,
                _ => {}
            }
        }
        tagged = true;
        if to.write_all(&message).await.is_err() {
            return;
        }
    }
}

/// Server to client: every `ReadyForQuery` answers one `Sync` or `Query`.
async fn backend(mut from: OwnedReadHalf, mut to: OwnedWriteHalf, counts: Arc<Mutex<Counts>>) {
    let mut startup_done = false;
    while let Some((tag, message)) = read_message(&mut from, true).await {
        if tag == b'Z' {
            // Held back a moment, so that whatever the client pipelines without waiting for
            // this answer reaches the proxy first and counts in the same round trip.
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            // The first ReadyForQuery ends the startup, which no Sync asked for.
            let mut counts = counts.lock().expect("counts");
            if startup_done {
                counts.outstanding = counts.outstanding.saturating_sub(1);
                counts.open = counts.outstanding > 0;
            }
            startup_done = true;
        }
        if to.write_all(&message).await.is_err() {
            return;
        }
    }
}

/// The URL of `env`'s server reached through `proxy` (no TLS, one connection at a time).
pub fn through(env: &Env, proxy: SocketAddr) -> String {
    let _ = env;
    format!("postgresql://postgres@{proxy}/postgres?sslmode=disable")
}

/// The new-key reservation is one statement in one round trip; a replay too; and the
/// figures of a completion, printed for `docs/benchmarks.md`.
pub fn statements_per_call(env: &Env) -> Result<(), Failed> {
    block_on(async {
        fresh_schema(&env.url, SCHEMA).await;
        let counter = WireCounter::start(crate::proxy::server_addr(&env.url)).await;
        let store = PgStore::builder(through(env, counter.addr))
            .schema(SCHEMA)
            .pool_size(1)
            .connect()
            .await
            .expect("connect through the counting proxy");
        let scope = Scope::new("acme", "create_payment").expect("scope");
        let fingerprint = Fingerprint::from_bytes([9; 32]);
        // Warm up: the statements are prepared once per connection.
        for name in ["warm-1", "warm-2"] {
            let key = IdempotencyKey::new(name).expect("key");
            let Reservation::Acquired(lease) =
                store.reserve(Reserve::new(&scope, &key, &fingerprint)).await.expect("reserve")
            else {
                panic!("a new key is acquired")
            };
            store.complete(&lease, b"ok".to_vec()).await.expect("complete");
            store.reserve(Reserve::new(&scope, &key, &fingerprint)).await.expect("replay");
        }
        store.flush().await.expect("flush");
        counter.take();

        let key = IdempotencyKey::new("order-842").expect("key");
        let Reservation::Acquired(lease) =
            store.reserve(Reserve::new(&scope, &key, &fingerprint)).await.expect("reserve")
        else {
            panic!("a new key is acquired")
        };
        let reserve = counter.take();
        store.complete(&lease, br#"{"charge":"ch_1"}"#.to_vec()).await.expect("complete");
        let complete = counter.take();
        let replay = store.reserve(Reserve::new(&scope, &key, &fingerprint)).await.expect("replay");
        let replayed = counter.take();
        assert!(matches!(replay, Reservation::Replay { .. }), "{replay:?}");
        println!(
            "wire: new-key reserve {} statements / {} round trips; complete {} / {}; replay {} / {}",
            reserve.statements,
            reserve.round_trips,
            complete.statements,
            complete.round_trips,
            replayed.statements,
            replayed.round_trips
        );
        assert_eq!((reserve.statements, reserve.round_trips), (1, 1), "a new key: one statement, one round trip");
        assert_eq!((replayed.statements, replayed.round_trips), (1, 1), "a replay: one statement, one round trip");
        assert!(complete.round_trips <= 3, "complete: {complete:?}");

        // The new key's row and its audit event are both there (the statement wrote both).
        let admin = crate::support::admin(&env.url).await;
        let rows = crate::support::count(
            &admin,
            &format!("SELECT count(*) FROM {SCHEMA}.idemdb_records WHERE key = 'order-842' AND state = 'completed'"),
        )
        .await;
        let reserved = crate::support::count(
            &admin,
            &format!(
                "SELECT count(*) FROM {SCHEMA}.idemdb_audit WHERE kind = 'reserved' AND fence = {}",
                lease.fence()
            ),
        )
        .await;
        assert_eq!((rows, reserved), (1, 1));
        admin.batch_execute(&format!("DROP SCHEMA {SCHEMA} CASCADE")).await.expect("drop schema");
        Ok(())
    })
}

/// Read-only work takes no transaction id: replays, reads, an idle dispatcher's claims and a
/// purge with nothing due, 20 of each, move the server's transaction counter by nothing (the
/// check's own two `txid_current()` calls aside). The audit trail is off here: the events of
/// answers that change nothing are a (batched) write by design.
pub fn read_only_work_takes_no_transaction_id(env: &Env) -> Result<(), Failed> {
    const S: &str = "idemdb_no_xid";
    block_on(async {
        fresh_schema(&env.url, S).await;
        let store = crate::support::builder(env, S).audit(false).connect().await.expect("connect");
        let admin = crate::support::admin(&env.url).await;
        for table in ["idemdb_records", "idemdb_outbox", "idemdb_meta"] {
            // Autovacuum's ANALYZE of these tables would take ids of its own.
            admin
                .batch_execute(&format!("ALTER TABLE {S}.{table} SET (autovacuum_enabled = false)"))
                .await
                .expect("autovacuum off");
        }
        let scope = Scope::new("acme", "create_payment").expect("scope");
        let fingerprint = Fingerprint::from_bytes([2; 32]);
        let key = IdempotencyKey::new("paid").expect("key");
        let Reservation::Acquired(lease) =
            store.reserve(Reserve::new(&scope, &key, &fingerprint)).await.expect("reserve")
        else {
            panic!("a new key is acquired")
        };
        store.complete(&lease, b"ok".to_vec()).await.expect("complete");
        let xid = || async { crate::support::count(&admin, "SELECT txid_current()::bigint").await };
        let wal = || async { crate::support::count(&admin, "SELECT (pg_current_wal_lsn() - '0/0')::bigint").await };
        let (before, wal_before) = (xid().await, wal().await);
        for _ in 0..20 {
            let replay = store.reserve(Reserve::new(&scope, &key, &fingerprint)).await.expect("replay");
            assert!(matches!(replay, Reservation::Replay { .. }), "{replay:?}");
            assert!(store.get(&scope, &key).await.expect("get").is_some());
            assert!(store.claim_effects(8).await.expect("claim").is_empty());
            assert_eq!(store.purge_expired(100).await.expect("purge").forgotten, 0);
        }
        let (after, wal_after) = (xid().await, wal().await);
        println!(
            "xids: 80 read-only calls took {} transaction ids ({} bytes of WAL meanwhile, the server's own included)",
            after - before - 1,
            wal_after - wal_before
        );
        assert_eq!(after - before, 1, "only the check's own txid_current() took an id");
        admin.batch_execute(&format!("DROP SCHEMA {S} CASCADE")).await.expect("drop schema");
        Ok(())
    })
}
