//! A shared send queue (seed 003 §3.5): one queue of work requests for several connected
//! queue pairs, with completions in posting order.
//!
//! Each request names its queue pair and goes to that connection at once, so each
//! connection sends in the order the shared queue received its requests (the shared
//! queue's order filtered to that connection). Completions come out of
//! [`SharedSendQueue::next`] in posting order across all connections, like a reorder
//! buffer: a request that finished early waits for the ones posted before it. This is the
//! seed's "non-blocking" policy: a slow or back-pressured connection does not hold back
//! the others' transmission, only their completions. A connection that fails flushes its
//! own requests (their completions say so, in their place in the order); the others go
//! on. The depth bounds the requests outstanding across every connection together, which
//! is the point of the shared queue: many connections that each need only a shallow
//! queue share one depth instead of reserving N.

use std::collections::VecDeque;
use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};

use rdmap::{Completion, PostError, QpNum, SendWr};

use crate::qp::Qp;

/// A completion from a [`SharedSendQueue`]: the queue pair the request went to, and how it
/// finished (with the request's own `wr_id`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SsqCompletion {
    /// The queue pair the request named.
    pub qp: QpNum,
    /// What finished, and how.
    pub wc: Completion,
}

/// One request in flight: its own id, its queue pair, and the completion to wait for.
struct Slot {
    wr_id: u64,
    qp: QpNum,
    done: cq::CompletionFuture,
}

/// A shared send queue of a fixed depth for any number of connected queue pairs.
#[derive(Clone)]
pub struct SharedSendQueue {
    depth: usize,
    slots: Arc<Mutex<VecDeque<Slot>>>,
    /// Serializes [`next`](Self::next) callers, so completions leave in order.
    reader: Arc<tokio::sync::Mutex<()>>,
}

impl std::fmt::Debug for SharedSendQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedSendQueue")
            .field("depth", &self.depth)
            .field("outstanding", &self.len())
            .finish()
    }
}

impl SharedSendQueue {
    /// A shared send queue holding at most `depth` requests not yet taken by
    /// [`next`](Self::next) (at least 1).
    pub fn new(depth: usize) -> Self {
        Self {
            depth: depth.max(1),
            slots: Arc::new(Mutex::new(VecDeque::new())),
            reader: Arc::new(tokio::sync::Mutex::new(())),
        }
    }

    /// Requests posted and not yet taken by [`next`](Self::next).
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// True when nothing is outstanding.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The most requests outstanding at once.
    pub fn depth(&self) -> usize {
        self.depth
    }

    /// Posts `wr` to go out on `qp` after every request posted here before it for `qp`.
    /// [`PostError::QueueFull`] at the depth (take completions with
    /// [`next`](Self::next) first); the queue pair's own refusals otherwise (closing,
    /// full, reserved id). Every request is signaled here: its completion always comes
    /// out of [`next`](Self::next).
    pub fn post(&self, qp: &Qp, wr: SendWr) -> Result<(), PostError> {
        let mut slots = self.lock();
        if slots.len() >= self.depth {
            return Err(PostError::QueueFull);
        }
        let wr_id = wr.wr_id;
        let done = qp.post_notify(wr)?;
        slots.push_back(Slot {
            wr_id,
            qp: qp.num(),
            done,
        });
        Ok(())
    }

    /// The completion of the oldest request posted, once it has finished: completions
    /// come in posting order across every queue pair. `None` when nothing is
    /// outstanding.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a completion is taken from the queue only when it is returned.
    pub async fn next(&self) -> Option<SsqCompletion> {
        let _turn = self.reader.lock().await;
        // The oldest request's future stays in the queue while it is awaited, so a
        // cancelled call loses nothing; it is taken out once it is ready.
        std::future::poll_fn(|cx| {
            let mut slots = self.lock();
            let Some(head) = slots.front_mut() else {
                return std::task::Poll::Ready(None);
            };
            let std::task::Poll::Ready(mut wc) = std::pin::Pin::new(&mut head.done).poll(cx) else {
                return std::task::Poll::Pending;
            };
            let Some(slot) = slots.pop_front() else {
                return std::task::Poll::Ready(None);
            };
            wc.wr_id = slot.wr_id;
            std::task::Poll::Ready(Some(SsqCompletion { qp: slot.qp, wc }))
        })
        .await
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, VecDeque<Slot>> {
        self.slots.lock().unwrap_or_else(PoisonError::into_inner)
    }
}
