//! Waking dispatchers without polling: every enqueue of a due effect sends `NOTIFY` on the
//! store's outbox channel in its own transaction (delivered when it commits), and an
//! [`OutboxListener`] holds one connection of its own that `LISTEN`s on it.
//!
//! The listener needs a session of its own: behind PgBouncer in transaction mode `LISTEN`
//! does not work, so point [`PgStore::outbox_listener_at`] at the server itself (or use a
//! session-mode pool). A dispatcher keeps a slow safety poll beside it: items that become due
//! later (a retry after a back-off, an expired claim) send no notification.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use deadpool_postgres::tokio_postgres::{AsyncMessage, Client, Config, NoTls};
use futures_util::StreamExt;
use tokio::sync::Notify;

use crate::error::Error;
use crate::store::PgStore;

/// The `NOTIFY` channel of a schema's outbox (at most 63 bytes: a longer schema name shares
/// its channel with names of the same first 53 bytes, which only costs a spurious wake-up).
pub(crate) fn channel(schema: &str) -> String {
    format!("idemdb_ob_{}", &schema[..schema.len().min(53)])
}

/// A connection listening for enqueued effects (see [`PgStore::outbox_listener`]).
#[derive(Debug)]
pub struct OutboxListener {
    _client: Client,
    woken: Arc<Notify>,
    closed: Arc<AtomicBool>,
}

impl OutboxListener {
    /// Waits until an effect was enqueued (by any instance) since the last wait, or `max`
    /// passed; returns whether a notification came. Returns at once when the connection
    /// was lost ([`OutboxListener::is_closed`]): make a new listener then.
    pub async fn wait(&self, max: Duration) -> bool {
        if self.is_closed() {
            return false;
        }
        tokio::time::timeout(max, self.woken.notified()).await.is_ok() && !self.is_closed()
    }

    /// Whether the listening connection was lost.
    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::SeqCst)
    }
}

impl PgStore {
    /// A listener on this store's outbox channel, on a connection of its own to the store's
    /// database (without TLS; see [`PgStore::outbox_listener_at`]).
    ///
    /// # Errors
    /// [`Error::Unavailable`] when the connection or `LISTEN` fails.
    pub async fn outbox_listener(&self) -> Result<OutboxListener, Error> {
        let config = self.inner_config().clone();
        self.outbox_listener_at(config).await
    }

    /// A listener on this store's outbox channel through `config` (the server itself when the
    /// store goes through a transaction-mode pooler, where `LISTEN` cannot work).
    ///
    /// # Errors
    /// [`Error::Unavailable`] when the connection or `LISTEN` fails.
    pub async fn outbox_listener_at(&self, config: Config) -> Result<OutboxListener, Error> {
        let (client, mut connection) = config.connect(NoTls).await.map_err(Error::from_driver)?;
        let woken = Arc::new(Notify::new());
        let closed = Arc::new(AtomicBool::new(false));
        let (task_woken, task_closed) = (Arc::clone(&woken), Arc::clone(&closed));
        tokio::spawn(async move {
            let mut messages = futures_util::stream::poll_fn(move |cx| connection.poll_message(cx));
            while let Some(message) = messages.next().await {
                match message {
                    Ok(AsyncMessage::Notification(_)) => task_woken.notify_one(),
                    Ok(_) => {}
                    Err(_) => break,
                }
            }
            task_closed.store(true, Ordering::SeqCst);
            task_woken.notify_one();
        });
        let listen = format!("LISTEN \"{}\"", channel(self.schema()));
        client.batch_execute(&listen).await.map_err(Error::from_driver)?;
        Ok(OutboxListener { _client: client, woken, closed })
    }
}
