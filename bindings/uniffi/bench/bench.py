"""The Python side of the bindings benchmark (bindings/uniffi/scripts/bench.sh): reserve +
complete pairs of new keys on the store file through the generated module. Prints "python ops/s".
"""

import sys
import time

from idemdb_uniffi import IdemStore, Scope, fingerprint_of_canonical

path, n, prefix = sys.argv[1], int(sys.argv[2]), sys.argv[3]
store = IdemStore.open(path)
scope = Scope(tenant="bench", operation="pay")
fp = fingerprint_of_canonical(b'{"amount":"1.00"}')
for i in range(20):
    store.complete(store.reserve(scope, f"{prefix}-warm-{i}", fp).lease, b'{"ok":true}')
started = time.perf_counter()
for i in range(n):
    store.complete(store.reserve(scope, f"{prefix}-{i}", fp).lease, b'{"ok":true}')
print(f"python {n / (time.perf_counter() - started):.1f}")
store.close_store()
