//! Four processes × 16 connections racing on the same keys: exactly one effect per key.
//!
//! The parent starts four copies of this test binary as workers (`IDEMDB_PG_WORKER=race`).
//! Each opens a pool of 16 connections and runs 16 tasks; every task of every process works
//! through the same keys. A task that acquires a key performs the effect — one row in the
//! `effects` table, written by the lease holder only — and completes the record with the
//! effect's id: half of the keys with the effect and the completion in one transaction (the
//! transaction API), half with the effect first and the completion after. Every other task
//! must see `in progress` (and wait) or the replay of that id. The parent counts the effect
//! rows afterwards.

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, ExitCode, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use idemdb_postgres::{Fingerprint, IdempotencyKey, PgStore, Reservation, Reserve, Scope, State};
use libtest_mimic::Failed;

use crate::support::{Env, admin, block_on, builder, count, fresh_schema};

const PROCESSES: usize = 4;
const TASKS: usize = 16;
const KEYS: usize = 48;
const SCHEMA: &str = "idemdb_race";

fn key(index: usize) -> IdempotencyKey {
    IdempotencyKey::new(format!("race-{index:03}")).expect("key")
}

fn scope() -> Scope {
    Scope::new("acme", "create_payment").expect("scope")
}

pub fn run(env: &Env) -> Result<(), Failed> {
    block_on(async {
        fresh_schema(&env.url, SCHEMA).await;
        let store = builder(env, SCHEMA).connect().await.expect("connect (migrates)");
        let admin = admin(&env.url).await;
        admin
            .batch_execute(&format!("CREATE TABLE {SCHEMA}.effects (key text NOT NULL, writer text NOT NULL)"))
            .await
            .expect("effects table");
        drop(store);

        let exe = std::env::current_exe().expect("test binary");
        let mut children = Vec::new();
        for process in 0..PROCESSES {
            let child = Command::new(&exe)
                .env("IDEMDB_PG_WORKER", "race")
                .env("IDEMDB_PG_WORKER_ID", process.to_string())
                .env("IDEMDB_PG_URL", &env.url)
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .spawn()
                .expect("spawn a worker");
            children.push(child);
        }
        // Every worker connects its 16 connections first; then all start at once.
        let mut outputs = Vec::new();
        for child in &mut children {
            let mut lines = BufReader::new(child.stdout.take().expect("stdout"));
            let mut ready = String::new();
            lines.read_line(&mut ready).expect("worker ready line");
            assert_eq!(ready.trim(), "ready", "worker did not get ready");
            outputs.push(lines);
        }
        for child in &mut children {
            writeln!(child.stdin.as_mut().expect("stdin"), "go").expect("start a worker");
        }
        let mut acquired_total = 0u64;
        for (mut child, mut lines) in children.into_iter().zip(outputs) {
            let mut summary = String::new();
            lines.read_line(&mut summary).expect("worker summary");
            let status = child.wait().expect("worker exit");
            assert!(status.success(), "a worker failed: {summary}");
            let acquired: u64 = summary
                .split_whitespace()
                .nth(1)
                .and_then(|n| n.parse().ok())
                .unwrap_or_else(|| panic!("summary line {summary:?}"));
            acquired_total += acquired;
        }

        // Exactly one effect per key, and the record replays the id of that effect.
        let effects = count(&admin, &format!("SELECT count(*) FROM {SCHEMA}.effects")).await;
        let keys_with_effect = count(&admin, &format!("SELECT count(DISTINCT key) FROM {SCHEMA}.effects")).await;
        assert_eq!((effects, keys_with_effect), (KEYS as i64, KEYS as i64), "one effect per key");
        assert_eq!(acquired_total, KEYS as u64, "one acquisition per key over all processes");
        let store = builder(env, SCHEMA).connect().await.expect("connect");
        for index in 0..KEYS {
            let writer: String = admin
                .query_one(&format!("SELECT writer FROM {SCHEMA}.effects WHERE key = $1"), &[&key(index).as_str()])
                .await
                .expect("effect row")
                .get(0);
            let record = store.get(&scope(), &key(index)).await.expect("get").expect("record");
            match record.state {
                State::Completed { result, .. } => assert_eq!(result, writer.as_bytes(), "key {index}"),
                other => panic!("key {index} is {other:?}"),
            }
        }
        println!("race: {PROCESSES} processes x {TASKS} connections, {KEYS} keys, {effects} effects");
    });
    Ok(())
}

