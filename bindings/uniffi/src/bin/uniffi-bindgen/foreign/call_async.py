async def _uniffi_rust_call_async(rust_future, ffi_poll, ffi_complete, ffi_free, lift_func, error_ffi_converter):
    """Runs a call of the library to its end once it has started, and delivers its result.

    The idemdb bindings put this in front of UniFFI's helper (renamed
    `_uniffi_rust_call_async_started`), which stops waiting when the task is cancelled while the
    call goes on in Rust and may commit: a reservation whose lease nobody got, a completion its
    caller was told was cancelled.

    A task cancelled before the call starts does not start it. One cancelled while it runs gets
    its result or error all the same, and the cancellation is requested again, to land at the
    task's next `await`: a store call is not cancellable once started.
    """
    try:
        await asyncio.sleep(0)  # a cancellation already requested lands here
    except asyncio.CancelledError:
        ffi_free(rust_future)  # never polled: nothing ran
        raise
    call = asyncio.ensure_future(
        _uniffi_rust_call_async_started(rust_future, ffi_poll, ffi_complete, ffi_free, lift_func, error_ffi_converter)
    )
    cancelled = None
    while not call.done():
        try:
            await asyncio.wait((call,))  # unlike awaiting `call`, never cancels it
        except asyncio.CancelledError as error:
            cancelled = error
    if cancelled is not None:
        _uniffi_cancel_again(cancelled)
    return call.result()


def _uniffi_cancel_again(cancelled):
    """Requests the cancellation that arrived during a call again, once: the request count that
    `asyncio.timeout` and task groups read stays what it was."""
    task = asyncio.current_task()
    if task is None:
        return
    if hasattr(task, "uncancel"):
        task.uncancel()
    task.cancel(*cancelled.args[:1])


