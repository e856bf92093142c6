//! [`Cq`], [`Wc`] and [`Srq`]: completion queues, work completions and shared receive
//! queues as applications see them, whatever backend runs the engine.

use std::task::{Context, Poll};

use futures::Stream;
use rdmap::{PostError, RecvWr};

pub use cq::{CqError, Wc};

/// A completion queue ([`Device::create_cq`](crate::Device::create_cq)). Cheap to clone;
/// clones share the queue. One CQ may serve many queue pairs.
#[derive(Clone, Debug)]
pub struct Cq {
    pub(crate) inner: cq::Cq,
}

impl Cq {
    pub(crate) fn new(depth: usize) -> Self {
        Self {
            inner: cq::Cq::new(depth),
        }
    }

    /// The depth it was created with.
    pub fn depth(&self) -> usize {
        self.inner.depth()
    }

    /// Moves up to `max` completions into `out` without waiting; returns how many.
    pub fn poll(&self, out: &mut Vec<Wc>, max: usize) -> Result<usize, CqError> {
        self.inner.poll_with(max, |w| out.push(w))
    }

    /// Hands up to `max` completions to `f`, in order, without waiting; returns how many
    /// (for a caller that writes them elsewhere, as rdma-core's `ibv_poll_cq` into the
    /// program's array).
    pub fn poll_with(&self, max: usize, f: impl FnMut(Wc)) -> Result<usize, CqError> {
        self.inner.poll_with(max, f)
    }

    /// The next completion, waiting for one.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a completion is removed only when this future returns it.
    pub async fn next(&self) -> Result<Wc, CqError> {
        std::future::poll_fn(|cx| self.poll_next(cx)).await
    }

    /// Polls for the next completion (the `poll_*` twin of [`next`](Self::next)).
    pub fn poll_next(&self, cx: &mut Context<'_>) -> Poll<Result<Wc, CqError>> {
        self.inner.poll_next(cx)
    }

    /// Ready once a completion waits (or the queue overran), without taking it: for a
    /// caller that then takes as many as it has room for ([`poll_with`](Self::poll_with)).
    pub fn poll_ready(&self, cx: &mut Context<'_>) -> Poll<()> {
        self.inner.poll_ready(cx)
    }

    /// The completions as a [`Stream`].
    pub fn stream(&self) -> impl Stream<Item = Result<Wc, CqError>> + '_ {
        futures::stream::unfold(self, |cq| async move { Some((cq.next().await, cq)) })
    }

    /// Arms a one-shot notification (verbs `req_notify_cq`): the next completion, or with
    /// `solicited_only` the next solicited receive completion or error, fires it.
    pub fn req_notify(&self, solicited_only: bool) {
        self.inner.req_notify(solicited_only);
    }

    /// Waits for an armed notification to fire.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe; a notification that fires while nobody waits is kept for the next call.
    pub async fn notified(&self) {
        self.inner.notified().await;
    }

    /// Completions waiting.
    pub fn len(&self) -> usize {
        self.inner.len()
    }

    /// True when no completion is waiting.
    pub fn is_empty(&self) -> bool {
        self.inner.is_empty()
    }
}

/// A shared receive queue ([`Device::create_srq`](crate::Device::create_srq)): receive
/// buffers that any queue pair created with it draws on when its own receive queue is
/// empty. Cheap to clone; clones share the queue.
///
/// Through iwarpd the queue is a ring in shared memory that the daemon reads only when a
/// queue pair needs a buffer, so a buffer posted before the Send that answers the peer is
/// there for the peer's next message, as with an embedded engine.
#[derive(Clone, Debug)]
pub struct Srq {
    pub(crate) inner: SrqImpl,
}

/// The queue behind an [`Srq`].
#[derive(Clone, Debug)]
pub(crate) enum SrqImpl {
    #[cfg(feature = "embedded")]
    Embedded {
        queue: offload_engine::Srq,
        depth: usize,
    },
    Daemon(std::sync::Arc<crate::daemon::srq::DaemonSrq>),
}

impl Srq {
    #[cfg(feature = "embedded")]
    pub(crate) fn embedded(depth: usize) -> Self {
        Self {
            inner: SrqImpl::Embedded {
                queue: offload_engine::Srq::new(),
                depth,
            },
        }
    }

    /// Adds a receive buffer. Fails when the queue holds its depth of buffers, or for a
    /// work request id with the top bit set (reserved, as on queue pairs).
    pub fn post_recv(&self, wr: RecvWr) -> Result<(), PostError> {
        match &self.inner {
            #[cfg(feature = "embedded")]
            SrqImpl::Embedded { queue, depth } => {
                cq::check_wr_id(wr.wr_id)?;
                if queue.len() >= *depth {
                    return Err(PostError::QueueFull);
                }
                queue.post_recv(wr);
                Ok(())
            }
            SrqImpl::Daemon(q) => q.post_recv(&wr),
        }
    }

    /// Receive buffers not yet taken.
    pub fn len(&self) -> usize {
        match &self.inner {
            #[cfg(feature = "embedded")]
            SrqImpl::Embedded { queue, .. } => queue.len(),
            SrqImpl::Daemon(q) => q.len(),
        }
    }

    /// True when no receive buffer is waiting.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
