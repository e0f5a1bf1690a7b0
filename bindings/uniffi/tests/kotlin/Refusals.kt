// Bad input and late calls get the bindings' typed errors, and change nothing: calls after
// close(), lone surrogates, an empty store path, statuses that are not HTTP statuses, header
// values that would split a response.
package idemdb.test

import idemdb.*
import kotlinx.coroutines.runBlocking
import java.io.File
import java.nio.file.Files

fun defineRefusalTests() {
    test("after close(): isClosed() answers, every other call throws IdemdbException.Closed, the file is released") {
        val path = file("closed.idemdb")
        val fp = fingerprintOfCanonical(json("{}"))
        val store = IdemStore.open(path)
        store.close()
        check(store.isClosed()) { "isClosed() after close()" }
        eq(throws<IdemdbException.Closed> { store.pendingIntents() }.codeString, "IDEMDB_CLOSED", "code")
        throws<IdemdbException.Closed> { store.reserve(SCOPE, "k", fp) }
        throws<IdemdbException.Closed> { store.path() }
        throws<IdemdbException.Closed> { runBlocking { store.reserveAsync(SCOPE, "k", fp) } }
        store.close()
        IdemStore.open(path).use { eq(it.pendingIntents(), listOf(), "the file was released and opens again") }
    }

    test("a lone surrogate is IdemdbException.InvalidArgument, and nothing is stored") {
        val store = IdemStore.inMemory()
        val fp = fingerprintOfCanonical(json("{}"))
        val canon = Canonicalizer()
        val e = throws<IdemdbException.InvalidArgument> { store.reserve(SCOPE, "k-\uD800", fp) }
        eq(e.transient, false, "not transient")
        check(e.message!!.contains("surrogate")) { "says why: ${e.message}" }
        throws<IdemdbException.InvalidArgument> { store.reserve(Scope("me\uDC00", "pay"), "k", fp) }
        throws<IdemdbException.InvalidArgument> { store.createIntent(SCOPE, "\uDBFF", json("{}"), canon) }
        throws<IdemdbException.InvalidArgument> { runBlocking { store.reserveAsync(SCOPE, "x\uDFFFy", fp) } }
        eq(store.pendingIntents(), listOf(), "no intent stored")
        val key = newKey()
        store.createIntent(SCOPE, key, json("{}"), canon)
        throws<IdemdbException.InvalidArgument> { store.abandonIntent(SCOPE, key, "left \uD83D") }
        eq(store.intent(SCOPE, key)?.state, "pending", "still pending")
        // A pair is text.
        eq(store.abandonIntent(SCOPE, key, "left \uD83D\uDE00").abandonReason, "left \uD83D\uDE00", "a surrogate pair is text")
    }

    test("an empty store path is refused, typed and not transient, leaving no file behind") {
        val cwd = Files.createTempDirectory(scratch.toPath(), "cwd").toFile()
        repeat(3) {
            val process = worker("open-empty").directory(cwd).redirectErrorStream(true).start()
            val out = process.inputStream.bufferedReader().readText().trim()
            eq(process.waitFor(), 0, "worker exit ($out)")
            eq(out, "InvalidArgument transient=false", "open(\"\") in a worker")
        }
        eq(cwd.list()!!.toList(), listOf<String>(), "files left in the working directory")
        throws<IdemdbException.InvalidArgument> { runBlocking { openStoreAsync("") } }
    }

    test("statuses outside 100..599 and header names or values with CR, LF or NUL are refused; nothing stored") {
        val store = IdemStore.inMemory()
        val key = newKey()
        store.createIntent(SCOPE, key, json("{}"), Canonicalizer())
        for (status in listOf(0, 99, 600, 999, 65535)) {
            throws<IdemdbException.InvalidArgument> { store.recordAttempt(SCOPE, key, AttemptOutcome.Status(status.toUShort())) }
            throws<IdemdbException.InvalidArgument> { store.recordResponse(SCOPE, key, IntentResponse(status.toUShort(), listOf(), json("{}"))) }
            throws<IdemdbException.InvalidArgument> { store.markNeedsAttention(SCOPE, key, "retries_exhausted", IntentResponse(status.toUShort(), listOf(), json("{}"))) }
        }
        val bad = listOf(
            Header("location", "/a\r\nset-cookie: s=1"),
            Header("x-note", "line\nbreak"),
            Header("x-nul", "a\u0000b"),
            Header("bad name", "v"),
            Header("x-split\r\n", "v"),
            Header("", "v"),
        )
        for (header in bad) {
            val e = throws<IdemdbException.InvalidArgument> { store.recordResponse(SCOPE, key, IntentResponse(201u, listOf(header), json("{}"))) }
            eq(e.transient, false, "not transient")
        }
        val intent = store.intent(SCOPE, key)!!
        eq(intent.state to intent.attempts, "pending" to 0u, "nothing recorded")
        val ok = IntentResponse(201u, listOf(Header("content-type", "application/json; charset=utf-8"), Header("x-tab", "a\tb")), json("{}"))
        eq(store.recordResponse(SCOPE, key, ok).state, "completed", "a valid response is recorded")
    }
}
