//! [`Completions`]: where a queue pair's completions go once the connection's lock is
//! released. An application's completion queues (with per-request futures routed by
//! [`cq::Waiters::route`], the one routing rule both of verbs' backends use), or a
//! [`CompletionSink`] that takes every completion as the stream made it: iwarpd's
//! servants write their clients' completion rings from one, so that nothing of the
//! engine's (no completion queue, no futures, no id of its own) stands between the
//! stream and the client.

use std::sync::Arc;

use cq::{Cq, Waiters};
use rdmap::{Completion, QpNum, Queue};

/// Takes a queue pair's completions in the order its stream made them (send-queue
/// completions in the order the requests were posted, and likewise for receives), with
/// the work request ids as posted.
pub trait CompletionSink: Send + Sync + std::fmt::Debug {
    /// Takes the completions of one step of queue pair `qp`, emptying `batch`. Called
    /// after the connection's lock is released, on the thread that ran the step (a
    /// poster's, or the connection's driver task): it must not block, and it must not
    /// post to the same queue pair.
    fn deliver(&self, qp: QpNum, batch: &mut Vec<Completion>);
}

/// Where a queue pair's completions go.
#[derive(Clone, Debug)]
pub enum Completions {
    /// To completion queues: the send queue's to `send`, the receive queue's to `recv`
    /// (they may be one queue). Requests posted with a future
    /// ([`Qp::post_send_notify`](super::Qp::post_send_notify)) get theirs there, and so
    /// ids with [`NOTIFY_BIT`](cq::NOTIFY_BIT) set are refused at posting.
    Queues {
        /// Send-queue completions.
        send: Cq,
        /// Receive-queue completions.
        recv: Cq,
    },
    /// Everything to one sink, ids as posted (any 64-bit id is accepted), and no
    /// per-request futures.
    Sink(Arc<dyn CompletionSink>),
}

impl Completions {
    /// Every completion to `cq`.
    pub fn queue(cq: &Cq) -> Self {
        Self::Queues {
            send: cq.clone(),
            recv: cq.clone(),
        }
    }

    /// Send-queue completions to `send`, receive-queue ones to `recv`.
    pub fn queues(send: &Cq, recv: &Cq) -> Self {
        Self::Queues {
            send: send.clone(),
            recv: recv.clone(),
        }
    }

    /// True if the layer above owns every id (a sink): nothing is reserved.
    pub(crate) fn any_id(&self) -> bool {
        matches!(self, Self::Sink(_))
    }

    /// Hands `batch` out (emptying it): to the sink; or requests posted with a future get
    /// their completion there and the rest go to the completion queues, one push per
    /// queue.
    pub(crate) fn deliver(&self, num: QpNum, waiters: &Waiters, batch: &mut Vec<Completion>) {
        let (send, recv) = match self {
            Self::Sink(sink) => return sink.deliver(num, batch),
            Self::Queues { send, recv } => (send, recv),
        };
        // A completion whose future takes it leaves the batch.
        waiters.route_batch(batch);
        if send.same_queue(recv) {
            send.deliver(num, batch.drain(..));
        } else {
            send.deliver(
                num,
                batch.iter().filter(|wc| wc.queue == Queue::Send).cloned(),
            );
            recv.deliver(num, batch.drain(..).filter(|wc| wc.queue == Queue::Recv));
        }
    }
}
