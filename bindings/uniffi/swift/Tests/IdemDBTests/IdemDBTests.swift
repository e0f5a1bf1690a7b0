// Swift tests of the idemdb bindings: `swift test` in bindings/uniffi/swift on macOS, after
// bindings/uniffi/scripts/build-xcframework.sh.
import Foundation
import XCTest
@testable import IdemDB

final class IdemDBTests: XCTestCase {
    let scope = Scope(tenant: "me", operation: "create_payment")

    func testFingerprintWithExclusionsAndNormalisers() throws {
        let canon = try Canonicalizer(
            exclusions: ["/trace_id"],
            normalisers: [FieldNormaliser(pointer: "/currency", normaliser: .uppercase)]
        )
        let a = try canon.fingerprint(body: Data(#"{"amount":"10.50","currency":"brl","trace_id":"a1"}"#.utf8))
        let b = try canon.fingerprint(body: Data(#"{"currency":"BRL","amount":"10.50","trace_id":"b2"}"#.utf8))
        XCTAssertEqual(a, b)
        XCTAssertEqual(a.count, 64)
        XCTAssertThrowsError(try canon.fingerprint(body: Data("{oops".utf8))) { error in
            guard case IdemdbError.InvalidRequest(let code, _, _) = error else { return XCTFail("\(error)") }
            XCTAssertEqual(code, "IDEMDB_INVALID_REQUEST")
        }
    }

    func testIntentLifecycle() throws {
        let store = try IdemStore.inMemory()
        let canon = try Canonicalizer()
        let key = try newKey()
        let created = try store.createIntent(scope: scope, key: key, request: Data(#"{"b":1,"a":2}"#.utf8), canonicalizer: canon)
        XCTAssertEqual(String(decoding: created.request, as: UTF8.self), #"{"a":2,"b":1}"#)
        XCTAssertEqual(try store.pendingIntents().map(\.key), [key])
        _ = try store.recordAttempt(scope: scope, key: key, outcome: .sent)
        let done = try store.recordResponse(scope: scope, key: key, response: IntentResponse(status: 201, headers: [], body: Data("ok".utf8)))
        XCTAssertEqual(done.state, "completed")
        XCTAssertEqual(try store.pendingIntents().count, 0)
        XCTAssertThrowsError(try store.abandonIntent(scope: scope, key: key, reason: "late")) { error in
            guard case IdemdbError.IntentFinished = error else { return XCTFail("\(error)") }
        }
    }

    func testReserveCompleteReplay() throws {
        let store = try IdemStore.inMemory()
        let fp = fingerprintOfCanonical(canonical: Data("{}".utf8))
        guard case .acquired(let lease) = try store.reserve(scope: scope, key: "k-1", fingerprint: fp) else {
            return XCTFail("a new key is acquired")
        }
        try store.complete(lease: lease, result: Data("r".utf8))
        XCTAssertEqual(try store.reserve(scope: scope, key: "k-1", fingerprint: fp), .replay(outcome: "completed", body: Data("r".utf8)))
    }

    func testAsyncNeverBlocksAndAnswersAsBlocking() async throws {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("idemdb-\(UUID().uuidString).idemdb").path
        let store = try await openStoreAsync(path: path)
        let fp = fingerprintOfCanonical(canonical: Data("{}".utf8))
        try await withThrowingTaskGroup(of: Void.self) { group in
            for i in 0..<16 {
                group.addTask {
                    guard case .acquired(let lease) = try await store.reserveAsync(scope: self.scope, key: "a-\(i)", fingerprint: fp) else {
                        throw IdemdbError.Internal(code: "test", detail: "not acquired", transient: false)
                    }
                    try await store.completeAsync(lease: lease, result: Data("\(i)".utf8))
                }
            }
            try await group.waitForAll()
        }
        for i in 0..<16 {
            XCTAssertEqual(try store.get(scope: scope, key: "a-\(i)")?.state, "completed")
        }
        store.closeStore()
        XCTAssertThrowsError(try store.pendingIntents()) { error in
            guard case IdemdbError.Closed = error else { return XCTFail("\(error)") }
        }
    }
}
