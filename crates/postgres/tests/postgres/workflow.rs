//! The workflow primitives on PostgreSQL: the shared workflow stories (the same runner the
//! embedded store passes), an effect enqueued in the application's own transaction, dispatchers
//! on many connections claiming each item once, the reconciliation queue, concurrent webhook
//! deliveries, and retention of finished workflow rows.

use std::collections::HashSet;
use std::time::Duration;

use idemdb_interface::{InspectStore, conformance};
use idemdb_postgres::{
    Attention, Delivery, EffectName, EffectReport, ErrorCode, Fingerprint, IdempotencyKey, InboxAnswer, ManualClock,
    NewEffect, NewerVersion, OutboxStateKind, PgStore, Policy, Reservation, Reserve, Scope, TimeSource,
};
use libtest_mimic::Failed;

use crate::support::{Env, Schemas, admin, block_on, builder, count, fresh_schema};

pub fn stories(env: &Env) -> Result<(), Failed> {
    block_on(async {
        let mut schemas = Schemas::new(env, "idemdb_stories", 4, ManualClock::new(conformance::T)).await;
        let stories = conformance::run_workflow_stories(&mut schemas, "postgres").await;
        assert_eq!(stories, 6);
        schemas.drop_all().await;
    });
    Ok(())
}

/// The transaction contract: a refused enqueue (and any refused call) stores nothing — the
/// shared runner the embedded store passes.
pub fn failed_operations_write_nothing(env: &Env) -> Result<(), Failed> {
    block_on(async {
        let mut schemas = Schemas::new(env, "idemdb_contract", 1, ManualClock::new(conformance::T)).await;
        assert_eq!(conformance::run_failed_operations_write_nothing(&mut schemas, "postgres").await, 3);
        schemas.drop_all().await;
    });
    Ok(())
}

/// Rows and transitions in one transaction: the shared runner the embedded store passes, then
/// what only PostgreSQL has (the row table is a table of the store's schema, keyed in byte order).
pub fn business_writes(env: &Env) -> Result<(), Failed> {
    block_on(async {
        let mut schemas = Schemas::new(env, "idemdb_business", 1, ManualClock::new(conformance::T)).await;
        assert_eq!(conformance::run_business_writes(&mut schemas, "postgres").await, 6);
        schemas.drop_all().await;

        // A row written in the application's own transaction: a missing table is made inside
        // it, and rolled back with it.
        const S: &str = "idemdb_rows_txn";
        const NOTES: idemdb_postgres::RowTable = idemdb_postgres::RowTable::new("app_notes");
        fresh_schema(&env.url, S).await;
        let store = builder(env, S).connect().await.expect("connect");
        let admin = admin(&env.url).await;
        let exists = async |admin: &idemdb_postgres::tokio_postgres::Client| -> bool {
            let row = admin.query_one("SELECT to_regclass('idemdb_rows_txn.app_notes') IS NOT NULL", &[]).await;
            row.expect("to_regclass").get(0)
        };
        let mut txn = store.begin().await.expect("begin");
        txn.put_row(NOTES, "acme", "n-1", b"first").await.expect("put");
        txn.rollback().await.expect("rollback");
        assert!(!exists(&admin).await, "the table made in a rolled-back transaction is gone with it");
        assert_eq!(store.rows(NOTES, "acme", None, 0).await.expect("rows"), Vec::new());
        let lease = acquire(&store, &key("note-1")).await;
        let mut txn = store.begin().await.expect("begin");
        txn.put_row(NOTES, "acme", "n-1", b"second").await.expect("put");
        txn.complete(&lease, b"noted".to_vec()).await.expect("complete");
        txn.commit().await.expect("commit");
        assert!(exists(&admin).await);
        assert_eq!(store.row(NOTES, "acme", "n-1").await.expect("row").as_deref(), Some(&b"second"[..]));
        let columns: Vec<String> = admin
            .query(
                "SELECT column_name || ' ' || data_type FROM information_schema.columns \
                 WHERE table_schema = $1 AND table_name = 'app_notes' ORDER BY ordinal_position",
                &[&S],
            )
            .await
            .expect("columns")
            .iter()
            .map(|row| row.get(0))
            .collect();
        assert_eq!(columns, ["partition text", "id text", "value bytea"], "a plain table, readable by SQL");
    });
    Ok(())
}

const FP: Fingerprint = Fingerprint::from_bytes([1; 32]);

fn scope() -> Scope {
    Scope::new("acme", "create_payment").expect("scope")
}

