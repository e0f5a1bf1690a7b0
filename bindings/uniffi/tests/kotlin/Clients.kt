// The Kotlin client of the cross-runtime client test (bindings/uniffi/tests/clients/run.mjs):
// the README's pattern — the intent on disk before the send, then java.net.http.HttpClient, each
// outcome recorded — with the retry contract of the Rust client and the npm package
// (idemdb_core::classify_answer), which the bindings do not export.
//
//   java ... idemdb.test.ClientsKt STORE BASE_URL N RUN
//
// Resumes what the store holds pending (a previous run killed with SIGKILL), then sends
// payments RUN-00 .. RUN-<N-1>, each until it has a final answer or needs attention, and
// prints one line "report <json>".
package idemdb.test

import idemdb.*
import java.io.IOException
import java.net.URI
import java.net.http.HttpClient
import java.net.http.HttpRequest
import java.net.http.HttpResponse
import java.net.http.HttpTimeoutException
import java.time.Duration
import kotlin.random.Random

/** The client's retry schedule: the npm package's defaults but for shorter delays and timeout. */
private const val ATTEMPTS_PER_INTENT = 20u
private const val BASE_DELAY_MS = 20L
private const val MAX_DELAY_MS = 1000L
private val TIMEOUT = Duration.ofMillis(800)

/** The response headers kept with a recorded answer (`STORED_RESPONSE_HEADERS`). */
private val KEPT = listOf("content-type", "content-language", "etag", "last-modified", "location", "retry-after", "idempotent-replayed")

/** idemdb's answers that need a person: problem slug and status -> cause (`ATTENTION_PROBLEMS`). */
private val ATTENTION = mapOf(
    "needs-reconciliation" to 409 to "needs_reconciliation",
    "provider-key-expired" to 409 to "provider_key_expired",
    "expired" to 410 to "expired",
    "corrupt" to 500 to "unreadable",
    "newer-format" to 500 to "unreadable",
)

private sealed interface Verdict {
    data object Final : Verdict
    data object Retry : Verdict
    data class Attention(val cause: String) : Verdict
}

/** `classify_answer`: replayed is final; an idemdb problem that needs a person; 422 final; 408, 409, 429, 5xx retried. */
private fun classify(status: Int, headers: List<Header>, body: ByteArray): Verdict {
    if (headers.any { it.name == "idempotent-replayed" && it.value == "true" }) return Verdict.Final
    if (headers.any { it.name == "content-type" && it.value.startsWith("application/problem+json") }) {
        val text = String(body, Charsets.UTF_8)
        val slug = Regex("\"type\"\\s*:\\s*\"urn:idemdb:problem:([a-z-]+)\"").find(text)?.groupValues?.get(1)
            ?: Regex("\"code\"\\s*:\\s*\"IDEMDB_([A-Z_]+)\"").find(text)?.groupValues?.get(1)?.lowercase()?.replace('_', '-')
        slug?.let { ATTENTION[it to status] }?.let { return Verdict.Attention(it) }
    }
    if (status == 422) return Verdict.Final
    if (status >= 500 || status == 408 || status == 409 || status == 429) return Verdict.Retry
    return Verdict.Final
}

/** Sends [start] until it is no longer pending, recording every outcome; the intent as finally stored. */
private fun deliver(store: IdemStore, http: HttpClient, base: String, start: Intent): Intent {
    var intent = start
    var lastAnswer: IntentResponse? = null
    while (intent.state == "pending") {
        val used = intent.attempts - intent.budgetStart
        if (used >= ATTEMPTS_PER_INTENT) {
            intent = store.markNeedsAttention(intent.scope, intent.key, "retries_exhausted", lastAnswer)
            break
        }
        val backoff = Random.nextLong(0, minOf(MAX_DELAY_MS, BASE_DELAY_MS shl minOf(used.toInt(), 20)) + 1)
        // Durable before the request leaves: a crash mid-send is seen as an attempt at start-up.
        intent = store.recordAttempt(intent.scope, intent.key, AttemptOutcome.Sent)
        val request = HttpRequest.newBuilder(URI("$base/payments"))
            .timeout(TIMEOUT)
            .header("content-type", "application/json")
            .header("idempotency-key", "\"${intent.key}\"")
            .POST(HttpRequest.BodyPublishers.ofByteArray(intent.request))
            .build()
        val response = try {
            http.send(request, HttpResponse.BodyHandlers.ofByteArray())
        } catch (e: HttpTimeoutException) {
            intent = store.recordAttempt(intent.scope, intent.key, AttemptOutcome.Timeout)
            Thread.sleep(backoff)
            continue
        } catch (e: IOException) {
            intent = store.recordAttempt(intent.scope, intent.key, AttemptOutcome.NetworkError)
            Thread.sleep(backoff)
            continue
        }
        val status = response.statusCode()
        val headers = KEPT.flatMap { name -> response.headers().allValues(name).map { Header(name, it) } }
        val answer = IntentResponse(status.toUShort(), headers, response.body())
        when (val verdict = classify(status, headers, response.body())) {
            Verdict.Final -> intent = store.recordResponse(intent.scope, intent.key, answer)
            is Verdict.Attention -> intent = store.markNeedsAttention(intent.scope, intent.key, verdict.cause, answer)
            Verdict.Retry -> {
                lastAnswer = answer
                intent = store.recordAttempt(intent.scope, intent.key, AttemptOutcome.Status(status.toUShort()))
                val retryAfter = response.headers().firstValue("retry-after").orElse(null)?.trim()?.toLongOrNull()
                Thread.sleep(retryAfter?.let { minOf(it * 1000, MAX_DELAY_MS) } ?: backoff)
            }
        }
    }
    return intent
}

private fun jsonString(text: String?) = if (text == null) "null" else "\"" + text.replace("\\", "\\\\").replace("\"", "\\\"") + "\""

fun main(args: Array<String>) {
    val (path, base, count, run) = args
    val store = IdemStore.open(path)
    val http = HttpClient.newBuilder().version(HttpClient.Version.HTTP_1_1).connectTimeout(TIMEOUT).build()
    val scope = Scope("acme", "create_payment")
    val canon = Canonicalizer()
    val keyOf = { i: Int -> "$run-${i.toString().padStart(2, '0')}" }
    val pending = store.pendingIntents()
    for (intent in pending) deliver(store, http, base, intent)
    println("resumed ${pending.size}")
    for (i in 0 until count.toInt()) {
        val body = """{"amount":"${i + 1}.00","currency":"EUR","ref":"${keyOf(i)}"}"""
        // The same key and request again gives the intent already stored (a restart's).
        val intent = store.createIntent(scope, keyOf(i), body.toByteArray(), canon)
        deliver(store, http, base, intent)
    }
    val report = (0 until count.toInt()).joinToString(",", "[", "]") { i ->
        val intent = store.intent(scope, keyOf(i))
        """{"key":"${keyOf(i)}","state":${jsonString(intent?.state ?: "missing")},"status":${intent?.response?.status ?: "null"},""" +
            """"cause":${jsonString(intent?.attentionCause)},"attempts":${intent?.attempts ?: 0u},""" +
            """"body":${jsonString(intent?.response?.body?.let { String(it, Charsets.UTF_8) })}}"""
    }
    store.closeStore()
    println("report {\"intents\":$report}")
}