/// The worker side: `Some(exit code)` when this process was started as a worker.
pub fn worker_main() -> Option<ExitCode> {
    if std::env::var("IDEMDB_PG_WORKER").ok()? != "race" {
        return None;
    }
    let process: usize = std::env::var("IDEMDB_PG_WORKER_ID").ok()?.parse().ok()?;
    let env = Env::from_env().ok()?;
    Some(match block_on(worker(env, process)) {
        Ok((acquired, replayed)) => {
            println!("acquired {acquired} replayed {replayed}");
            ExitCode::SUCCESS
        }
        Err(message) => {
            println!("failed: {message}");
            ExitCode::FAILURE
        }
    })
}

async fn worker(env: Env, process: usize) -> Result<(u64, u64), String> {
    let store = builder(&env, SCHEMA).pool_size(TASKS).connect().await.map_err(|e| e.to_string())?;
    // Open all 16 connections before the start.
    let mut held = Vec::new();
    for _ in 0..TASKS {
        held.push(store.begin().await.map_err(|e| e.to_string())?);
    }
    for txn in held {
        txn.rollback().await.map_err(|e| e.to_string())?;
    }
    println!("ready");
    std::io::stdout().flush().map_err(|e| e.to_string())?;
    let mut go = String::new();
    std::io::stdin().read_line(&mut go).map_err(|e| e.to_string())?;

    let acquired = Arc::new(AtomicU64::new(0));
    let replayed = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for task in 0..TASKS {
        let (store, acquired, replayed) = (store.clone(), Arc::clone(&acquired), Arc::clone(&replayed));
        tasks.push(tokio::spawn(async move {
            // Half the tasks walk the keys forwards, half backwards: every key is contended.
            let order: Vec<usize> =
                if (process + task).is_multiple_of(2) { (0..KEYS).collect() } else { (0..KEYS).rev().collect() };
            for index in order {
                match one_key(&store, index, &format!("p{process}-t{task}")).await? {
                    true => acquired.fetch_add(1, Ordering::Relaxed),
                    false => replayed.fetch_add(1, Ordering::Relaxed),
                };
            }
            Ok::<(), String>(())
        }));
    }
    for task in tasks {
        task.await.map_err(|e| e.to_string())??;
    }
    Ok((acquired.load(Ordering::Relaxed), replayed.load(Ordering::Relaxed)))
}

/// Drives one key to its result; `true` if this task performed the effect.
async fn one_key(store: &PgStore, index: usize, writer: &str) -> Result<bool, String> {
    let fingerprint = Fingerprint::from_bytes([7; 32]);
    let (scope, key) = (scope(), key(index));
    let effects = format!("INSERT INTO {SCHEMA}.effects (key, writer) VALUES ($1, $2)");
    for _ in 0..10_000 {
        match store.reserve(Reserve::new(&scope, &key, &fingerprint)).await.map_err(|e| e.to_string())? {
            Reservation::Acquired(lease) => {
                if index.is_multiple_of(2) {
                    // The effect and the completion in one transaction.
                    let mut txn = store.begin().await.map_err(|e| e.to_string())?;
                    txn.client().execute(&effects, &[&key.as_str(), &writer]).await.map_err(|e| e.to_string())?;
                    txn.complete(&lease, writer.as_bytes().to_vec()).await.map_err(|e| e.to_string())?;
                    txn.commit().await.map_err(|e| e.to_string())?;
                } else {
                    // The effect, then the completion.
                    let txn = store.begin().await.map_err(|e| e.to_string())?;
                    txn.client().execute(&effects, &[&key.as_str(), &writer]).await.map_err(|e| e.to_string())?;
                    txn.commit().await.map_err(|e| e.to_string())?;
                    store.complete(&lease, writer.as_bytes().to_vec()).await.map_err(|e| e.to_string())?;
                }
                return Ok(true);
            }
            Reservation::Replay { body, .. } => {
                if body.is_empty() || !body.starts_with(b"p") {
                    return Err(format!("key {index}: replayed {body:?}"));
                }
                return Ok(false);
            }
            Reservation::InProgress { .. } => tokio::time::sleep(Duration::from_millis(2)).await,
            other => return Err(format!("key {index}: unexpected {other:?}")),
        }
    }
    Err(format!("key {index}: still in progress after 10,000 tries"))
}
