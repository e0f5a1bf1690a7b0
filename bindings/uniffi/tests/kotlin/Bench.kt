// The Kotlin side of the bindings benchmark (bindings/uniffi/scripts/bench.sh): reserve +
// complete pairs of new keys on the store file, blocking and then with suspend calls.
// Prints "kotlin-blocking ops/s" and "kotlin-suspend ops/s".
package idemdb.test

import idemdb.*
import kotlinx.coroutines.runBlocking

fun main(args: Array<String>) {
    val (path, count, prefix) = args
    val n = count.toInt()
    val store = IdemStore.open(path)
    val scope = Scope("bench", "pay")
    val fp = fingerprintOfCanonical(json("""{"amount":"1.00"}"""))
    val result = json("""{"ok":true}""")
    // Warm-up: JIT and JNA's first calls, both paths, on keys of their own.
    for (i in 0 until 50) {
        val lease = (store.reserve(scope, "$prefix-warm-$i", fp) as Reservation.Acquired).lease
        store.complete(lease, result)
    }
    runBlocking {
        for (i in 0 until 50) {
            val lease = (store.reserveAsync(scope, "$prefix-warm-s-$i", fp) as Reservation.Acquired).lease
            store.completeAsync(lease, result)
        }
    }
    fun blocking(tag: String) {
        val started = System.nanoTime()
        for (i in 0 until n) {
            val lease = (store.reserve(scope, "$prefix-$tag-$i", fp) as Reservation.Acquired).lease
            store.complete(lease, result)
        }
        println("kotlin-blocking %.1f".format(n / ((System.nanoTime() - started) / 1e9)))
    }
    fun suspending(tag: String) {
        val started = System.nanoTime()
        runBlocking {
            for (i in 0 until n) {
                val lease = (store.reserveAsync(scope, "$prefix-$tag-$i", fp) as Reservation.Acquired).lease
                store.completeAsync(lease, result)
            }
        }
        println("kotlin-suspend %.1f".format(n / ((System.nanoTime() - started) / 1e9)))
    }
    // Alternated, so neither path always runs first.
    blocking("b1")
    suspending("s1")
    suspending("s2")
    blocking("b2")
    store.closeStore()
}
