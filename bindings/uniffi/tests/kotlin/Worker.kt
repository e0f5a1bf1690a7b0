// The worker processes of the Kotlin tests: a client killed with SIGKILL mid-write, the fresh
// process that resumes its pending intents, and the cross-runtime writer and reader.
package idemdb.test

import idemdb.*
import java.io.File

fun main(args: Array<String>) {
    when (args[0]) {
        // Creates intents and sends each, forever (the test kills it): prints each key once its
        // intent is on disk.
        "client" -> {
            val store = IdemStore.open(args[1])
            val url = args[2]
            val canon = Canonicalizer(listOf("/trace_id"))
            var n = 0
            while (true) {
                val key = newKey()
                val intent = store.createIntent(SCOPE, key, json("""{"n":$n,"trace_id":"t$n"}"""), canon)
                println("created $key")
                System.out.flush()
                send(store, intent, url)
                n++
            }
        }
        // A fresh process: resumes every pending intent with its stored key and request.
        "resume" -> {
            val store = IdemStore.open(args[1])
            val pending = store.pendingIntents()
            for (intent in pending) send(store, intent, args[2])
            println("resumed ${pending.size}")
            eq(store.pendingIntents().size, 0, "pending after resume")
            store.closeStore()
        }
        // Opens the empty path in this process's working directory and says how it failed.
        "open-empty" -> try {
            IdemStore.open("")
            println("opened")
        } catch (e: IdemdbException) {
            println("${e::class.simpleName} transient=${e.isTransient}")
        }
        // Reserves two keys under a 200 ms lease, says so and waits to be killed: a holder that
        // dies with its leases.
        "reserve-and-die" -> {
            val store = IdemStore.openWith(args[1], StoreOptions(policies = mapOf(SCOPE.operation to PolicySettings(leaseTtlMs = 200UL))))
            for (key in DIED) store.reserve(SCOPE, key, fingerprintOfCanonical(json("{}")))
            println("reserved")
            Thread.sleep(Long.MAX_VALUE)
        }
        // Commits five completed keys (to the journal, not yet to the store file), says so and
        // waits to be killed.
        "commit-and-die" -> {
            val store = IdemStore.open(args[1])
            for (i in 0 until 5) {
                val lease = (store.reserve(SCOPE, "c-$i", fingerprintOfCanonical(json("{}"))) as Reservation.Acquired).lease
                store.complete(lease, json("$i"))
            }
            println("committed")
            Thread.sleep(Long.MAX_VALUE)
        }
        "cross-write" -> crossWrite(args[1])
        "cross-read" -> crossRead(args[1], args[2])
        else -> error("unknown mode ${args[0]}")
    }
}

/** The Kotlin side of the cross-runtime test: a store the CLI, Node and Rust read back. */
fun crossWrite(path: String) {
    File(path).delete()
    val store = IdemStore.open(path)
    val scope = Scope("acme", "create_payment")
    val canon = Canonicalizer(listOf("/trace_id"), listOf(FieldNormaliser("/currency", Normaliser.UPPERCASE)))
    val fp = canon.fingerprint(json("""{"amount":"10.50","currency":"brl","trace_id":"k1"}"""))
    val lease = (store.reserve(scope, "from-kotlin", fp) as Reservation.Acquired).lease
    store.complete(lease, json("""{"charge":"ch_kotlin"}"""))
    store.createIntent(scope, "intent-from-kotlin", json("""{"amount":"1.00","trace_id":"x"}"""), canon)
    store.closeStore()
    println("fingerprint $fp")
}

/** Reads a store another runtime wrote: `kind` says which and what it holds. */
fun crossRead(kind: String, path: String) {
    val store = IdemStore.open(path)
    val scope = Scope("acme", "create_payment")
    when (kind) {
        // tests/testdata/golden/store-v1.idemdb, written by the Rust crate (tests/suite/golden.rs).
        "rust-golden" -> {
            eq(store.get(scope, "completed")?.state, "completed", "golden completed")
            eq(store.get(scope, "uncertain")?.state, "uncertain", "golden uncertain")
            eq(store.get(scope, "in-progress")?.state, "in_progress", "golden in progress")
            val replay = store.reserve(scope, "completed", "02".repeat(32)) as Reservation.Replay
            eq(String(replay.body), """{"charge":"ch_1"}""", "golden replay")
            val failed = store.reserve(scope, "failed", "03".repeat(32)) as Reservation.Replay
            eq(failed.outcome, "failed", "golden failed outcome")
            check(store.reserve(scope, "completed", "09".repeat(32)) is Reservation.Mismatch) { "golden mismatch" }
        }
        // Written by the npm package in Node (bindings/uniffi/tests/cross/node-write.mjs).
        "node" -> {
            val replay = store.reserve(scope, "from-node", "05".repeat(32)) as Reservation.Replay
            eq(String(replay.body), """{"charge":"ch_node"}""", "node replay")
            val pending = store.pendingIntents()
            eq(pending.map { it.key }, listOf("intent-from-node"), "node pending intents")
            eq(String(pending[0].request), """{"amount":"2.00"}""", "node intent request")
        }
        else -> error("unknown kind $kind")
    }
    store.closeStore()
    println("read $kind ok")
}
