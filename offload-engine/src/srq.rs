//! Shared receive queues: receive buffers that the queue pairs created with one draw on,
//! posted to it or read from its feed.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use rdmap::RecvWr;

/// A shared receive queue: receive buffers that any queue pair created with it draws on.
/// Buffers come from [`post_recv`](Self::post_recv), and for a queue built with
/// [`fed`](Self::fed) from its feed once those run out.
#[derive(Clone, Debug, Default)]
pub struct Srq {
    queue: Arc<Mutex<VecDeque<RecvWr>>>,
    feed: Option<Arc<dyn SrqFeed>>,
}

/// Where a shared receive queue's buffers come from besides
/// [`Srq::post_recv`]: read one at a time, only when a queue pair needs one (iwarpd reads
/// its clients' shared-memory rings this way).
pub trait SrqFeed: Send + Sync + std::fmt::Debug {
    /// The next receive buffer, if there is one.
    fn take(&self) -> Option<RecvWr>;
}

impl Srq {
    /// An empty shared receive queue.
    pub fn new() -> Self {
        Self::default()
    }

    /// A shared receive queue drawing on `feed`.
    pub fn fed(feed: Arc<dyn SrqFeed>) -> Self {
        Self {
            queue: Arc::default(),
            feed: Some(feed),
        }
    }

    fn queue(&self) -> std::sync::MutexGuard<'_, VecDeque<RecvWr>> {
        self.queue.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Adds a receive buffer. Its work request id must be below
    /// [`NOTIFY_BIT`](crate::NOTIFY_BIT): a completion with that bit goes to a request's
    /// future, never to a completion queue (verbs' `Srq::post_recv` refuses such ids).
    pub fn post_recv(&self, wr: RecvWr) {
        debug_assert!(
            cq::check_wr_id(wr.wr_id).is_ok(),
            "reserved id {:#x}",
            wr.wr_id
        );
        self.queue().push_back(wr);
    }

    /// Receive buffers posted with [`post_recv`](Self::post_recv) and not yet taken (a
    /// feed's are counted where they are posted).
    pub fn len(&self) -> usize {
        self.queue().len()
    }

    /// True when no receive buffer is waiting.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Removes and returns the receive buffers posted and not yet taken, oldest first
    /// (to post them again elsewhere: a queue pair moving to another process).
    pub fn take_all(&self) -> Vec<RecvWr> {
        self.queue().drain(..).collect()
    }
}

/// A queue pair's stream takes receives from its shared receive queue through this, one
/// at a time under the queue's lock (queue pairs sharing it are never serialized longer).
impl rdmap::SharedRecv for Srq {
    fn take(&mut self) -> Option<RecvWr> {
        let posted = self.queue().pop_front();
        posted.or_else(|| self.feed.as_ref()?.take())
    }
}
