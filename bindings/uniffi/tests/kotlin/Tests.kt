// The Kotlin tests of the idemdb bindings, run on the JVM against the host library through JNA
// (bindings/uniffi/scripts/test.sh). Ends with "kotlin: N passed, M failed".
package idemdb.test

import idemdb.*
import kotlinx.coroutines.*
import java.io.File
import java.nio.file.Files
import java.util.concurrent.ConcurrentHashMap
import java.util.concurrent.CountDownLatch
import java.util.concurrent.Executors
import java.util.concurrent.TimeUnit
import java.util.concurrent.atomic.AtomicInteger
import kotlin.concurrent.thread

val tests = linkedMapOf<String, () -> Unit>()

fun test(name: String, body: () -> Unit) {
    tests[name] = body
}

val scratch: File = Files.createTempDirectory("idemdb-kotlin").toFile()
fun file(name: String) = File(scratch, name).path

fun defineTests() {
    test("keys are UUID v4 and unique") {
        val keys = (1..1000).map { newKey() }.toSet()
        eq(keys.size, 1000, "distinct keys")
        val uuid = Regex("^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$")
        check(keys.all { uuid.matches(it) }) { "not UUID v4: ${keys.first { !uuid.matches(it) }}" }
    }

    test("fingerprint through the core's canonicaliser, exclusions and normalisers") {
        val canon = Canonicalizer(
            listOf("/trace_id"),
            listOf(FieldNormaliser("/currency", Normaliser.UPPERCASE), FieldNormaliser("/amount", Normaliser.DECIMAL_AMOUNT)),
        )
        val a = canon.fingerprint(json("""{"amount":"10.50","currency":"brl","trace_id":"a1"}"""))
        val b = canon.fingerprint(json("""{ "currency":"BRL", "amount":"10.5", "trace_id":"b2" }"""))
        eq(a, b, "equivalent requests")
        eq(a.length, 64, "hex digits")
        check(a != canon.fingerprint(json("""{"amount":"99.00","currency":"BRL"}"""))) { "a different amount has a different fingerprint" }
        eq(String(canon.canonicalize(json("""{"trace_id":"x","currency":"brl","amount":"010.50"}"""))), """{"amount":"10.5","currency":"BRL"}""", "canonical form")
        eq(fingerprintOfCanonical(json("""{"amount":"10.5","currency":"BRL"}""")), a, "fingerprint of the canonical form")
        val e = throws<IdemdbException.InvalidRequest> { canon.fingerprint(json("{not json")) }
        eq(e.codeString, "IDEMDB_INVALID_REQUEST", "code")
        throws<IdemdbException.InvalidArgument> { Canonicalizer(listOf("no-slash")) }
        throws<IdemdbException.InvalidRequest> { Canonicalizer(maxBodyBytes = 4UL).fingerprint(json("[1,2,3,4,5]")) }
    }

    test("intents: create before the send, attempts, response, pending, abandon") {
        val store = IdemStore.inMemory()
        val canon = Canonicalizer(listOf("/trace_id"))
        val key = newKey()
        val created = store.createIntent(SCOPE, key, json("""{"b":1,"a":"x","trace_id":"t1"}"""), canon)
        eq(String(created.request), """{"a":"x","b":1}""", "canonical request")
        eq(created.state, "pending", "state")
        eq(created.fingerprint, fingerprintOfCanonical(created.request), "fingerprint")
        val again = store.createIntent(SCOPE, key, json("""{"a":"x","b":1,"trace_id":"t2"}"""), canon)
        eq(again.createdAtMs, created.createdAtMs, "the same intent again")
        eq(throws<IdemdbException.KeyMismatch> { store.createIntent(SCOPE, key, json("""{"a":"y"}"""), canon) }.codeString, "IDEMDB_KEY_MISMATCH", "code")
        eq(store.pendingIntents().map { it.key }, listOf(key), "pending")
        store.recordAttempt(SCOPE, key, AttemptOutcome.Sent)
        val attempted = store.recordAttempt(SCOPE, key, AttemptOutcome.Status(503u))
        eq(attempted.attempts, 1u, "attempts")
        eq(attempted.lastAttempt, "status", "last attempt")
        eq(attempted.lastAttemptStatus, 503.toUShort(), "last status")
        store.recordAttempt(SCOPE, key, AttemptOutcome.Timeout)
        eq(store.recordAttempt(SCOPE, key, AttemptOutcome.NetworkError).attempts, 3u, "attempts without Sent")
        val response = IntentResponse(201u, listOf(Header("content-type", "application/json")), json("""{"id":1}"""))
        val done = store.recordResponse(SCOPE, key, response)
        eq(done.state, "completed", "completed")
        eq(String(done.response!!.body), """{"id":1}""", "response body")
        eq(done.response!!.headers, response.headers, "headers")
        eq(store.pendingIntents().size, 0, "nothing pending")
        eq(store.recordResponse(SCOPE, key, response).updatedAtMs, done.updatedAtMs, "the same response again is a no-op")
        throws<IdemdbException.IntentFinished> { store.recordResponse(SCOPE, key, IntentResponse(500u, listOf(), json(""))) }
        throws<IdemdbException.IntentFinished> { store.abandonIntent(SCOPE, key, "late") }
        throws<IdemdbException.NotFound> { store.recordAttempt(SCOPE, "nope", AttemptOutcome.Sent) }
        eq(store.intent(SCOPE, "nope"), null, "unknown intent")
        val other = newKey()
        store.createIntent(SCOPE, other, json("{}"), canon)
        throws<IdemdbException.InvalidArgument> { store.abandonIntent(SCOPE, other, "") }
        val abandoned = store.abandonIntent(SCOPE, other, "user cancelled")
        eq(abandoned.state, "abandoned", "abandoned")
        eq(abandoned.abandonReason, "user cancelled", "reason")
        eq(store.intent(SCOPE, other)?.state, "abandoned", "read back")
        eq(store.pendingIntents().size, 0, "nothing pending")
        throws<IdemdbException.TooLarge> {
            val big = newKey()
            store.createIntent(SCOPE, big, json("{}"), canon)
            store.recordResponse(SCOPE, big, IntentResponse(200u, listOf(), ByteArray(2 * 1024 * 1024)))
        }
    }

    test("needs attention: its cause and last answer are kept until reopened or abandoned") {
        val store = IdemStore.inMemory()
        val canon = Canonicalizer(listOf())
        val key = newKey()
        store.createIntent(SCOPE, key, json("""{"amount":"10.50"}"""), canon)
        store.recordAttempt(SCOPE, key, AttemptOutcome.Status(409u))
        val answer = IntentResponse(409u, listOf(Header("content-type", "application/problem+json")), json("""{"type":"urn:idemdb:problem:needs-reconciliation"}"""))
        val parked = store.markNeedsAttention(SCOPE, key, "needs_reconciliation", answer)
        eq(parked.state, "needs_attention", "state")
        eq(parked.attentionCause, "needs_reconciliation", "cause")
        eq(String(parked.response!!.body), """{"type":"urn:idemdb:problem:needs-reconciliation"}""", "last answer")
        eq(parked.response!!.status, 409.toUShort(), "last status")
        eq(store.pendingIntents().size, 0, "not resumed")
        eq(store.intentsNeedingAttention().map { it.key }, listOf(key), "listed")
        eq(store.intent(SCOPE, key)?.attentionCause, "needs_reconciliation", "read back")
        throws<IdemdbException.UnknownName> { store.markNeedsAttention(SCOPE, key, "bored", null) }
        throws<IdemdbException.IntentFinished> { store.recordAttempt(SCOPE, key, AttemptOutcome.Sent) }
        val reopened = store.reopenIntent(SCOPE, key)
        eq(reopened.state, "pending", "reopened")
        eq(reopened.attentionCause, null, "no cause once pending")
        eq(reopened.budgetStart, 1u, "a new attempt budget")
        eq(store.pendingIntents().map { it.key }, listOf(key), "pending again")
        val other = newKey()
        store.createIntent(SCOPE, other, json("{}"), canon)
        eq(store.markNeedsAttention(SCOPE, other, "retries_exhausted", null).response, null, "no answer")
        eq(store.abandonIntent(SCOPE, other, "refunded by hand").state, "abandoned", "abandoned from needs attention")
    }

    test("reserve / complete / fail / replay for an app that is its own server") {
        val store = IdemStore.inMemory()
        val canon = Canonicalizer()
        val fp = canon.fingerprint(json("""{"cmd":"add","n":1}"""))
        val lease = (store.reserve(SCOPE, "cmd-1", fp) as Reservation.Acquired).lease
        eq(lease.attempt, 1u, "first attempt")
        val busy = store.reserve(SCOPE, "cmd-1", fp)
        check(busy is Reservation.InProgress && busy.retryAfterMs > 0UL) { "in progress: $busy" }
        eq(store.get(SCOPE, "cmd-1")?.state, "in_progress", "record state")
        throws<IdemdbException.StaleLease> { store.complete(lease.copy(fence = lease.fence - 1UL), json("x")) }
        store.complete(lease, json("""{"total":1}"""))
        val replay = store.reserve(SCOPE, "cmd-1", fp) as Reservation.Replay
        eq(replay.outcome, "completed", "outcome")
        eq(String(replay.body), """{"total":1}""", "replayed body")
        eq((store.reserve(SCOPE, "cmd-1", canon.fingerprint(json("""{"n":2}"""))) as Reservation.Mismatch).storedState, "completed", "mismatch")
        throws<IdemdbException.WrongState> { store.complete(lease, json("again")) }

        val declined = (store.reserve(SCOPE, "cmd-2", fp) as Reservation.Acquired).lease
        store.fail(declined, Failure.Definitive(json("declined")))
        val failed = store.reserve(SCOPE, "cmd-2", fp) as Reservation.Replay
        eq(failed.outcome to String(failed.body), "failed" to "declined", "definitive failure replayed")

        val retry = (store.reserve(SCOPE, "cmd-3", fp) as Reservation.Acquired).lease
        store.fail(retry, Failure.Retryable)
        val second = (store.reserve(SCOPE, "cmd-3", fp) as Reservation.Acquired).lease
        check(second.fence > retry.fence) { "a new fence after a release" }

        store.fail(second, Failure.Uncertain)
        eq((store.reserve(SCOPE, "cmd-3", fp) as Reservation.NeedsReconciliation).cause, "reported", "uncertain")
        eq(store.get(SCOPE, "cmd-3")?.state, "uncertain", "record state")
        eq(store.get(SCOPE, "none"), null, "no record")
        throws<IdemdbException.InvalidKey> { store.reserve(SCOPE, "", fp) }
        throws<IdemdbException.InvalidKey> { store.reserve(Scope("", "op"), "k", fp) }
        throws<IdemdbException.InvalidArgument> { store.reserve(SCOPE, "k", "abc") }
    }

    test("every error is a typed exception named after the core's stable code") {
        val codes = errorCodes()
        check(codes.size >= 40) { "codes: $codes" }
        val classes = IdemdbException::class.java.declaredClasses.filter { IdemdbException::class.java.isAssignableFrom(it) && it != IdemdbException::class.java }
        val fromClasses = classes.map { "IDEMDB_" + it.simpleName.replace(Regex("(?<=.)(?=[A-Z])"), "_").uppercase() }.toSet()
        eq(fromClasses, codes.toSet(), "one exception class per core code")
        // Codes of real failures.
        val path = file("busy.idemdb")
        val store = IdemStore.open(path)
        val busy = throws<IdemdbException.StoreBusy> { IdemStore.open(path) }
        eq(busy.codeString to busy.transient, "IDEMDB_STORE_BUSY" to true, "busy")
        eq(store.path(), path, "path")
        store.closeStore()
        store.closeStore()
        check(store.isClosed()) { "closed" }
        eq(throws<IdemdbException.Closed> { store.pendingIntents() }.codeString, "IDEMDB_CLOSED", "closed")
        throws<IdemdbException.Closed> { runBlocking { store.reserveAsync(SCOPE, "k", "00".repeat(32)) } }
        IdemStore.open(path).close() // released
        val junk = File(file("junk.idemdb")).apply { writeBytes(ByteArray(8192) { 0x5a }) }
        val notAStore = throws<IdemdbException> { IdemStore.open(junk.path) }
        check(notAStore is IdemdbException.NotAStore || notAStore is IdemdbException.Corrupt) { "junk: $notAStore" }
        check(notAStore.message!!.contains("IDEMDB_")) { "message carries the code: ${notAStore.message}" }
    }

    test("suspend variants answer as the blocking calls") {
        runBlocking {
            val store = openStoreAsync(file("async.idemdb"))
            val canon = Canonicalizer(listOf("/trace_id"))
            val fp = canon.fingerprint(json("""{"n":1}"""))
            val lease = (store.reserveAsync(SCOPE, "a-1", fp) as Reservation.Acquired).lease
            store.completeAsync(lease, json("r"))
            eq(String((store.reserveAsync(SCOPE, "a-1", fp) as Reservation.Replay).body), "r", "replay")
            val lease2 = (store.reserveAsync(SCOPE, "a-2", fp) as Reservation.Acquired).lease
            store.failAsync(lease2, Failure.Uncertain)
            eq(store.getAsync(SCOPE, "a-2")?.state, "uncertain", "get")
            val key = newKey()
            store.createIntentAsync(SCOPE, key, json("""{"x":1,"trace_id":"q"}"""), canon)
            store.recordAttemptAsync(SCOPE, key, AttemptOutcome.Sent)
            eq(store.pendingIntentsAsync().map { it.key }, listOf(key), "pending")
            eq(store.intentAsync(SCOPE, key)?.attempts, 1u, "attempts")
            store.recordResponseAsync(SCOPE, key, IntentResponse(200u, listOf(), json("ok")))
            val other = newKey()
            store.createIntentAsync(SCOPE, other, json("{}"), canon)
            store.abandonIntentAsync(SCOPE, other, "no")
            eq(store.pendingIntentsAsync().size, 0, "nothing pending")
            val e = try { store.createIntentAsync(SCOPE, key, json("""{"x":2}"""), canon); null } catch (e: IdemdbException.KeyMismatch) { e }
            eq(e?.codeString, "IDEMDB_KEY_MISMATCH", "typed error from a suspend call")
            store.closeStore()
        }
    }

    test("suspend calls never block the caller's thread (16 coroutines on one thread overlap)") {
        val store = IdemStore.open(file("one-thread.idemdb"))
        val fp = fingerprintOfCanonical(json("{}"))
        val dispatcher = Executors.newSingleThreadExecutor().asCoroutineDispatcher()
        val inFlight = AtomicInteger()
        var most = 0
        runBlocking(dispatcher) {
            (0 until 16).map { i ->
                launch {
                    most = maxOf(most, inFlight.incrementAndGet())
                    val lease = (store.reserveAsync(SCOPE, "one-$i", fp) as Reservation.Acquired).lease
                    store.completeAsync(lease, json("$i"))
                    inFlight.decrementAndGet()
                }
            }.joinAll()
        }
        dispatcher.close()
        // A call that blocked the one thread would finish before the next coroutine starts.
        check(most > 1) { "at most $most call(s) in flight on one thread: the calls blocked it" }
        eq((0 until 16).count { store.get(SCOPE, "one-$it")?.state == "completed" }, 16, "all completed")
        store.closeStore()
    }

    test("16 threads race on the same keys: one effect per key") {
        val store = IdemStore.open(file("threads.idemdb"))
        val keys = (0 until 40).map { "t-$it" }
        val effects = ConcurrentHashMap<String, AtomicInteger>()
        val start = CountDownLatch(1)
        val errors = java.util.Collections.synchronizedList(mutableListOf<Throwable>())
        val threads = (0 until 16).map { t ->
            thread {
                try {
                    start.await()
                    for (key in keys.shuffled(java.util.Random(t.toLong()))) {
                        val fp = fingerprintOfCanonical(json("""{"k":"$key"}"""))
                        while (true) {
                            when (val r = store.reserve(SCOPE, key, fp)) {
                                is Reservation.Acquired -> {
                                    val n = effects.computeIfAbsent(key) { AtomicInteger() }.incrementAndGet()
                                    store.complete(r.lease, json("$n"))
                                    break
                                }
                                is Reservation.Replay -> { check(String(r.body) == "1") { "replay ${String(r.body)}" }; break }
                                is Reservation.InProgress -> Thread.sleep(1)
                                else -> throw Failed("unexpected $r")
                            }
                        }
                    }
                } catch (e: Throwable) { errors.add(e) }
            }
        }
        start.countDown()
        threads.forEach { it.join() }
        check(errors.isEmpty()) { "errors: $errors" }
        eq(keys.map { effects[it]?.get() }, keys.map { 1 }, "effects per key")
        store.closeStore()
    }

    test("16 coroutines race on the same keys with suspend calls: one effect per key") {
        val store = IdemStore.open(file("coroutines.idemdb"))
        val keys = (0 until 40).map { "c-$it" }
        val effects = ConcurrentHashMap<String, AtomicInteger>()
        runBlocking(Dispatchers.Default) {
            (0 until 16).map { c ->
                launch {
                    for (key in keys.shuffled(java.util.Random(c.toLong()))) {
                        val fp = fingerprintOfCanonical(json("""{"k":"$key"}"""))
                        while (true) {
                            when (val r = store.reserveAsync(SCOPE, key, fp)) {
                                is Reservation.Acquired -> {
                                    val n = effects.computeIfAbsent(key) { AtomicInteger() }.incrementAndGet()
                                    store.completeAsync(r.lease, json("$n"))
                                    break
                                }
                                is Reservation.Replay -> { check(String(r.body) == "1") { "replay ${String(r.body)}" }; break }
                                is Reservation.InProgress -> delay(1)
                                else -> throw Failed("unexpected $r")
                            }
                        }
                    }
                }
            }.joinAll()
        }
        eq(keys.map { effects[it]?.get() }, keys.map { 1 }, "effects per key")
        store.closeStore()
    }

    test("kill -9 of a client JVM mid-write, then a fresh process resumes: one effect per intent") {
        EffectServer().use { server ->
            val path = file("killed.idemdb")
            val client = worker("client", path, server.url).redirectError(ProcessBuilder.Redirect.INHERIT).start()
            val created = java.util.Collections.synchronizedList(mutableListOf<String>())
            val reader = thread { client.inputStream.bufferedReader().forEachLine { if (it.startsWith("created ")) created.add(it.removePrefix("created ")) } }
            val deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(60)
            while (server.total.get() < 40 && System.nanoTime() < deadline && client.isAlive) Thread.sleep(5)
            check(client.isAlive) { "the client exited by itself: ${client.exitValue()}" }
            eq(ProcessBuilder("kill", "-9", client.pid().toString()).start().waitFor(), 0, "kill -9")
            client.waitFor()
            reader.join()
            eq(client.exitValue(), 137, "killed by SIGKILL")
            check(created.size >= 40) { "only ${created.size} intents created" }
            val resume = worker("resume", path, server.url).redirectErrorStream(true).start()
            val out = resume.inputStream.bufferedReader().readText()
            eq(resume.waitFor(), 0, "resume exit ($out)")
            // Every intent whose key was on disk has exactly one effect, and every effect
            // belongs to an intent on disk (at most one intent was stored but not yet printed
            // when the kill landed).
            check(server.effects.keys.containsAll(created)) { "intents without an effect: ${created - server.effects.keys}" }
            check(server.effects.size - created.size in 0..1) { "${server.effects.size} effects for ${created.size} printed intents" }
            for ((key, count) in server.effects) eq(count.get(), 1, "effects of $key")
            val store = IdemStore.open(path)
            eq(store.pendingIntents().size, 0, "nothing pending after resume")
            for (key in server.effects.keys) {
                val intent = store.intent(SCOPE, key)!!
                eq(intent.state, "completed", "state of $key")
                eq(String(intent.response!!.body), """{"key":"$key","effect":1}""", "response of $key")
            }
            store.closeStore()
            println("  kill -9: ${created.size} intents, ${server.total.get()} requests, ${server.effects.size} effects (${out.trim()})")
        }
    }

    test("a store of another runtime opens here: the Rust golden file") {
        val golden = System.getenv("IDEMDB_GOLDEN") ?: throw Failed("IDEMDB_GOLDEN is not set")
        val copy = File(file("golden.idemdb"))
        File(golden).copyTo(copy, overwrite = true)
        crossRead("rust-golden", copy.path)
    }

    defineCancellationTests()
    defineRefusalTests()
    defineRecoveryTests()
}

fun worker(vararg args: String): ProcessBuilder {
    val java = File(System.getProperty("java.home"), "bin/java").path
    return ProcessBuilder(
        listOf(java, "-cp", System.getProperty("java.class.path"), "-Djna.library.path=" + System.getProperty("jna.library.path"), "idemdb.test.WorkerKt") + args,
    )
}

fun main(args: Array<String>) {
    defineTests()
    var passed = 0
    var failed = 0
    for ((name, body) in tests) {
        if (args.isNotEmpty() && args.none { name.contains(it) }) continue
        val started = System.nanoTime()
        try {
            body()
            passed++
            println("ok   $name (${(System.nanoTime() - started) / 1_000_000} ms)")
        } catch (e: Throwable) {
            failed++
            println("FAIL $name: $e")
            e.printStackTrace(System.out)
        }
    }
    scratch.deleteRecursively()
    println("kotlin: $passed passed, $failed failed")
    System.exit(if (failed == 0) 0 else 1)
}
