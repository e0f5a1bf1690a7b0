"""Python tests of the idemdb bindings (the generated ctypes module, no extra package).

Run by bindings/uniffi/scripts/test.sh with the generated `idemdb_uniffi.py` and the library on
PYTHONPATH; it ends with "python: N passed, M failed". The same list as the Kotlin tests.
"""

import asyncio
import http.server
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import unittest
import urllib.request
from collections import Counter

from idemdb_uniffi import (
    AttemptOutcome,
    Canonicalizer,
    Failure,
    FieldNormaliser,
    Header,
    IdemdbError,
    IdemStore,
    IntentResponse,
    Normaliser,
    PolicySettings,
    Reservation,
    Resolution,
    Scope,
    StoreOptions,
    error_codes,
    fingerprint_of_canonical,
    new_key,
    open_store_async,
    open_store_with_async,
)

SCOPE = Scope(tenant="me", operation="create_payment")


class Scratch(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="idemdb-python")

    def tearDown(self):
        shutil.rmtree(self.dir, ignore_errors=True)

    def file(self, name):
        return os.path.join(self.dir, name)


class Canonical(unittest.TestCase):
    def test_keys_are_uuid_v4_and_unique(self):
        keys = {new_key() for _ in range(1000)}
        self.assertEqual(len(keys), 1000)
        uuid = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$")
        self.assertTrue(all(uuid.match(k) for k in keys))

    def test_fingerprint_with_exclusions_and_normalisers(self):
        canon = Canonicalizer(
            exclusions=["/trace_id"],
            normalisers=[
                FieldNormaliser(pointer="/currency", normaliser=Normaliser.UPPERCASE),
                FieldNormaliser(pointer="/amount", normaliser=Normaliser.DECIMAL_AMOUNT),
            ],
        )
        a = canon.fingerprint(b'{"amount":"10.50","currency":"brl","trace_id":"a1"}')
        b = canon.fingerprint(b'{ "currency":"BRL", "amount":"10.5", "trace_id":"b2" }')
        self.assertEqual(a, b)
        self.assertEqual(len(a), 64)
        self.assertNotEqual(a, canon.fingerprint(b'{"amount":"99.00","currency":"BRL"}'))
        self.assertEqual(canon.canonicalize(b'{"trace_id":"x","currency":"brl","amount":"010.50"}'), b'{"amount":"10.5","currency":"BRL"}')
        self.assertEqual(fingerprint_of_canonical(b'{"amount":"10.5","currency":"BRL"}'), a)
        with self.assertRaises(IdemdbError.InvalidRequest) as caught:
            canon.fingerprint(b"{not json")
        self.assertEqual(caught.exception.code, "IDEMDB_INVALID_REQUEST")
        with self.assertRaises(IdemdbError.InvalidArgument):
            Canonicalizer(exclusions=["no-slash"])
        with self.assertRaises(IdemdbError.InvalidRequest):
            Canonicalizer(max_body_bytes=4).fingerprint(b"[1,2,3,4,5]")


