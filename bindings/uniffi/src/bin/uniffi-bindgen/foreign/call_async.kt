/**
 * Runs a call of the library to its end once it has started, and delivers its result. (The
 * idemdb bindings put this in front of UniFFI's helper, renamed uniffiRustCallAsyncStarted,
 * which stops waiting when the coroutine is cancelled while the call goes on in Rust and may
 * commit: a reservation whose lease nobody got, a completion its caller was told was
 * cancelled.)
 *
 * A coroutine cancelled before the call starts does not start it. One cancelled while it runs
 * gets its result or error all the same, and the cancellation takes effect at its next
 * suspension point: a store call is not cancellable once started.
 */
internal suspend fun<T, F, E: kotlin.Exception> uniffiRustCallAsync(
    rustFuture: Long,
    pollFunc: (Long, UniffiRustFutureContinuationCallback, Long) -> Unit,
    completeFunc: (Long, UniffiRustCallStatus) -> F,
    freeFunc: (Long) -> Unit,
    liftFunc: (F) -> T,
    errorHandler: UniffiRustCallStatusErrorHandler<E>
): T {
    try {
        currentCoroutineContext().ensureActive()
    } catch (cancelled: kotlin.coroutines.cancellation.CancellationException) {
        freeFunc(rustFuture) // never polled: nothing ran
        throw cancelled
    }
    // NonCancellable without a change of dispatcher: the result is returned even when the
    // caller was cancelled meanwhile (withContext checks cancellation only when it dispatches).
    return withContext(NonCancellable) {
        uniffiRustCallAsyncStarted(rustFuture, pollFunc, completeFunc, freeFunc, liftFunc, errorHandler)
    }
}

