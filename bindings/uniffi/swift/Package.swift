// swift-tools-version:5.9
// The idemdb store for iOS and macOS apps. `IdemDBFFI.xcframework` (the static libraries and the
// C header) is built on macOS by `bindings/uniffi/scripts/build-xcframework.sh`; the Swift
// sources in Sources/IdemDB are generated from the same library (checked by the test command).
import PackageDescription

let package = Package(
    name: "IdemDB",
    platforms: [.iOS(.v15), .macOS(.v12)],
    products: [
        .library(name: "IdemDB", targets: ["IdemDB"]),
    ],
    targets: [
        .binaryTarget(name: "IdemDBFFI", path: "IdemDBFFI.xcframework"),
        .target(name: "IdemDB", dependencies: ["IdemDBFFI"], path: "Sources/IdemDB"),
        .testTarget(name: "IdemDBTests", dependencies: ["IdemDB"], path: "Tests/IdemDBTests"),
    ]
)