class Intents(unittest.TestCase):
    def test_lifecycle(self):
        store = IdemStore.in_memory()
        canon = Canonicalizer(exclusions=["/trace_id"])
        key = new_key()
        created = store.create_intent(SCOPE, key, b'{"b":1,"a":"x","trace_id":"t1"}', canon)
        self.assertEqual(created.request, b'{"a":"x","b":1}')
        self.assertEqual(created.state, "pending")
        self.assertEqual(created.fingerprint, fingerprint_of_canonical(created.request))
        again = store.create_intent(SCOPE, key, b'{"a":"x","b":1,"trace_id":"t2"}', canon)
        self.assertEqual(again, created)
        with self.assertRaises(IdemdbError.KeyMismatch) as caught:
            store.create_intent(SCOPE, key, b'{"a":"y"}', canon)
        self.assertEqual(caught.exception.code, "IDEMDB_KEY_MISMATCH")
        self.assertEqual([i.key for i in store.pending_intents()], [key])
        store.record_attempt(SCOPE, key, AttemptOutcome.SENT())
        attempted = store.record_attempt(SCOPE, key, AttemptOutcome.STATUS(code=503))
        self.assertEqual((attempted.attempts, attempted.last_attempt, attempted.last_attempt_status), (1, "status", 503))
        store.record_attempt(SCOPE, key, AttemptOutcome.TIMEOUT())
        self.assertEqual(store.record_attempt(SCOPE, key, AttemptOutcome.NETWORK_ERROR()).attempts, 3)
        response = IntentResponse(status=201, headers=[Header(name="content-type", value="application/json")], body=b'{"id":1}')
        done = store.record_response(SCOPE, key, response)
        self.assertEqual((done.state, done.response), ("completed", response))
        self.assertEqual(store.pending_intents(), [])
        self.assertEqual(store.record_response(SCOPE, key, response), done)
        with self.assertRaises(IdemdbError.IntentFinished):
            store.record_response(SCOPE, key, IntentResponse(status=500, headers=[], body=b""))
        with self.assertRaises(IdemdbError.IntentFinished):
            store.abandon_intent(SCOPE, key, "late")
        with self.assertRaises(IdemdbError.NotFound):
            store.record_attempt(SCOPE, "nope", AttemptOutcome.SENT())
        self.assertIsNone(store.intent(SCOPE, "nope"))
        other = new_key()
        store.create_intent(SCOPE, other, b"{}", canon)
        with self.assertRaises(IdemdbError.InvalidArgument):
            store.abandon_intent(SCOPE, other, "")
        abandoned = store.abandon_intent(SCOPE, other, "user cancelled")
        self.assertEqual((abandoned.state, abandoned.abandon_reason), ("abandoned", "user cancelled"))
        self.assertEqual(store.pending_intents(), [])
        big = new_key()
        store.create_intent(SCOPE, big, b"{}", canon)
        with self.assertRaises(IdemdbError.TooLarge):
            store.record_response(SCOPE, big, IntentResponse(status=200, headers=[], body=bytes(2 * 1024 * 1024)))

    def test_needs_attention_keeps_its_cause_and_last_answer_until_reopened_or_abandoned(self):
        store = IdemStore.in_memory()
        canon = Canonicalizer(exclusions=[])
        key = new_key()
        store.create_intent(SCOPE, key, b'{"amount":"10.50"}', canon)
        store.record_attempt(SCOPE, key, AttemptOutcome.STATUS(code=409))
        answer = IntentResponse(status=409, headers=[Header(name="content-type", value="application/problem+json")], body=b'{"type":"urn:idemdb:problem:needs-reconciliation"}')
        parked = store.mark_needs_attention(SCOPE, key, "needs_reconciliation", answer)
        self.assertEqual((parked.state, parked.attention_cause, parked.response), ("needs_attention", "needs_reconciliation", answer))
        self.assertEqual(store.pending_intents(), [], "not resumed")
        self.assertEqual([i.key for i in store.intents_needing_attention()], [key])
        self.assertEqual(store.intent(SCOPE, key), parked, "read back with its cause and answer")
        with self.assertRaises(IdemdbError.UnknownName):
            store.mark_needs_attention(SCOPE, key, "bored", None)
        with self.assertRaises(IdemdbError.IntentFinished):
            store.record_attempt(SCOPE, key, AttemptOutcome.SENT())
        reopened = store.reopen_intent(SCOPE, key)
        self.assertEqual((reopened.state, reopened.attention_cause, reopened.budget_start), ("pending", None, 1))
        self.assertEqual([i.key for i in store.pending_intents()], [key])
        self.assertEqual(store.intents_needing_attention(), [])
        other = new_key()
        store.create_intent(SCOPE, other, b"{}", canon)
        no_answer = store.mark_needs_attention(SCOPE, other, "retries_exhausted", None)
        self.assertEqual((no_answer.attention_cause, no_answer.response), ("retries_exhausted", None))
        done = store.abandon_intent(SCOPE, other, "refunded by hand")
        self.assertEqual((done.state, done.attention_cause), ("abandoned", None))


class OwnServer(unittest.TestCase):
    def test_reserve_complete_fail_replay(self):
        store = IdemStore.in_memory()
        canon = Canonicalizer()
        fp = canon.fingerprint(b'{"cmd":"add","n":1}')
        acquired = store.reserve(SCOPE, "cmd-1", fp)
        self.assertTrue(acquired.is_acquired())
        lease = acquired.lease
        self.assertEqual(lease.attempt, 1)
        busy = store.reserve(SCOPE, "cmd-1", fp)
        self.assertTrue(busy.is_in_progress() and busy.retry_after_ms > 0)
        self.assertEqual(store.get(SCOPE, "cmd-1").state, "in_progress")
        stale = type(lease)(scope=lease.scope, key=lease.key, fence=lease.fence - 1, expires_at_ms=lease.expires_at_ms, attempt=lease.attempt)
        with self.assertRaises(IdemdbError.StaleLease):
            store.complete(stale, b"x")
        store.complete(lease, b'{"total":1}')
        self.assertEqual(store.reserve(SCOPE, "cmd-1", fp), Reservation.REPLAY(outcome="completed", body=b'{"total":1}'))
        self.assertEqual(store.reserve(SCOPE, "cmd-1", canon.fingerprint(b'{"n":2}')), Reservation.MISMATCH(stored_state="completed"))
        with self.assertRaises(IdemdbError.WrongState):
            store.complete(lease, b"again")
        declined = store.reserve(SCOPE, "cmd-2", fp).lease
        store.fail(declined, Failure.DEFINITIVE(body=b"declined"))
        self.assertEqual(store.reserve(SCOPE, "cmd-2", fp), Reservation.REPLAY(outcome="failed", body=b"declined"))
        retry = store.reserve(SCOPE, "cmd-3", fp).lease
        store.fail(retry, Failure.RETRYABLE())
        second = store.reserve(SCOPE, "cmd-3", fp).lease
        self.assertGreater(second.fence, retry.fence)
        store.fail(second, Failure.UNCERTAIN())
        self.assertEqual(store.reserve(SCOPE, "cmd-3", fp), Reservation.NEEDS_RECONCILIATION(cause="reported"))
        self.assertIsNone(store.get(SCOPE, "none"))
        with self.assertRaises(IdemdbError.InvalidKey):
            store.reserve(SCOPE, "", fp)
        with self.assertRaises(IdemdbError.InvalidKey):
            store.reserve(Scope(tenant="", operation="op"), "k", fp)
        with self.assertRaises(IdemdbError.InvalidArgument):
            store.reserve(SCOPE, "k", "abc")


