// Shared by the Kotlin tests, the worker processes and the benchmark: a tiny test runner, the
// local HTTP server that counts effects per key, and the client loop of an app.
package idemdb.test

import com.sun.net.httpserver.HttpServer
import idemdb.*
import java.net.HttpURLConnection
import java.net.InetSocketAddress
import java.net.URI
import java.util.concurrent.ConcurrentHashMap
import java.util.concurrent.Executors
import java.util.concurrent.atomic.AtomicInteger

class Failed(message: String) : Exception(message)

fun check(condition: Boolean, message: () -> String) {
    if (!condition) throw Failed(message())
}

fun <T> eq(actual: T, expected: T, what: String) = check(actual == expected) { "$what: expected <$expected>, got <$actual>" }

/** Runs [body] and returns the IdemdbException it throws; fails if it returns. */
inline fun <reified E : IdemdbException> throws(body: () -> Unit): E {
    try {
        body()
    } catch (e: IdemdbException) {
        check(e is E) { "expected ${E::class.simpleName}, got ${e::class.simpleName}: ${e.message}" }
        return e as E
    }
    throw Failed("expected ${E::class.simpleName}, nothing was thrown")
}

/** The stable code every variant carries. */
val IdemdbException.codeString: String
    get() = this::class.java.getMethod("getCode").invoke(this) as String

/** Whether repeating the call may succeed, as every variant carries it. */
val IdemdbException.isTransient: Boolean
    get() = this::class.java.getMethod("getTransient").invoke(this) as Boolean

val SCOPE = Scope("me", "create_payment")

fun json(text: String) = text.toByteArray(Charsets.UTF_8)

/**
 * The server the intents are sent to: itself an app on idemdb (reserve / complete, in memory),
 * counting the effects it performs per key, and the requests per key.
 */
class EffectServer : AutoCloseable {
    private val store = IdemStore.inMemory()
    private val canon = Canonicalizer()
    val effects = ConcurrentHashMap<String, AtomicInteger>()
    val requests = ConcurrentHashMap<String, AtomicInteger>()
    val total = AtomicInteger()
    private val server = HttpServer.create(InetSocketAddress("127.0.0.1", 0), 64)

    init {
        server.executor = Executors.newFixedThreadPool(8)
        server.createContext("/pay") { exchange ->
            val key = exchange.requestHeaders.getFirst("Idempotency-Key") ?: ""
            val body = exchange.requestBody.readBytes()
            requests.computeIfAbsent(key) { AtomicInteger() }.incrementAndGet()
            total.incrementAndGet()
            var status = 201
            val answer: ByteArray = when (val r = store.reserve(Scope("server", "pay"), key, canon.fingerprint(body))) {
                is Reservation.Acquired -> {
                    val n = effects.computeIfAbsent(key) { AtomicInteger() }.incrementAndGet()
                    val result = json("""{"key":"$key","effect":$n}""")
                    store.complete(r.lease, result)
                    result
                }
                is Reservation.Replay -> r.body
                else -> { status = 409; json("""{"answer":"$r"}""") }
            }
            exchange.sendResponseHeaders(status, answer.size.toLong())
            exchange.responseBody.use { it.write(answer) }
        }
        server.start()
    }

    val url: String get() = "http://127.0.0.1:${server.address.port}/pay"

    override fun close() {
        server.stop(0)
        (server.executor as java.util.concurrent.ExecutorService).shutdownNow()
        store.closeStore()
    }
}

/** One attempt of an intent: the attempt recorded before the send, the response after. */
fun send(store: IdemStore, intent: Intent, url: String): Intent {
    store.recordAttempt(intent.scope, intent.key, AttemptOutcome.Sent)
    val connection = URI(url).toURL().openConnection() as HttpURLConnection
    connection.requestMethod = "POST"
    connection.doOutput = true
    connection.setRequestProperty("Idempotency-Key", intent.key)
    connection.setRequestProperty("Content-Type", "application/json")
    connection.outputStream.use { it.write(intent.request) }
    val status = connection.responseCode
    val body = (if (status < 400) connection.inputStream else connection.errorStream).use { it.readBytes() }
    if (status != 201) return store.recordAttempt(intent.scope, intent.key, AttemptOutcome.Status(status.toUShort()))
    return store.recordResponse(intent.scope, intent.key, IntentResponse(status.toUShort(), listOf(), body))
}
