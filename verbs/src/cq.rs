//! [`Cq`], [`Wc`] and [`Srq`]: completion queues, work completions and shared receive
//! queues as applications see them, whatever backend runs the engine.

use std::fmt;
use std::task::{Context, Poll};

use futures::Stream;
use rdmap::{Completion, PostError, RecvWr};

use rdmap::QpNum;

/// A work completion: what finished and how, and the queue pair it belongs to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Wc {
    /// The queue pair that produced it.
    pub qp: QpNum,
    /// What finished, and how.
    pub wc: Completion,
}

impl From<offload_engine::Wc> for Wc {
    fn from(w: offload_engine::Wc) -> Self {
        Self { qp: w.qp, wc: w.wc }
    }
}

/// Why a completion queue cannot deliver.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum CqError {
    /// More completions arrived than the queue holds; completions were lost, so the queue
    /// (like a hardware CQ) is in error. Create it deeper, or poll it more often.
    Overrun {
        /// The queue's depth.
        depth: usize,
    },
}

impl From<offload_engine::CqError> for CqError {
    fn from(e: offload_engine::CqError) -> Self {
        match e {
            offload_engine::CqError::Overrun { depth } => Self::Overrun { depth },
            _ => Self::Overrun { depth: 0 },
        }
    }
}

impl fmt::Display for CqError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Overrun { depth } => write!(
                f,
                "completion queue overrun: more than {depth} completions were pending; \
                 create the CQ with a larger depth or poll it more often"
            ),
        }
    }
}

impl std::error::Error for CqError {}

/// A completion queue ([`Device::create_cq`](crate::Device::create_cq)). Cheap to clone;
/// clones share the queue. One CQ may serve many queue pairs.
#[derive(Clone, Debug)]
pub struct Cq {
    pub(crate) inner: offload_engine::Cq,
}

impl Cq {
    pub(crate) fn new(depth: usize) -> Self {
        Self {
            inner: offload_engine::Cq::new(depth),
        }
    }

    /// The depth it was created with.
    pub fn depth(&self) -> usize {
        self.inner.depth()
    }

    /// Moves up to `max` completions into `out` without waiting; returns how many.
    pub fn poll(&self, out: &mut Vec<Wc>, max: usize) -> Result<usize, CqError> {
        Ok(self.inner.poll_with(max, |w| out.push(w.into()))?)
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
        self.inner
            .poll_next(cx)
            .map(|r| r.map(Wc::from).map_err(CqError::from))
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
    Embedded {
        queue: offload_engine::Srq,
        depth: usize,
    },
    Daemon(std::sync::Arc<crate::daemon::srq::DaemonSrq>),
}

impl Srq {
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
            SrqImpl::Embedded { queue, depth } => {
                if wr.wr_id & offload_engine::NOTIFY_BIT != 0 {
                    return Err(PostError::ReservedWrId);
                }
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
            SrqImpl::Embedded { queue, .. } => queue.len(),
            SrqImpl::Daemon(q) => q.len(),
        }
    }

    /// True when no receive buffer is waiting.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