fn key(name: &str) -> IdempotencyKey {
    IdempotencyKey::new(name).expect("key")
}

async fn acquire(store: &PgStore, key: &IdempotencyKey) -> idemdb_postgres::Lease {
    match store.reserve(Reserve::new(&scope(), key, &FP)).await.expect("reserve") {
        Reservation::Acquired(lease) => lease,
        other => panic!("expected a lease, got {other:?}"),
    }
}

/// A reservation with effects (`Reserve::enqueuing`): the acquiring reservation and its effect
/// are one commit; any other answer enqueues nothing; no effects is a plain reservation.
pub fn reserve_enqueuing(env: &Env) -> Result<(), Failed> {
    block_on(async {
        const S: &str = "idemdb_wf_reserve_enqueue";
        fresh_schema(&env.url, S).await;
        let store = builder(env, S).connect().await.expect("connect");
        let charge = EffectName::new("charge").expect("effect");
        let effect = || vec![NewEffect { effect: charge.clone(), version: 1, payload: b"10.50".to_vec() }];
        let (s, k1, k2) = (scope(), key("pay-1"), key("pay-2"));
        let request = |k, fp| Reserve::new(&s, k, fp).traced("req-1").expect("a valid id").enqueuing(effect());
        let answer = store.reserve(request(&k1, &FP)).await.expect("reserve");
        assert!(matches!(answer, Reservation::Acquired(_)), "a new key: {answer:?}");
        let item = store.effect(&scope(), &key("pay-1"), &charge).await.expect("effect").expect("enqueued with it");
        assert_eq!((item.provider_key.as_str(), item.payload.as_slice()), ("pay-1:charge-v1", &b"10.50"[..]));
        // A duplicate while it runs: in progress, and still one effect.
        let again = store.reserve(request(&k1, &FP)).await.expect("again");
        assert!(matches!(again, Reservation::InProgress { .. }), "{again:?}");
        assert_eq!(store.claim_effects(8).await.expect("claim").len(), 1, "one effect to dispatch");
        // Another request under the key: refused, nothing enqueued for it.
        let other = Fingerprint::from_bytes([2; 32]);
        let mismatch = store.reserve(request(&k1, &other)).await.expect("other");
        assert!(matches!(mismatch, Reservation::Mismatch { .. }), "{mismatch:?}");
        // No effects: a plain reservation, nothing in the outbox.
        let plain = store.reserve(Reserve::new(&s, &k2, &FP)).await.expect("plain");
        assert!(matches!(plain, Reservation::Acquired(_)), "{plain:?}");
        assert!(store.effect(&scope(), &key("pay-2"), &charge).await.expect("effect").is_none());
        drop(store);
        fresh_schema(&env.url, S).await;
    });
    Ok(())
}

/// `PgTxn::enqueue_effect`: the business row and its effect commit together or not at all;
/// the effect's confirmation completes the record.
pub fn effect_in_application_transaction(env: &Env) -> Result<(), Failed> {
    block_on(async {
        const S: &str = "idemdb_wf_txn";
        fresh_schema(&env.url, S).await;
        let store = builder(env, S).connect().await.expect("connect");
        let admin = admin(&env.url).await;
        admin.batch_execute(&format!("CREATE TABLE {S}.orders (id integer PRIMARY KEY)")).await.expect("orders");
        let insert = format!("INSERT INTO {S}.orders (id) VALUES ($1)");
        let authorize = EffectName::new("authorize").expect("effect");

        // Rolled back: neither the order nor the effect.
        let lease = acquire(&store, &key("order-1")).await;
        let mut txn = store.begin().await.expect("begin");
        txn.client().execute(&insert, &[&1]).await.expect("order");
        txn.enqueue_effect(&lease, &authorize, 1, b"10.50".to_vec()).await.expect("enqueue");
        txn.rollback().await.expect("rollback");
        assert_eq!(count(&admin, &format!("SELECT count(*) FROM {S}.orders")).await, 0);
        assert!(store.effect(&scope(), &key("order-1"), &authorize).await.expect("effect").is_none());
        assert!(store.claim_effects(8).await.expect("claim").is_empty(), "nothing to dispatch");

        // Committed: both; enqueuing again with the same payload returns the stored item.
        let mut txn = store.begin().await.expect("begin");
        txn.client().execute(&insert, &[&1]).await.expect("order");
        let item = txn.enqueue_effect(&lease, &authorize, 1, b"10.50".to_vec()).await.expect("enqueue");
        assert_eq!(txn.enqueue_effect(&lease, &authorize, 1, b"10.50".to_vec()).await.expect("again"), item);
        txn.commit().await.expect("commit");
        assert_eq!(item.provider_key.as_str(), "order-1:authorize-v1");
        let other = store.enqueue_effect(&lease, &authorize, 1, b"99.00".to_vec()).await.expect_err("payload");
        assert_eq!(other.code(), ErrorCode::KeyMismatch, "{other}");

        // Dispatch and confirm: the record completes with the result, in the same transaction.
        let claims = store.claim_effects(8).await.expect("claim");
        assert_eq!(claims.len(), 1);
        let retry = store.reserve(Reserve::new(&scope(), &key("order-1"), &FP)).await.expect("reserve");
        assert!(matches!(retry, Reservation::InProgress { .. }), "a retry waits for the effect: {retry:?}");
        let report = EffectReport::Confirmed { reference: "auth_1".into(), result: b"authorized".to_vec() };
        store.report_effect(&claims[0], report.clone()).await.expect("report");
        let stale = store.report_effect(&claims[0], report).await.expect_err("reported twice");
        assert_eq!(stale.code(), ErrorCode::WrongState, "{stale}");
        let replay = store.reserve(Reserve::new(&scope(), &key("order-1"), &FP)).await.expect("reserve");
        assert!(matches!(replay, Reservation::Replay { ref body, .. } if body == b"authorized"), "{replay:?}");

        // The audit trail names the effect's steps.
        let kinds: Vec<String> =
            store.audit_events(100).await.expect("audit").iter().map(|e| e.kind.as_str().to_string()).collect();
        for kind in ["effect_enqueued", "effect_claimed", "effect_reported", "completed"] {
            assert!(kinds.iter().any(|k| k == kind), "{kind} in {kinds:?}");
        }
    });
    Ok(())
}

