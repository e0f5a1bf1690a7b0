"""The Python client of the cross-runtime client test (run.mjs): the README's pattern — the
intent on disk before the send, then http.client, each outcome recorded — with the retry
contract of the Rust client and the npm package (idemdb_core::classify_answer), which the
bindings do not export.

    PYTHONPATH=<generated module and library> python3 client.py STORE BASE_URL N RUN

Resumes what the store holds pending (a previous run killed with SIGKILL), then sends payments
RUN-00 .. RUN-<N-1>, each until it has a final answer or needs attention, and prints one line
"report <json>".
"""

import http.client
import json
import random
import re
import socket
import sys
import time
from urllib.parse import urlsplit

from idemdb_uniffi import AttemptOutcome, Canonicalizer, Header, IdemStore, IntentResponse, Scope

ATTEMPTS_PER_INTENT = 20
BASE_DELAY = 0.02
MAX_DELAY = 1.0
TIMEOUT = 0.8
# The response headers kept with a recorded answer (STORED_RESPONSE_HEADERS).
KEPT = ("content-type", "content-language", "etag", "last-modified", "location", "retry-after", "idempotent-replayed")
# idemdb's answers that need a person: (problem slug, status) -> cause (ATTENTION_PROBLEMS).
ATTENTION = {
    ("needs-reconciliation", 409): "needs_reconciliation",
    ("provider-key-expired", 409): "provider_key_expired",
    ("expired", 410): "expired",
    ("corrupt", 500): "unreadable",
    ("newer-format", 500): "unreadable",
}


def classify(status, headers, body):
    """classify_answer: ("final",), ("retry",) or ("attention", cause)."""
    kept = dict((h.name, h.value) for h in headers)
    if kept.get("idempotent-replayed") == "true":
        return ("final",)
    if kept.get("content-type", "").startswith("application/problem+json"):
        try:
            problem = json.loads(body)
        except ValueError:
            problem = {}
        slug = None
        if isinstance(problem, dict):
            kind, code = problem.get("type"), problem.get("code")
            if isinstance(code, str) and code.startswith("IDEMDB_"):
                slug = code[len("IDEMDB_"):].lower().replace("_", "-")
            elif isinstance(kind, str) and kind.startswith("urn:idemdb:problem:"):
                slug = kind[len("urn:idemdb:problem:"):]
        cause = ATTENTION.get((slug, status))
        if cause:
            return ("attention", cause)
    if status == 422:
        return ("final",)
    if status >= 500 or status in (408, 409, 429):
        return ("retry",)
    return ("final",)


def deliver(store, base, intent):
    """Sends `intent` until it is no longer pending, recording every outcome."""
    target = urlsplit(base)
    last_answer = None
    while intent.state == "pending":
        used = intent.attempts - intent.budget_start
        if used >= ATTEMPTS_PER_INTENT:
            return store.mark_needs_attention(intent.scope, intent.key, "retries_exhausted", last_answer)
        backoff = random.random() * min(MAX_DELAY, BASE_DELAY * 2 ** min(used, 20))
        # Durable before the request leaves: a crash mid-send is seen as an attempt at start-up.
        intent = store.record_attempt(intent.scope, intent.key, AttemptOutcome.SENT())
        connection = http.client.HTTPConnection(target.hostname, target.port, timeout=TIMEOUT)
        try:
            connection.request(
                "POST",
                "/payments",
                body=intent.request,
                headers={"content-type": "application/json", "idempotency-key": '"%s"' % intent.key},
            )
            response = connection.getresponse()
            body = response.read()
        except socket.timeout:
            intent = store.record_attempt(intent.scope, intent.key, AttemptOutcome.TIMEOUT())
            time.sleep(backoff)
            continue
        except (OSError, http.client.HTTPException):
            intent = store.record_attempt(intent.scope, intent.key, AttemptOutcome.NETWORK_ERROR())
            time.sleep(backoff)
            continue
        finally:
            connection.close()
        status = response.status
        headers = [Header(name=name, value=value) for name, value in ((n.lower(), v) for n, v in response.getheaders()) if name in KEPT]
        answer = IntentResponse(status=status, headers=headers, body=body)
        verdict = classify(status, headers, body)
        if verdict[0] == "final":
            intent = store.record_response(intent.scope, intent.key, answer)
        elif verdict[0] == "attention":
            intent = store.mark_needs_attention(intent.scope, intent.key, verdict[1], answer)
        else:
            last_answer = answer
            intent = store.record_attempt(intent.scope, intent.key, AttemptOutcome.STATUS(code=status))
            retry_after = response.getheader("retry-after", "").strip()
            time.sleep(min(int(retry_after), MAX_DELAY) if re.fullmatch(r"\d+", retry_after) else backoff)
    return intent


def main():
    path, base, count, run = sys.argv[1:5]
    count = int(count)
    store = IdemStore.open(path)
    scope = Scope(tenant="acme", operation="create_payment")
    canon = Canonicalizer()

    def key_of(i):
        return "%s-%02d" % (run, i)

    pending = store.pending_intents()
    for intent in pending:
        deliver(store, base, intent)
    print("resumed %d" % len(pending), flush=True)
    for i in range(count):
        body = json.dumps({"amount": "%d.00" % (i + 1), "currency": "EUR", "ref": key_of(i)}).encode()
        # The same key and request again gives the intent already stored (a restart's).
        deliver(store, base, store.create_intent(scope, key_of(i), body, canon))
    report = []
    for i in range(count):
        intent = store.intent(scope, key_of(i))
        report.append({
            "key": key_of(i),
            "state": intent.state if intent else "missing",
            "status": intent.response.status if intent and intent.response else None,
            "cause": intent.attention_cause if intent else None,
            "attempts": intent.attempts if intent else 0,
            "body": intent.response.body.decode("utf-8", "replace") if intent and intent.response else None,
        })
    store.close_store()
    print("report " + json.dumps({"intents": report}), flush=True)


if __name__ == "__main__":
    main()
