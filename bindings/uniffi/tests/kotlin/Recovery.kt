// The way out for keys nobody will finish, from the binding: a holder killed with its leases
// is found and its keys resolved; renewing a lease; policies; a lost journal given up by
// choice; the suspend forms of the calls that write.
package idemdb.test

import idemdb.*
import kotlinx.coroutines.runBlocking
import java.io.File
import java.util.concurrent.TimeUnit

/** The keys the `reserve-and-die` worker reserves before it is killed. */
val DIED = listOf("died-1", "died-2")

/** Starts `worker(mode, path)`, waits for its line `ready`, kills it with SIGKILL. */
fun killAfter(mode: String, path: String, ready: String) {
    val process = worker(mode, path).redirectError(ProcessBuilder.Redirect.INHERIT).start()
    eq(process.inputStream.bufferedReader().readLine(), ready, "$mode: its line")
    process.destroyForcibly()
    check(process.waitFor(60, TimeUnit.SECONDS)) { "$mode: still alive" }
    eq(process.exitValue(), 137, "$mode: killed by SIGKILL")
}

/** Polls [read] until [done] holds of it (the store's time passing a lease), at most a minute. */
fun <T> awaitValue(read: () -> T, done: (T) -> Boolean): T {
    val deadline = System.nanoTime() + TimeUnit.MINUTES.toNanos(1)
    var value = read()
    while (!done(value) && System.nanoTime() < deadline) {
        Thread.sleep(20)
        value = read()
    }
    return value
}

