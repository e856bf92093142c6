//! A servant executes the client's requests in the engine: each under a daemon id of its
//! own (the client's is kept here and put back in its completion), posted signaled, and
//! one the engine refuses completes as flushed.

use std::collections::HashMap;

use rdmap::{Completion, Queue, RecvWr, SendFlags, SendWr, WcStatus, WrId};

use super::Run;

/// How a request reached the engine.
#[derive(Copy, Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(super) enum Via {
    /// From the send or receive queue, with no pushed twin.
    Queue,
    /// From the send queue although its twin was pushed: the push was discarded.
    QueueAfterDiscard,
    /// From a pushed message (it holds a tracking entry until it completes).
    Push,
}

/// What a daemon-side work request id stands for.
#[derive(Clone, serde::Serialize, serde::Deserialize)]
struct Tracked {
    client: WrId,
    signaled: bool,
    via: Via,
}

/// Daemon-side work request ids and what they stand for.
#[derive(Clone, Default, serde::Serialize, serde::Deserialize)]
pub(super) struct Ids {
    next: u64,
    map: HashMap<u64, Tracked>,
}

impl Ids {
    /// Requests in flight.
    pub(super) fn in_flight(&self) -> usize {
        self.map.len()
    }

    /// Requests in flight that came from a pushed message (each holds a tracking entry of
    /// the push path's).
    pub(super) fn pushed(&self) -> usize {
        self.map.values().filter(|t| t.via == Via::Push).count()
    }

    /// A new daemon id for the client's request `client`.
    fn track(&mut self, client: WrId, signaled: bool, via: Via) -> u64 {
        let id = self.next;
        self.next += 1;
        self.map.insert(
            id,
            Tracked {
                client,
                signaled,
                via,
            },
        );
        id
    }

    /// The send request `wr` (which reached the engine `via`) under a daemon id, posted
    /// signaled.
    pub(super) fn send(&mut self, mut wr: SendWr, via: Via) -> SendWr {
        wr.wr_id = self.track(wr.wr_id, wr.flags.contains(SendFlags::SIGNALED), via);
        wr.flags = wr.flags | SendFlags::SIGNALED;
        wr
    }

    /// The receive request `wr` under a daemon id.
    pub(super) fn recv(&mut self, mut wr: RecvWr) -> RecvWr {
        wr.wr_id = self.track(wr.wr_id, true, Via::Queue);
        wr
    }

    /// The client's view of `wc` (`None` for an unsignaled success), and how the request
    /// went in.
    pub(super) fn complete(&mut self, mut wc: Completion) -> (Option<Completion>, Option<Via>) {
        let Some(t) = self.map.remove(&wc.wr_id) else {
            return (None, None);
        };
        wc.wr_id = t.client;
        wc.push_discarded = t.via == Via::QueueAfterDiscard;
        ((t.signaled || !wc.is_ok()).then_some(wc), Some(t.via))
    }
}

impl Run {
    /// Posts requests whose daemon ids are consecutive (as [`Ids`] hands them out); those
    /// the engine refuses complete as flushed.
    pub(super) fn post_sends(&mut self, batch: impl ExactSizeIterator<Item = SendWr>) {
        let (first, n) = (self.ids.next - batch.len() as u64, batch.len());
        // A lone request goes through `post_send`, which writes a small one to the socket
        // on this thread when the connection is idle (no hop to the connection's driver).
        let posted = if n == 1 {
            let mut batch = batch;
            match batch.next() {
                Some(wr) => self.qp.post_send(wr).map_err(|e| (0, e)),
                None => Ok(()),
            }
        } else {
            self.qp.post_send_batch(batch)
        };
        if let Err((queued, e)) = posted {
            tracing::debug!(error = %e, "send requests not posted");
            for id in first + queued as u64..first + n as u64 {
                self.fail(id, Queue::Send);
            }
        }
    }

    /// A request the engine refused completes as flushed.
    pub(super) fn fail(&mut self, id: u64, queue: Queue) {
        let opcode = match queue {
            Queue::Send => rdmap::WcOpcode::Send,
            Queue::Recv => rdmap::WcOpcode::Recv,
        };
        let wc = Completion::new(id, queue, opcode, WcStatus::Flushed);
        self.finish(wc);
    }

    /// Counts requests executed, in the queue pair's segment and the device's totals.
    pub(super) fn executed(&self, pushed: u64, sq_path: u64) {
        self.seg.count_executed(pushed, sq_path);
        self.push.share.count_executed(pushed, sq_path);
    }
}