class Errors(Scratch):
    def test_one_exception_class_per_core_code(self):
        names = {n for n, v in vars(IdemdbError).items() if isinstance(v, type) and issubclass(v, Exception)}
        as_codes = {"IDEMDB_" + re.sub(r"(?<=.)(?=[A-Z])", "_", n).upper() for n in names}
        self.assertEqual(as_codes, set(error_codes()))
        self.assertGreaterEqual(len(as_codes), 40)

    def test_codes_of_real_failures(self):
        path = self.file("busy.idemdb")
        store = IdemStore.open(path)
        with self.assertRaises(IdemdbError.StoreBusy) as caught:
            IdemStore.open(path)
        self.assertEqual((caught.exception.code, caught.exception.transient), ("IDEMDB_STORE_BUSY", True))
        self.assertEqual(store.path(), path)
        store.close_store()
        store.close_store()
        self.assertTrue(store.is_closed())
        with self.assertRaises(IdemdbError.Closed):
            store.pending_intents()
        with self.assertRaises(IdemdbError.Closed):
            asyncio.run(store.reserve_async(SCOPE, "k", "00" * 32))
        IdemStore.open(path).close_store()
        junk = self.file("junk.idemdb")
        with open(junk, "wb") as f:
            f.write(b"\x5a" * 8192)
        with self.assertRaises((IdemdbError.NotAStore, IdemdbError.Corrupt)) as caught:
            IdemStore.open(junk)
        self.assertIn("IDEMDB_", str(caught.exception))


class Refusals(Scratch):
    """Bad input and late calls get typed errors, and change nothing."""

    def test_after_close_is_closed_answers_and_every_other_call_is_closed(self):
        path = self.file("closed.idemdb")
        store = IdemStore.open(path)
        store.close_store()
        self.assertTrue(store.is_closed())
        with self.assertRaises(IdemdbError.Closed):
            store.reserve(SCOPE, "k", "00" * 32)
        with self.assertRaises(IdemdbError.Closed):
            store.path()
        IdemStore.open(path).close_store()

    def test_a_lone_surrogate_is_invalid_argument_and_nothing_is_stored(self):
        store = IdemStore.in_memory()
        fp = fingerprint_of_canonical(b"{}")
        with self.assertRaises(IdemdbError.InvalidArgument) as caught:
            store.reserve(SCOPE, "k-\ud800", fp)
        self.assertFalse(caught.exception.transient)
        self.assertIn("surrogate", caught.exception.detail)
        with self.assertRaises(IdemdbError.InvalidArgument):
            store.reserve(Scope(tenant="me\udc00", operation="pay"), "k", fp)
        with self.assertRaises(IdemdbError.InvalidArgument):
            store.create_intent(SCOPE, "\udbff", b"{}", Canonicalizer())
        with self.assertRaises(IdemdbError.InvalidArgument):
            asyncio.run(store.reserve_async(SCOPE, "x\udfffy", fp))
        self.assertEqual(store.pending_intents(), [])
        key = new_key()
        store.create_intent(SCOPE, key, b"{}", Canonicalizer())
        with self.assertRaises(IdemdbError.InvalidArgument):
            store.abandon_intent(SCOPE, key, "left \ud83d")
        self.assertEqual(store.intent(SCOPE, key).state, "pending")
        self.assertEqual(store.abandon_intent(SCOPE, key, "left \U0001F600").abandon_reason, "left \U0001F600", "a character outside the BMP is text")

    def test_an_empty_path_is_refused_typed_not_transient_leaving_nothing(self):
        cwd, here = self.file("cwd"), os.getcwd()
        os.mkdir(cwd)
        os.chdir(cwd)
        try:
            for _ in range(3):
                with self.assertRaises(IdemdbError.InvalidArgument) as caught:
                    IdemStore.open("")
                self.assertFalse(caught.exception.transient)
            with self.assertRaises(IdemdbError.InvalidArgument):
                asyncio.run(open_store_async(""))
        finally:
            os.chdir(here)
        self.assertEqual(os.listdir(cwd), [], "files left in the working directory")

    def test_statuses_outside_100_599_and_headers_with_cr_lf_nul_are_refused(self):
        store = IdemStore.in_memory()
        key = new_key()
        store.create_intent(SCOPE, key, b"{}", Canonicalizer())
        for status in (0, 99, 600, 999, 65535):
            with self.assertRaises(IdemdbError.InvalidArgument):
                store.record_attempt(SCOPE, key, AttemptOutcome.STATUS(code=status))
            with self.assertRaises(IdemdbError.InvalidArgument):
                store.record_response(SCOPE, key, IntentResponse(status=status, headers=[], body=b"{}"))
            with self.assertRaises(IdemdbError.InvalidArgument):
                store.mark_needs_attention(SCOPE, key, "retries_exhausted", IntentResponse(status=status, headers=[], body=b"{}"))
        for name, value in [("location", "/a\r\nset-cookie: s=1"), ("x-note", "line\nbreak"), ("x-nul", "a\x00b"), ("bad name", "v"), ("x-split\r\n", "v"), ("", "v")]:
            with self.assertRaises(IdemdbError.InvalidArgument) as caught:
                store.record_response(SCOPE, key, IntentResponse(status=201, headers=[Header(name=name, value=value)], body=b"{}"))
            self.assertFalse(caught.exception.transient)
        intent = store.intent(SCOPE, key)
        self.assertEqual((intent.state, intent.attempts), ("pending", 0), "nothing recorded")
        ok = IntentResponse(status=201, headers=[Header(name="content-type", value="application/json"), Header(name="x-tab", value="a\tb")], body=b"{}")
        self.assertEqual(store.record_response(SCOPE, key, ok).state, "completed")