fun defineRecoveryTests() {
    test("a holder killed with its leases: its keys are listed, resolved and replayed from the binding") {
        val path = file("died.idemdb")
        val fp = fingerprintOfCanonical(json("{}"))
        killAfter("reserve-and-die", path, "reserved")
        val store = IdemStore.open(path)
        val stuck = awaitValue({ store.recordsNeedingReconciliation() }) { it.size == DIED.size }
        eq(stuck.map { it.key }.sorted(), DIED, "keys whose holder died")
        for (record in stuck) {
            eq(record.scope, SCOPE, "scope")
            eq(record.record.state, "in_progress", "state")
            check(record.record.leaseExpiresAtMs != null) { "lease end: $record" }
        }
        eq(store.reserve(SCOPE, "died-1", fp), Reservation.NeedsReconciliation("lease_expired"), "a retry is refused")
        eq(store.get(SCOPE, "died-1")?.uncertainCause, "lease_expired", "uncertain, and why")
        // The app asked its server: the first payment happened, the second never left.
        store.reconcile(SCOPE, "died-1", Resolution.Completed(json("""{"charge":"ch_1"}""")), "provider_confirmed")
        runBlocking { store.reconcileAsync(SCOPE, "died-2", Resolution.Released) }
        val replay = store.reserve(SCOPE, "died-1", fp) as Reservation.Replay
        eq(replay.outcome to String(replay.body), "completed" to """{"charge":"ch_1"}""", "replayed")
        val again = store.reserve(SCOPE, "died-2", fp)
        check(again is Reservation.Acquired) { "released: the same request runs again ($again)" }
        eq(store.recordsNeedingReconciliation(), listOf(), "nothing left to reconcile")
        throws<IdemdbException.WrongState> { store.reconcile(SCOPE, "died-1", Resolution.Released) }
        throws<IdemdbException.LeaseLive> { store.reconcile(SCOPE, "died-2", Resolution.Released) }
        throws<IdemdbException.UnknownName> { store.reconcile(SCOPE, "died-2", Resolution.Released, "because") }
        throws<IdemdbException.NotFound> { store.reconcile(SCOPE, "never", Resolution.Released) }
        store.closeStore()
    }

    test("an uncertain attempt is listed with its cause and resolved as failed; a renewed lease completes") {
        val store = IdemStore.inMemory()
        val fp = fingerprintOfCanonical(json("{}"))
        val lease = (store.reserve(SCOPE, "timed-out", fp) as Reservation.Acquired).lease
        store.fail(lease, Failure.Uncertain)
        val listed = runBlocking { store.recordsNeedingReconciliationAsync() }.single()
        eq(listed.key to listed.record.uncertainCause, "timed-out" to "reported", "listed with its cause")
        store.reconcile(SCOPE, "timed-out", Resolution.Failed(json("declined")), "provider_failed")
        val failed = store.reserve(SCOPE, "timed-out", fp) as Reservation.Replay
        eq(failed.outcome to String(failed.body), "failed" to "declined", "failure replayed")

        val held = (store.reserve(SCOPE, "long", fp) as Reservation.Acquired).lease
        val renewed = runBlocking { store.renewAsync(held) }
        eq(renewed.fence to renewed.key, held.fence to held.key, "the same lease")
        check(renewed.expiresAtMs >= held.expiresAtMs) { "renewed until ${renewed.expiresAtMs}, was ${held.expiresAtMs}" }
        eq(store.renew(renewed).fence, held.fence, "renewed again")
        store.complete(renewed, json("done"))
        throws<IdemdbException.WrongState> { store.renew(renewed) }
        throws<IdemdbException.StaleLease> { store.renew(renewed.copy(fence = renewed.fence - 1UL)) }
    }

    test("policies per operation and by default, read back; bad policies are typed refusals") {
        val options = StoreOptions(
            defaultPolicy = PolicySettings(responseTtlMs = 3_600_000UL),
            policies = mapOf("sync" to PolicySettings(leaseTtlMs = 5_000UL, maxResultBytes = 16UL, expiredLease = "takeover")),
        )
        val store = IdemStore.openWith(file("policies.idemdb"), options)
        val sync = store.policy("sync")
        eq(listOf(sync.leaseTtlMs, sync.maxResultBytes, sync.expiredLease), listOf<Any?>(5_000UL, 16UL, "takeover"), "sync policy")
        eq(sync.responseTtlMs, 2_592_000_000UL, "an operation's own policy starts from the core's defaults")
        eq(store.policy("pay").responseTtlMs, 3_600_000UL, "default policy")
        eq(store.policy("pay").leaseTtlMs, 60_000UL, "the core's default lease")
        val lease = (store.reserve(Scope("me", "sync"), "big", fingerprintOfCanonical(json("{}"))) as Reservation.Acquired).lease
        throws<IdemdbException.TooLarge> { store.complete(lease, ByteArray(17)) }
        store.closeStore()
        throws<IdemdbException.InvalidPolicy> { IdemStore.openWith(file("p0.idemdb"), StoreOptions(defaultPolicy = PolicySettings(leaseTtlMs = 0UL))) }
        throws<IdemdbException.UnknownName> { IdemStore.openWith(file("p1.idemdb"), StoreOptions(policies = mapOf("x" to PolicySettings(expiredLease = "sometimes")))) }
        throws<IdemdbException.InvalidPolicy> { runBlocking { openStoreWithAsync(file("p2.idemdb"), StoreOptions(defaultPolicy = PolicySettings(maxResultBytes = 0UL))) } }
    }

    test("a store whose journal is lost: refused with nothing changed, then opened by choice, the loss reported") {
        val path = file("lost.idemdb")
        killAfter("commit-and-die", path, "committed")
        check(File("$path-journal").delete()) { "the journal is there to lose" }
        val before = File(path).readBytes()
        val refused = throws<IdemdbException.Corrupt> { IdemStore.open(path) }
        check(refused.detail.contains("discard_lost_journal")) { "says the way out: ${refused.detail}" }
        check(File(path).readBytes().contentEquals(before)) { "the refused open changed the store file" }
        val store = IdemStore.openWith(path, StoreOptions(discardLostJournal = true))
        val report = store.journalRecovery()!!
        eq(report.discarded, true, "commits given up")
        val lost = (0 until 5).count { store.get(SCOPE, "c-$it") == null }
        println("  lost journal: $lost of 5 acknowledged completions given up, reported: $report")
        eq(IdemStore.inMemory().journalRecovery(), null, "no journal in memory")
        store.closeStore()
        eq(IdemStore.open(path).use { it.journalRecovery()!!.discarded }, false, "a later open gives up nothing")
    }

    test("the suspend forms of the attention calls answer as the blocking ones") {
        runBlocking {
            val store = IdemStore.inMemory()
            val key = newKey()
            store.createIntentAsync(SCOPE, key, json("{}"), Canonicalizer())
            val parked = store.markNeedsAttentionAsync(SCOPE, key, "retries_exhausted", IntentResponse(503u, listOf(), json("busy")))
            eq(parked.state to parked.attentionCause, "needs_attention" to "retries_exhausted", "parked")
            eq(store.intentsNeedingAttentionAsync().map { it.key }, listOf(key), "listed")
            eq(store.reopenIntentAsync(SCOPE, key).state, "pending", "reopened")
            eq(store.intentsNeedingAttentionAsync(), listOf(), "none left")
            try {
                store.markNeedsAttentionAsync(SCOPE, key, "bored", null)
                throw Failed("an unknown cause was accepted")
            } catch (e: IdemdbException.UnknownName) {
                eq(e.codeString, "IDEMDB_UNKNOWN_NAME", "code")
            }
        }
    }
}
