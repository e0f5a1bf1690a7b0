// Cancelled suspend calls: a store call that has started runs to completion and its result is
// delivered; one cancelled before it starts does nothing. Checked by counting, in the store,
// the reservations and completions each caller was (or was not) told about.
package idemdb.test

import idemdb.*
import kotlinx.coroutines.*
import java.util.concurrent.ConcurrentHashMap
import java.util.concurrent.locks.LockSupport

/** What the callers saw, per key, and what the store holds afterwards. */
class CancelLedger {
    /** Keys whose caller got the lease back from `reserveAsync`. */
    val held: MutableSet<String> = ConcurrentHashMap.newKeySet()
    /** Keys whose caller saw `completeAsync` return. */
    val completed: MutableSet<String> = ConcurrentHashMap.newKeySet()

    /** Keys the store holds reserved although their caller never got the lease. */
    fun orphaned(store: IdemStore, keys: List<String>) = keys.filter { store.get(SCOPE, it)?.state == "in_progress" && it !in held }

    /** Keys the store holds completed although their caller was told the call was cancelled. */
    fun hidden(store: IdemStore, keys: List<String>) = keys.filter { store.get(SCOPE, it)?.state == "completed" && it !in completed }
}

/** Median nanoseconds of an uncancelled reserve + complete pair on [store]. */
fun pairNanos(store: IdemStore, fp: String): Long = runBlocking(Dispatchers.Default) {
    val times = (0 until 15).map { i ->
        val started = System.nanoTime()
        val lease = (store.reserveAsync(SCOPE, "warm-$i", fp) as Reservation.Acquired).lease
        store.completeAsync(lease, json("$i"))
        System.nanoTime() - started
    }
    times.sorted()[times.size / 2]
}

fun defineCancellationTests() {
    test("cancelled suspend calls: no lease nobody holds, no commit its caller was told was cancelled") {
        val store = IdemStore.open(file("cancel.idemdb"))
        val fp = fingerprintOfCanonical(json("{}"))
        val pair = pairNanos(store, fp)
        val random = java.util.Random(14)
        val ledger = CancelLedger()
        val keys = (0 until 240).map { "cancel-$it" }
        var cancelled = 0
        runBlocking(Dispatchers.Default) {
            for ((i, key) in keys.withIndex()) {
                val running = CompletableDeferred<Unit>()
                val job = launch {
                    running.complete(Unit)
                    val lease = (store.reserveAsync(SCOPE, key, fp) as Reservation.Acquired).lease
                    ledger.held.add(key)
                    store.completeAsync(lease, json("$i"))
                    ledger.completed.add(key)
                }
                running.await()
                // Anywhere from before the reservation starts to after the completion returns.
                LockSupport.parkNanos((random.nextDouble() * pair * 1.3).toLong())
                job.cancel()
                job.join()
                if (job.isCancelled) cancelled++
            }
        }
        val orphaned = ledger.orphaned(store, keys)
        val hidden = ledger.hidden(store, keys)
        val reserved = keys.count { store.get(SCOPE, it) != null }
        println("  cancel: ${keys.size} pairs, $cancelled cancelled (pair ${pair / 1000} µs); $reserved reserved, " +
            "${ledger.held.size} leases delivered, ${ledger.completed.size} completions delivered; " +
            "${orphaned.size} orphaned reservations, ${hidden.size} completions reported as cancelled")
        check(cancelled > keys.size / 4) { "only $cancelled of ${keys.size} calls were cancelled" }
        eq(orphaned, listOf<String>(), "reserved keys whose caller never got the lease")
        eq(hidden, listOf<String>(), "completed keys whose caller saw CancellationException")
        store.closeStore()
    }

    test("a call in an already-cancelled coroutine does not start; withTimeout around a call delivers or does nothing") {
        val store = IdemStore.open(file("cancel-before.idemdb"))
        val fp = fingerprintOfCanonical(json("{}"))
        runBlocking {
            val job = launch(start = CoroutineStart.UNDISPATCHED) {
                cancel()
                store.reserveAsync(SCOPE, "never", fp)
            }
            job.join()
        }
        eq(store.get(SCOPE, "never"), null, "a call made after the cancellation never ran")
        val ledger = CancelLedger()
        val keys = (0 until 60).map { "timeout-$it" }
        runBlocking(Dispatchers.Default) {
            for ((i, key) in keys.withIndex()) {
                withTimeoutOrNull(1L + i % 4) {
                    val lease = (store.reserveAsync(SCOPE, key, fp) as Reservation.Acquired).lease
                    ledger.held.add(key)
                    store.completeAsync(lease, json("$i"))
                    ledger.completed.add(key)
                }
            }
        }
        eq(ledger.orphaned(store, keys), listOf<String>(), "reserved keys whose caller never got the lease")
        eq(ledger.hidden(store, keys), listOf<String>(), "completed keys whose caller saw a timeout")
        store.closeStore()
    }
}