class Async(Scratch):
    def test_async_forms_answer_as_the_blocking_ones(self):
        async def run():
            store = await open_store_async(self.file("async.idemdb"))
            canon = Canonicalizer(exclusions=["/trace_id"])
            fp = canon.fingerprint(b'{"n":1}')
            lease = (await store.reserve_async(SCOPE, "a-1", fp)).lease
            await store.complete_async(lease, b"r")
            self.assertEqual(await store.reserve_async(SCOPE, "a-1", fp), Reservation.REPLAY(outcome="completed", body=b"r"))
            lease2 = (await store.reserve_async(SCOPE, "a-2", fp)).lease
            await store.fail_async(lease2, Failure.UNCERTAIN())
            self.assertEqual((await store.get_async(SCOPE, "a-2")).state, "uncertain")
            key = new_key()
            await store.create_intent_async(SCOPE, key, b'{"x":1,"trace_id":"q"}', canon)
            await store.record_attempt_async(SCOPE, key, AttemptOutcome.SENT())
            self.assertEqual([i.key for i in await store.pending_intents_async()], [key])
            self.assertEqual((await store.intent_async(SCOPE, key)).attempts, 1)
            await store.record_response_async(SCOPE, key, IntentResponse(status=200, headers=[], body=b"ok"))
            other = new_key()
            await store.create_intent_async(SCOPE, other, b"{}", canon)
            await store.abandon_intent_async(SCOPE, other, "no")
            self.assertEqual(await store.pending_intents_async(), [])
            with self.assertRaises(IdemdbError.KeyMismatch):
                await store.create_intent_async(SCOPE, key, b'{"x":2}', canon)
            store.close_store()

        asyncio.run(run())

    def test_async_calls_never_block_the_event_loop(self):
        store = IdemStore.open(self.file("one-loop.idemdb"))
        fp = fingerprint_of_canonical(b"{}")
        state = {"in_flight": 0, "most": 0}

        async def one(i):
            state["in_flight"] += 1
            state["most"] = max(state["most"], state["in_flight"])
            lease = (await store.reserve_async(SCOPE, f"one-{i}", fp)).lease
            await store.complete_async(lease, str(i).encode())
            state["in_flight"] -= 1

        async def run():
            await asyncio.gather(*(one(i) for i in range(16)))

        asyncio.run(run())
        # A call that blocked the loop would finish before the next task starts.
        self.assertGreater(state["most"], 1)
        self.assertEqual(sum(store.get(SCOPE, f"one-{i}").state == "completed" for i in range(16)), 16)
        store.close_store()


def race(store, keys, seed, effects, lock):
    import random

    order = list(keys)
    random.Random(seed).shuffle(order)
    for key in order:
        fp = fingerprint_of_canonical(json.dumps({"k": key}).encode())
        while True:
            r = store.reserve(SCOPE, key, fp)
            if r.is_acquired():
                with lock:
                    effects[key] += 1
                    n = effects[key]
                store.complete(r.lease, str(n).encode())
                break
            if r.is_replay():
                assert r.body == b"1", r.body
                break
            assert r.is_in_progress(), r
            time.sleep(0.001)


async def race_async(store, keys, seed, effects):
    import random

    order = list(keys)
    random.Random(seed).shuffle(order)
    for key in order:
        fp = fingerprint_of_canonical(json.dumps({"k": key}).encode())
        while True:
            r = await store.reserve_async(SCOPE, key, fp)
            if r.is_acquired():
                effects[key] += 1
                await store.complete_async(r.lease, str(effects[key]).encode())
                break
            if r.is_replay():
                assert r.body == b"1", r.body
                break
            assert r.is_in_progress(), r
            await asyncio.sleep(0.001)


