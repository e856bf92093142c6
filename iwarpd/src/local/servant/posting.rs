//! A servant posts its client's send requests on the connection as the client wrote
//! them, under the client's own ids. Each goes in signaled, so that its end retires its
//! ring entry; whether the client asked for its completion, and how it came in, wait in
//! posting order beside the completion ring ([`Sent`]). One the connection refuses
//! completes as flushed.

use rdmap::{Completion, PostError, Queue, SendFlags, SendWr, WcOpcode, WcStatus, WrId};

use super::Run;

/// How a request reached the connection.
#[derive(Copy, Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(super) enum Via {
    /// From the send queue, with no pushed twin.
    Queue,
    /// From the send queue although its twin was pushed: the push was discarded.
    QueueAfterDiscard,
    /// From a pushed message (it holds a tracking entry until it completes).
    Push,
}

/// A send request in the connection: what its completion needs that the stream does not
/// know.
#[derive(Copy, Clone, Debug, serde::Serialize, serde::Deserialize)]
pub(super) struct Sent {
    /// The client asked for its completion.
    pub(super) signaled: bool,
    pub(super) via: Via,
}

impl Sent {
    /// A plain signaled request.
    pub(super) const QUEUED: Self = Self {
        signaled: true,
        via: Via::Queue,
    };

    /// `wr` as it came `via`, and the request to post: made signaled (and flagged if its
    /// push was discarded, which its completion then says).
    pub(super) fn of(mut wr: SendWr, via: Via) -> (Self, SendWr) {
        let signaled = wr.flags.contains(SendFlags::SIGNALED);
        wr.flags = wr.flags | SendFlags::SIGNALED;
        if via == Via::QueueAfterDiscard {
            wr.flags = wr.flags | SendFlags::PUSH_DISCARDED;
        }
        (Self { signaled, via }, wr)
    }
}

impl Run {
    /// Posts `batch` (in order); those the connection refuses complete as flushed.
    pub(super) fn post_sends(&mut self, batch: &mut Vec<(Sent, SendWr)>) {
        self.ring.sending(batch.iter().map(|(s, _)| *s));
        // A lone request goes through `post_send`, which writes a small one to the socket
        // on this thread when the connection is idle (no hop to the connection's driver).
        let refused: Option<(PostError, Vec<WrId>)> = if batch.len() == 1 {
            let (_, wr) = batch.pop().expect("one");
            let id = wr.wr_id;
            self.qp.post_send(wr).err().map(|e| (e, vec![id]))
        } else {
            let mut last = 0;
            let mut rest = batch.drain(..);
            let posted = self.qp.post_send_batch(rest.by_ref().map(|(_, wr)| {
                last = wr.wr_id;
                wr
            }));
            // The request that failed, and those after it, which were not tried.
            posted.err().map(|(_, e)| {
                (
                    e,
                    std::iter::once(last)
                        .chain(rest.map(|(_, wr)| wr.wr_id))
                        .collect(),
                )
            })
        };
        if let Some((e, refused)) = refused {
            tracing::debug!(error = %e, "send requests not posted");
            let flushed = refused
                .into_iter()
                .map(|id| Completion::new(id, Queue::Send, WcOpcode::Send, WcStatus::Flushed));
            self.ring.not_posted(flushed);
        }
    }

    /// Counts requests executed, in the queue pair's segment and the device's totals.
    pub(super) fn executed(&self, pushed: u64, sq_path: u64) {
        self.seg.count_executed(pushed, sq_path);
        self.push.share.count_executed(pushed, sq_path);
    }
}
