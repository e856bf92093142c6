//! A servant posts its client's send requests on the connection as the client wrote
//! them, under the client's own ids and flags, marked with how they came in (seed 000).
//! The connection reports every request when it ends (`QpInit::complete_every_send`), each
//! completion carrying its request's flags, so the completion ring knows which ones the
//! client asked for and which held the push path's resources; one the connection refuses
//! completes as flushed.

use rdmap::{Completion, PostError, Queue, SendFlags, SendWr, WcOpcode, WcStatus, WrId};

use super::Run;

/// How a request reached the connection.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(super) enum Via {
    /// From the send queue, with no pushed twin.
    Queue,
    /// From the send queue although its twin was pushed: the push was discarded.
    QueueAfterDiscard,
    /// From a pushed message (it holds a tracking entry until it completes).
    Push,
}

/// `wr`, which came `via`, marked so for its completion.
pub(super) fn marked(mut wr: SendWr, via: Via) -> SendWr {
    match via {
        Via::Queue => {}
        Via::QueueAfterDiscard => wr.flags = wr.flags | SendFlags::PUSH_DISCARDED,
        Via::Push => wr.flags = wr.flags | SendFlags::PUSHED,
    }
    wr
}

/// What a refused request's flushed completion needs.
type Refused = (WrId, SendFlags, WcOpcode);

fn refused(wr: &SendWr) -> Refused {
    (wr.wr_id, wr.flags, wr.op.wc_opcode())
}

impl Run {
    /// Posts `batch` (in order, leaving it empty); those the connection refuses complete
    /// as flushed.
    pub(super) fn post_sends(&mut self, batch: &mut Vec<SendWr>) {
        let pushed = batch
            .iter()
            .filter(|wr| wr.flags.contains(SendFlags::PUSHED))
            .count();
        self.ring.sending(batch.len(), pushed);
        // A lone request goes through `post_send`, which writes a small one to the socket
        // on this thread when the connection is idle (no hop to the connection's driver).
        let failed: Option<(PostError, Vec<Refused>)> = if batch.len() == 1 {
            let wr = batch.pop().expect("one");
            let r = refused(&wr);
            self.qp.post_send(wr).err().map(|e| (e, vec![r]))
        } else {
            let mut last = None;
            let mut rest = batch.drain(..);
            let posted = self.qp.post_send_batch(rest.by_ref().inspect(|wr| {
                last = Some(refused(wr));
            }));
            // The request that failed, and those after it, which were not tried.
            posted.err().map(|(_, e)| {
                let tail = rest.map(|wr| refused(&wr));
                (e, last.into_iter().chain(tail).collect())
            })
        };
        if let Some((e, refused)) = failed {
            tracing::debug!(error = %e, "send requests not posted");
            self.ring
                .not_posted(refused.into_iter().map(|(id, flags, op)| {
                    let mut wc = Completion::new(id, Queue::Send, op, WcStatus::Flushed);
                    wc.flags = flags;
                    wc.push_discarded = flags.contains(SendFlags::PUSH_DISCARDED);
                    wc
                }));
        }
    }

    /// Counts requests executed, in the queue pair's segment and the device's totals.
    pub(super) fn executed(&self, pushed: u64, sq_path: u64) {
        self.seg.count_executed(pushed, sq_path);
        self.push.share.count_executed(pushed, sq_path);
    }
}