class Concurrency(Scratch):
    def test_16_threads_one_effect_per_key(self):
        store = IdemStore.open(self.file("threads.idemdb"))
        keys = [f"t-{i}" for i in range(40)]
        effects, lock, errors = Counter(), threading.Lock(), []

        def run(seed):
            try:
                race(store, keys, seed, effects, lock)
            except BaseException as e:  # noqa: BLE001 - reported below
                errors.append(e)

        threads = [threading.Thread(target=run, args=(t,)) for t in range(16)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.assertEqual(errors, [])
        self.assertEqual([effects[k] for k in keys], [1] * len(keys))
        store.close_store()

    def test_16_tasks_one_effect_per_key(self):
        store = IdemStore.open(self.file("tasks.idemdb"))
        keys = [f"c-{i}" for i in range(40)]
        effects = Counter()

        async def run():
            await asyncio.gather(*(race_async(store, keys, seed, effects) for seed in range(16)))

        asyncio.run(run())
        self.assertEqual([effects[k] for k in keys], [1] * len(keys))
        store.close_store()


class CancelLedger:
    """What the callers saw, per key: the leases and the completions delivered to them."""

    def __init__(self):
        self.held, self.completed = set(), set()

    async def pair(self, store, key, fp, i):
        lease = (await store.reserve_async(SCOPE, key, fp)).lease
        self.held.add(key)
        await store.complete_async(lease, str(i).encode())
        self.completed.add(key)

    def orphaned(self, store, keys):
        """Keys the store holds reserved although their caller never got the lease."""
        return [k for k in keys if (r := store.get(SCOPE, k)) is not None and r.state == "in_progress" and k not in self.held]

    def hidden(self, store, keys):
        """Keys the store holds completed although their caller was told the call was cancelled."""
        return [k for k in keys if (r := store.get(SCOPE, k)) is not None and r.state == "completed" and k not in self.completed]


class Cancellation(Scratch):
    """A store call that has started runs to completion and its result is delivered; one
    cancelled before it starts does nothing. Counted in the store against what callers saw."""

    def test_cancelled_calls_leave_no_orphaned_lease_and_no_hidden_commit(self):
        import random

        store = IdemStore.open(self.file("cancel.idemdb"))
        fp = fingerprint_of_canonical(b"{}")
        ledger, keys, rng = CancelLedger(), [f"cancel-{i}" for i in range(240)], random.Random(14)
        counts = Counter()

        async def run():
            started = time.perf_counter()
            for i in range(15):
                await CancelLedger().pair(store, f"warm-{i}", fp, i)
            pair = (time.perf_counter() - started) / 15
            for i, key in enumerate(keys):
                task = asyncio.ensure_future(ledger.pair(store, key, fp, i))
                await asyncio.sleep(0)  # the task runs up to the first call
                wait = rng.random() * pair * 1.3
                if i % 3 == 1:
                    await asyncio.sleep(wait)
                elif i % 3 == 2:
                    await asyncio.sleep(0)  # the call starts
                    time.sleep(wait)  # holds the loop: the answer may be ready but not delivered
                task.cancel()
                try:
                    await task
                    counts["finished"] += 1
                except asyncio.CancelledError:
                    counts["cancelled"] += 1
            return pair

        pair = asyncio.run(run())
        orphaned, hidden = ledger.orphaned(store, keys), ledger.hidden(store, keys)
        reserved = sum(store.get(SCOPE, k) is not None for k in keys)
        print(f"\n  cancel: {len(keys)} pairs, {counts['cancelled']} cancelled (pair {pair * 1e6:.0f} µs); {reserved} reserved, "
              f"{len(ledger.held)} leases delivered, {len(ledger.completed)} completions delivered; "
              f"{len(orphaned)} orphaned reservations, {len(hidden)} completions reported as cancelled", file=sys.stderr)
        self.assertGreater(counts["cancelled"], len(keys) // 4)
        self.assertEqual(orphaned, [], "reserved keys whose caller never got the lease")
        self.assertEqual(hidden, [], "completed keys whose caller saw CancelledError")
        store.close_store()

    def test_a_call_in_a_cancelled_task_does_not_start_and_timeouts_deliver_or_do_nothing(self):
        store = IdemStore.open(self.file("cancel-before.idemdb"))
        fp = fingerprint_of_canonical(b"{}")

        async def cancelled_first():
            asyncio.current_task().cancel()
            await store.reserve_async(SCOPE, "never", fp)

        with self.assertRaises(asyncio.CancelledError):
            asyncio.run(cancelled_first())
        self.assertIsNone(store.get(SCOPE, "never"), "a call made after the cancellation never ran")
        ledger, keys = CancelLedger(), [f"timeout-{i}" for i in range(60)]

        async def run():
            for i, key in enumerate(keys):
                try:
                    await asyncio.wait_for(ledger.pair(store, key, fp, i), timeout=0.001 * (1 + i % 4))
                except asyncio.TimeoutError:
                    pass

        asyncio.run(run())
        self.assertEqual(ledger.orphaned(store, keys), [], "reserved keys whose caller never got the lease")
        self.assertEqual(ledger.hidden(store, keys), [], "completed keys whose caller saw a timeout")
        store.close_store()


class EffectServer:
    """The server the intents are sent to: itself an app on idemdb, counting effects per key."""

    def __init__(self):
        self.store = IdemStore.in_memory()
        self.canon = Canonicalizer()
        self.effects, self.requests, self.lock = Counter(), Counter(), threading.Lock()
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                key = self.headers.get("Idempotency-Key", "")
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                with outer.lock:
                    outer.requests[key] += 1
                r = outer.store.reserve(Scope(tenant="server", operation="pay"), key, outer.canon.fingerprint(body))
                status = 201
                if r.is_acquired():
                    with outer.lock:
                        outer.effects[key] += 1
                        n = outer.effects[key]
                    answer = json.dumps({"key": key, "effect": n}, separators=(",", ":")).encode()
                    outer.store.complete(r.lease, answer)
                elif r.is_replay():
                    answer = r.body
                else:
                    status, answer = 409, repr(r).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Length", str(len(answer)))
                    self.end_headers()
                    self.wfile.write(answer)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client was killed mid-request (the test's point)

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/pay"

    def total(self):
        with self.lock:
            return sum(self.requests.values())

    def close(self):
        self.server.shutdown()
        self.store.close_store()


def send(store, intent, url):
    """One attempt: recorded before the send, the response after."""
    store.record_attempt(intent.scope, intent.key, AttemptOutcome.SENT())
    request = urllib.request.Request(url, data=intent.request, method="POST", headers={"Idempotency-Key": intent.key, "Content-Type": "application/json"})
    with urllib.request.urlopen(request) as answer:
        return store.record_response(intent.scope, intent.key, IntentResponse(status=answer.status, headers=[], body=answer.read()))


def client(path, url):
    """Creates and sends intents until killed; prints each key once its intent is on disk."""
    store = IdemStore.open(path)
    canon = Canonicalizer(exclusions=["/trace_id"])
    n = 0
    while True:
        key = new_key()
        intent = store.create_intent(SCOPE, key, json.dumps({"n": n, "trace_id": f"t{n}"}).encode(), canon)
        print("created", key, flush=True)
        send(store, intent, url)
        n += 1


def resume(path, url):
    store = IdemStore.open(path)
    pending = store.pending_intents()
    for intent in pending:
        send(store, intent, url)
    assert store.pending_intents() == []
    print("resumed", len(pending), flush=True)


class KillAndResume(Scratch):
    def test_kill_9_mid_write_then_a_fresh_process_resumes(self):
        server = EffectServer()
        try:
            path = self.file("killed.idemdb")
            child = subprocess.Popen([sys.executable, __file__, "client", path, server.url], stdout=subprocess.PIPE, text=True)
            created = []
            reader = threading.Thread(target=lambda: created.extend(line.split()[1] for line in child.stdout if line.startswith("created ")))
            reader.start()
            deadline = time.monotonic() + 60
            while server.total() < 40 and time.monotonic() < deadline and child.poll() is None:
                time.sleep(0.005)
            self.assertIsNone(child.poll(), "the client exited by itself")
            os.kill(child.pid, signal.SIGKILL)
            child.wait()
            reader.join()
            child.stdout.close()
            self.assertEqual(child.returncode, -signal.SIGKILL)
            self.assertGreaterEqual(len(created), 40)
            out = subprocess.run([sys.executable, __file__, "resume", path, server.url], capture_output=True, text=True, check=True).stdout
            # One effect per intent on disk; at most one intent was stored but not yet printed.
            self.assertTrue(set(created) <= set(server.effects), set(created) - set(server.effects))
            self.assertIn(len(server.effects) - len(created), (0, 1))
            self.assertEqual(set(server.effects.values()), {1})
            store = IdemStore.open(path)
            self.assertEqual(store.pending_intents(), [])
            for key in server.effects:
                intent = store.intent(SCOPE, key)
                self.assertEqual(intent.state, "completed")
                self.assertEqual(intent.response.body, json.dumps({"key": key, "effect": 1}, separators=(",", ":")).encode())
            store.close_store()
            print(f"  kill -9: {len(created)} intents, {server.total()} requests, {len(server.effects)} effects ({out.strip()})", file=sys.stderr)
        finally:
            server.close()


DIED = ["died-1", "died-2"]


def reserve_and_die(path):
    """Reserves two keys under a 200 ms lease, says so and waits to be killed."""
    store = IdemStore.open_with(path, StoreOptions(policies={SCOPE.operation: PolicySettings(lease_ttl_ms=200)}))
    for key in DIED:
        store.reserve(SCOPE, key, fingerprint_of_canonical(b"{}"))
    print("reserved", flush=True)
    time.sleep(3600)


def commit_and_die(path):
    """Commits five completed keys (to the journal, not yet the store file) and waits to be killed."""
    store = IdemStore.open(path)
    for i in range(5):
        store.complete(store.reserve(SCOPE, f"c-{i}", fingerprint_of_canonical(b"{}")).lease, str(i).encode())
    print("committed", flush=True)
    time.sleep(3600)


def kill_after(mode, path, ready):
    child = subprocess.Popen([sys.executable, __file__, mode, path], stdout=subprocess.PIPE, text=True)
    line = child.stdout.readline().strip()
    os.kill(child.pid, signal.SIGKILL)
    child.wait()
    child.stdout.close()
    assert line == ready, line
    assert child.returncode == -signal.SIGKILL, child.returncode


def await_value(read, done):
    """Polls `read` until `done` holds of it (the store's time passing a lease), at most a minute."""
    deadline = time.monotonic() + 60
    value = read()
    while not done(value) and time.monotonic() < deadline:
        time.sleep(0.02)
        value = read()
    return value


class Recovery(Scratch):
    """The way out for keys nobody will finish, from the binding."""

    def test_a_holder_killed_with_its_leases_is_listed_resolved_and_replayed(self):
        path = self.file("died.idemdb")
        fp = fingerprint_of_canonical(b"{}")
        kill_after("reserve-and-die", path, "reserved")
        store = IdemStore.open(path)
        stuck = await_value(store.records_needing_reconciliation, lambda records: len(records) == len(DIED))
        self.assertEqual(sorted(r.key for r in stuck), DIED)
        self.assertEqual([(r.scope, r.record.state) for r in stuck], [(SCOPE, "in_progress")] * len(DIED))
        self.assertEqual(store.reserve(SCOPE, "died-1", fp), Reservation.NEEDS_RECONCILIATION(cause="lease_expired"))
        store.reconcile(SCOPE, "died-1", Resolution.COMPLETED(body=b'{"charge":"ch_1"}'), "provider_confirmed")
        asyncio.run(store.reconcile_async(SCOPE, "died-2", Resolution.RELEASED()))
        self.assertEqual(store.reserve(SCOPE, "died-1", fp), Reservation.REPLAY(outcome="completed", body=b'{"charge":"ch_1"}'))
        self.assertTrue(store.reserve(SCOPE, "died-2", fp).is_acquired(), "released: the same request runs again")
        self.assertEqual(store.records_needing_reconciliation(), [])
        with self.assertRaises(IdemdbError.WrongState):
            store.reconcile(SCOPE, "died-1", Resolution.RELEASED())
        with self.assertRaises(IdemdbError.LeaseLive):
            store.reconcile(SCOPE, "died-2", Resolution.RELEASED())
        with self.assertRaises(IdemdbError.UnknownName):
            store.reconcile(SCOPE, "died-2", Resolution.RELEASED(), "because")
        store.close_store()

    def test_renew_and_an_uncertain_attempt_resolved_as_failed(self):
        store = IdemStore.in_memory()
        fp = fingerprint_of_canonical(b"{}")
        store.fail(store.reserve(SCOPE, "timed-out", fp).lease, Failure.UNCERTAIN())
        [listed] = asyncio.run(store.records_needing_reconciliation_async())
        self.assertEqual((listed.key, listed.record.uncertain_cause), ("timed-out", "reported"))
        store.reconcile(SCOPE, "timed-out", Resolution.FAILED(body=b"declined"), "provider_failed")
        self.assertEqual(store.reserve(SCOPE, "timed-out", fp), Reservation.REPLAY(outcome="failed", body=b"declined"))
        held = store.reserve(SCOPE, "long", fp).lease
        renewed = asyncio.run(store.renew_async(held))
        self.assertEqual((renewed.fence, renewed.key), (held.fence, held.key))
        self.assertGreaterEqual(renewed.expires_at_ms, held.expires_at_ms)
        store.complete(renewed, b"done")
        with self.assertRaises(IdemdbError.WrongState):
            store.renew(renewed)

    def test_policies_and_bad_policies(self):
        options = StoreOptions(
            default_policy=PolicySettings(response_ttl_ms=3_600_000),
            policies={"sync": PolicySettings(lease_ttl_ms=5_000, max_result_bytes=16, expired_lease="takeover")},
        )
        store = IdemStore.open_with(self.file("policies.idemdb"), options)
        sync = store.policy("sync")
        self.assertEqual((sync.lease_ttl_ms, sync.max_result_bytes, sync.expired_lease), (5_000, 16, "takeover"))
        self.assertEqual(store.policy("pay").response_ttl_ms, 3_600_000)
        with self.assertRaises(IdemdbError.TooLarge):
            store.complete(store.reserve(Scope(tenant="me", operation="sync"), "big", fingerprint_of_canonical(b"{}")).lease, bytes(17))
        store.close_store()
        with self.assertRaises(IdemdbError.InvalidPolicy):
            IdemStore.open_with(self.file("p0.idemdb"), StoreOptions(default_policy=PolicySettings(lease_ttl_ms=0)))
        with self.assertRaises(IdemdbError.UnknownName):
            IdemStore.open_with(self.file("p1.idemdb"), StoreOptions(policies={"x": PolicySettings(expired_lease="sometimes")}))
        with self.assertRaises(IdemdbError.InvalidPolicy):
            asyncio.run(open_store_with_async(self.file("p2.idemdb"), StoreOptions(default_policy=PolicySettings(max_result_bytes=0))))

    def test_a_lost_journal_is_refused_then_given_up_by_choice(self):
        path = self.file("lost.idemdb")
        kill_after("commit-and-die", path, "committed")
        os.remove(path + "-journal")
        with open(path, "rb") as f:
            before = f.read()
        with self.assertRaises(IdemdbError.Corrupt) as caught:
            IdemStore.open(path)
        self.assertIn("discard_lost_journal", caught.exception.detail)
        with open(path, "rb") as f:
            self.assertEqual(f.read(), before, "the refused open changed the store file")
        store = IdemStore.open_with(path, StoreOptions(discard_lost_journal=True))
        self.assertTrue(store.journal_recovery().discarded)
        self.assertIsNone(IdemStore.in_memory().journal_recovery())
        store.close_store()

    def test_async_forms_of_the_attention_calls(self):
        async def run():
            store = IdemStore.in_memory()
            key = new_key()
            await store.create_intent_async(SCOPE, key, b"{}", Canonicalizer())
            parked = await store.mark_needs_attention_async(SCOPE, key, "retries_exhausted", IntentResponse(status=503, headers=[], body=b"busy"))
            self.assertEqual((parked.state, parked.attention_cause), ("needs_attention", "retries_exhausted"))
            self.assertEqual([i.key for i in await store.intents_needing_attention_async()], [key])
            self.assertEqual((await store.reopen_intent_async(SCOPE, key)).state, "pending")
            self.assertEqual(await store.intents_needing_attention_async(), [])
            with self.assertRaises(IdemdbError.UnknownName):
                await store.mark_needs_attention_async(SCOPE, key, "bored", None)

        asyncio.run(run())


class CrossRuntime(Scratch):
    def test_the_rust_golden_store_opens(self):
        golden = os.environ.get("IDEMDB_GOLDEN")
        self.assertIsNotNone(golden, "IDEMDB_GOLDEN is not set")
        copy = self.file("golden.idemdb")
        shutil.copy(golden, copy)
        store = IdemStore.open(copy)
        scope = Scope(tenant="acme", operation="create_payment")
        self.assertEqual(store.get(scope, "completed").state, "completed")
        self.assertEqual(store.get(scope, "uncertain").state, "uncertain")
        self.assertEqual(store.reserve(scope, "completed", "02" * 32), Reservation.REPLAY(outcome="completed", body=b'{"charge":"ch_1"}'))
        self.assertTrue(store.reserve(scope, "completed", "09" * 32).is_mismatch())
        store.close_store()

    def test_a_store_written_by_kotlin_opens(self):
        path = os.environ.get("IDEMDB_KOTLIN_STORE")
        if not path:
            self.skipTest("IDEMDB_KOTLIN_STORE is not set (the cross part of scripts/test.sh sets it)")
        copy = self.file("kotlin.idemdb")
        shutil.copy(path, copy)
        store = IdemStore.open(copy)
        scope = Scope(tenant="acme", operation="create_payment")
        canon = Canonicalizer(exclusions=["/trace_id"], normalisers=[FieldNormaliser(pointer="/currency", normaliser=Normaliser.UPPERCASE)])
        fp = canon.fingerprint(b'{"amount":"10.50","currency":"BRL"}')
        self.assertEqual(store.reserve(scope, "from-kotlin", fp), Reservation.REPLAY(outcome="completed", body=b'{"charge":"ch_kotlin"}'))
        self.assertEqual([i.key for i in store.pending_intents()], ["intent-from-kotlin"])
        store.close_store()


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] in ("client", "resume"):
        {"client": client, "resume": resume}[sys.argv[1]](sys.argv[2], sys.argv[3])
        sys.exit(0)
    if len(sys.argv) > 1 and sys.argv[1] in ("reserve-and-die", "commit-and-die"):
        {"reserve-and-die": reserve_and_die, "commit-and-die": commit_and_die}[sys.argv[1]](sys.argv[2])
        sys.exit(0)
    result = unittest.main(exit=False, verbosity=2).result
    failed = len(result.failures) + len(result.errors) + len(result.unexpectedSuccesses)
    passed = result.testsRun - failed - len(result.skipped)
    print(f"python: {passed} passed, {failed} failed" + (f", {len(result.skipped)} skipped" if result.skipped else ""))
    sys.exit(0 if failed == 0 and result.testsRun > 0 else 1)