/// Eight dispatchers on their own connections claim 64 due items at once: each item is claimed
/// exactly once (`FOR UPDATE SKIP LOCKED`).
pub fn dispatchers_claim_each_item_once(env: &Env) -> Result<(), Failed> {
    block_on(async {
        const S: &str = "idemdb_wf_claims";
        fresh_schema(&env.url, S).await;
        let store = builder(env, S).pool_size(12).connect().await.expect("connect");
        let charge = EffectName::new("charge").expect("effect");
        for n in 0..64 {
            let lease = acquire(&store, &key(&format!("pay-{n}"))).await;
            store.enqueue_effect(&lease, &charge, 1, Vec::new()).await.expect("enqueue");
        }
        let dispatchers: Vec<_> = (0..8)
            .map(|_| {
                let store = store.clone();
                tokio::spawn(async move {
                    let mut mine = Vec::new();
                    loop {
                        let claims = store.claim_effects(3).await.expect("claim");
                        if claims.is_empty() {
                            break mine;
                        }
                        mine.extend(claims.into_iter().map(|c| c.provider_key.as_str().to_string()));
                    }
                })
            })
            .collect();
        let mut seen = HashSet::new();
        let mut total = 0;
        for dispatcher in dispatchers {
            for provider_key in dispatcher.await.expect("dispatcher") {
                total += 1;
                assert!(seen.insert(provider_key.clone()), "{provider_key} claimed twice");
            }
        }
        assert_eq!((total, seen.len()), (64, 64));
    });
    Ok(())
}

