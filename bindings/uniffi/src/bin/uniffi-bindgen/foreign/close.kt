    /**
     * Closes the store, as [closeStore]: `use { }` and `close()` release the file. The handle
     * stays valid, so [isClosed] answers and every other call throws
     * [IdemdbException.Closed]; [destroy] frees the handle itself (after which calls throw
     * UniFFI's IllegalStateException), and the garbage collector frees it otherwise.
     */
    @Synchronized
    override fun close() {
        this.closeStore()
    }
