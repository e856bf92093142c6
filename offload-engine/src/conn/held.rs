//! Work requests held for queued registrations (seed 003 §3.4, see `cqp`): a request that
//! names a pending STag waits outside the send queue, and every later request of the
//! queue pair waits behind it, so that none overtakes it. The driver moves them into the
//! send queue, in order, once their STags are done (the control queue wakes it).

use rdmap::{Completion, PostError, QpState, Queue, SendWr, WcStatus};

use super::state::State;

impl State {
    /// True if `wr` must wait: a request is held already, or `wr` names a region whose
    /// registration is still queued.
    pub(crate) fn must_hold(&self, wr: &SendWr) -> bool {
        !self.held.is_empty() || self.names_pending(wr)
    }

    fn names_pending(&self, wr: &SendWr) -> bool {
        let tpt = &self.home.tpt;
        tpt.has_pending() && wr.op.local_stags().any(|s| tpt.is_pending(s))
    }

    /// Holds `wr`: it counts against the send queue's depth as if it were queued.
    pub(crate) fn hold(&mut self, wr: SendWr) -> Result<(), PostError> {
        if self.stream.state() != QpState::Rts {
            // Not connected: the send queue takes it (and flushes it, in Error).
            return self.stream.post_send(wr);
        }
        if self.held.len() + self.stream.outstanding_sends() >= self.sq_depth {
            return Err(PostError::QueueFull);
        }
        self.held.push_back(wr);
        Ok(())
    }

    /// Moves the held requests whose STags are done into the send queue, in order, up to
    /// the first that still waits. A request the send queue refuses now completes with
    /// an error instead (its post had succeeded).
    pub(crate) fn release_held(&mut self) {
        while let Some(wr) = self.held.front() {
            if self.stream.state() == QpState::Rts && self.names_pending(wr) {
                break;
            }
            let Some(wr) = self.held.pop_front() else {
                break;
            };
            let (id, opcode) = (wr.wr_id, wr.op.wc_opcode());
            if let Err(e) = self.stream.post_send(wr) {
                let status = match e {
                    PostError::TooManySges { .. } => WcStatus::LocalLength,
                    _ => WcStatus::Flushed,
                };
                self.ready
                    .push(Completion::new(id, Queue::Send, opcode, status));
            }
        }
    }
}