/// The reconciliation queue lists an uncertain record and an uncertain effect (the effect's
/// record once, as the effect), oldest first; resolving empties it.
pub fn reconciliation_queue(env: &Env) -> Result<(), Failed> {
    block_on(async {
        const S: &str = "idemdb_wf_queue";
        fresh_schema(&env.url, S).await;
        let clock = ManualClock::new(1_000_000_000);
        let store =
            builder(env, S).clock(clock.clone()).time_source(TimeSource::HostClock).connect().await.expect("connect");
        let charge = EffectName::new("charge").expect("effect");
        let lease = acquire(&store, &key("lost")).await;
        store.fail(&lease, idemdb_postgres::Failure::Uncertain).await.expect("uncertain");
        clock.advance(Duration::from_secs(1));
        let lease = acquire(&store, &key("timeout")).await;
        store.enqueue_effect(&lease, &charge, 1, Vec::new()).await.expect("enqueue");
        let claim = store.claim_effects(1).await.expect("claim").remove(0);
        store.report_effect(&claim, EffectReport::Unknown { reason: "timeout".into() }).await.expect("report");
        let queue = store.reconciliation_queue(0).await.expect("queue");
        match &queue[..] {
            [Attention::Record { scoped, .. }, Attention::Effect { item, .. }] => {
                assert_eq!(scoped.key.as_str(), "lost");
                assert_eq!((item.key.as_str(), item.state.kind()), ("timeout", OutboxStateKind::Uncertain));
            }
            other => panic!("expected the record, then the effect: {other:?}"),
        }
        assert_eq!(store.reconciliation_queue(1).await.expect("queue").len(), 1, "limit");
        // `failed` waits for the provider's settle time (60 s by default) after the report:
        // until then the call may still land.
        let (pay, timeout) = (scope(), key("timeout"));
        let declined = || {
            store.resolve_effect(
                &pay,
                &timeout,
                &charge,
                idemdb_postgres::ProviderState::Failed { body: b"declined".to_vec() },
                idemdb_postgres::ResolutionCause::Operator,
            )
        };
        let early = declined().await.expect_err("the call may still land");
        assert_eq!(early.code(), idemdb_postgres::ErrorCode::WrongState, "{early}");
        assert!(early.to_string().contains("may still be applied by the provider"), "{early}");
        clock.advance(Duration::from_secs(60));
        declined().await.expect("resolve");
        store
            .reconcile(
                &scope(),
                &key("lost"),
                idemdb_postgres::Resolution::Failed(b"never sent".to_vec()),
                idemdb_postgres::ResolutionCause::Operator,
            )
            .await
            .expect("reconcile");
        assert!(store.reconciliation_queue(0).await.expect("queue").is_empty());
        // Each resolution is in the key's history with its cause, as an operator reads it.
        let kinds_and_causes = |events: Vec<idemdb_postgres::AuditEvent>| {
            events.iter().map(|e| (e.kind.as_str(), e.cause().map(|c| c.as_str()))).collect::<Vec<_>>()
        };
        let lost = InspectStore::key_history(&store, &scope(), &key("lost"), 1000).await.expect("history");
        let lost = kinds_and_causes(lost.expect("PostgreSQL reads its trail back"));
        assert_eq!(lost, [("reserved", None), ("failed", None), ("reconciled", Some("operator"))]);
        let timeout = store.key_history(&scope(), &key("timeout"), 1000).await.expect("history");
        assert_eq!(
            kinds_and_causes(timeout).last(),
            Some(&("effect_resolved", Some("operator"))),
            "the effect's resolution names its cause"
        );
        // The window is the trail's newest events (the resolution of `lost` was the last).
        let newest = store.key_history(&scope(), &key("lost"), 1).await.expect("history");
        assert_eq!(kinds_and_causes(newest), [("reconciled", Some("operator"))]);
    });
    Ok(())
}

/// Sixteen deliveries of one object, with versions 1..=16, arrive at once (each also
/// redelivered): every delivery is recorded once, the object ends at version 16, and each
/// redelivery answers as its first delivery did.
pub fn concurrent_deliveries(env: &Env) -> Result<(), Failed> {
    block_on(async {
        const S: &str = "idemdb_wf_inbox";
        fresh_schema(&env.url, S).await;
        let store = builder(env, S).pool_size(16).connect().await.expect("connect");
        let deliveries: Vec<_> = (1..=16u64)
            .flat_map(|version| [version, version])
            .map(|version| {
                let store = store.clone();
                tokio::spawn(async move {
                    let fingerprint = Fingerprint::from_bytes([u8::try_from(version).unwrap_or(0); 32]);
                    let delivery = Delivery::new(
                        "psp",
                        format!("evt_{version}"),
                        "ch_1",
                        version,
                        format!("state-{version}"),
                        fingerprint,
                        Vec::new(),
                    )
                    .expect("delivery");
                    (version, store.accept_delivery(&delivery, &NewerVersion).await.expect("accept"))
                })
            })
            .collect();
        let mut duplicates = 0;
        for delivery in deliveries {
            let (_, answer) = delivery.await.expect("delivery");
            if matches!(answer, InboxAnswer::Duplicate { .. }) {
                duplicates += 1;
            }
        }
        assert_eq!(duplicates, 16, "each redelivery is a duplicate");
        let object = store.object("psp", "ch_1").await.expect("object").expect("object");
        assert_eq!((object.version, object.state.as_str()), (16, "state-16"));
        let admin = admin(&env.url).await;
        assert_eq!(count(&admin, &format!("SELECT count(*) FROM {S}.idemdb_deliveries")).await, 16);
        let stored = store.delivery("psp", "evt_16").await.expect("delivery").expect("recorded");
        assert_eq!(stored.version, 16);
        // The operator's listing: every delivery once, by source then delivery id.
        let listed = InspectStore::list_deliveries(&store, 0).await.expect("list").expect("PostgreSQL lists its inbox");
        let ids: Vec<&str> = listed.iter().map(|d| d.delivery_id.as_str()).collect();
        let mut sorted = ids.clone();
        sorted.sort_unstable();
        assert_eq!((ids.len(), &ids, listed[0].source.as_str()), (16, &sorted, "psp"));
        let evt_16 = listed.iter().find(|d| d.delivery_id == "evt_16").expect("listed");
        assert_eq!(evt_16.record, stored);
        assert_eq!(store.deliveries(3).await.expect("limit").len(), 3);
    });
    Ok(())
}

/// Finished outbox items, old deliveries and finished jobs are removed by retention.
pub fn workflow_retention(env: &Env) -> Result<(), Failed> {
    block_on(async {
        const S: &str = "idemdb_wf_retention";
        fresh_schema(&env.url, S).await;
        let clock = ManualClock::new(1_000_000_000);
        let policy =
            Policy::default().with_response_ttl(Duration::from_secs(60)).with_tombstone_ttl(Duration::from_secs(60));
        let store = builder(env, S)
            .clock(clock.clone())
            .time_source(TimeSource::HostClock)
            .default_policy(policy)
            .connect()
            .await
            .expect("connect");
        let charge = EffectName::new("charge").expect("effect");
        let lease = acquire(&store, &key("done")).await;
        store.enqueue_effect(&lease, &charge, 1, Vec::new()).await.expect("enqueue");
        let claim = store.claim_effects(1).await.expect("claim").remove(0);
        let report = EffectReport::Confirmed { reference: "ch_1".into(), result: b"ok".to_vec() };
        store.report_effect(&claim, report).await.expect("report");
        let delivery = Delivery::new("psp", "evt_1", "ch_1", 1, "paid", FP, Vec::new()).expect("delivery");
        store.accept_delivery(&delivery, &NewerVersion).await.expect("accept");
        let job = key("job-1");
        let idemdb_postgres::JobAnswer::Claimed(job_lease) = store.claim_job(&scope(), &job, &FP).await.expect("job")
        else {
            panic!("a new job is claimed")
        };
        store.finish_job(&job_lease, b"done".to_vec()).await.expect("finish");
        let before = store.purge_expired(100).await.expect("purge");
        assert_eq!(before.workflow_forgotten, 0, "nothing is due yet");
        clock.advance(Duration::from_secs(121));
        let report = store.purge_expired(100).await.expect("purge");
        assert_eq!(report.workflow_forgotten, 3, "{report:?}");
        assert!(store.effect(&scope(), &key("done"), &charge).await.expect("effect").is_none());
        assert!(store.delivery("psp", "evt_1").await.expect("delivery").is_none());
        assert!(store.job(&scope(), &job).await.expect("job").is_none());
    });
    Ok(())
}

/// An enqueue on one instance wakes a listener of another: nothing while the enqueuing
/// transaction is open, a notification once it commits, and the listener then claims the item.
pub fn listeners_wake_on_committed_enqueues(env: &Env) -> Result<(), Failed> {
    block_on(async {
        const S: &str = "idemdb_wf_listen";
        fresh_schema(&env.url, S).await;
        let enqueuing = builder(env, S).connect().await.expect("connect");
        let dispatching = builder(env, S).connect().await.expect("connect");
        let listener = dispatching.outbox_listener().await.expect("listen");
        let charge = EffectName::new("charge").expect("effect");

        let lease = acquire(&enqueuing, &key("order-listen")).await;
        let mut txn = enqueuing.begin().await.expect("begin");
        txn.enqueue_effect(&lease, &charge, 1, b"10.50".to_vec()).await.expect("enqueue");
        let early = listener.wait(Duration::from_millis(300)).await;
        txn.commit().await.expect("commit");
        let woken = listener.wait(Duration::from_secs(10)).await;
        println!("listen: before commit woken = {early}, after commit woken = {woken}");
        assert!(!early, "no notification before the enqueue commits");
        assert!(woken, "the committed enqueue wakes the listener");
        let claimed = dispatching.claim_effects(8).await.expect("claim");
        assert_eq!(claimed.len(), 1, "{claimed:?}");
        assert!(!listener.is_closed());
        admin(&env.url).await.batch_execute(&format!("DROP SCHEMA {S} CASCADE")).await.expect("drop schema");
    });
    Ok(())
}
