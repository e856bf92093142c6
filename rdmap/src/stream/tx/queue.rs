//! Which message goes next: a Terminate, the RTR, a response owed to the peer, then the
//! send queue in order, with its fences, the ORD limit, Delays, and requests that only
//! touch local memory (run in place, nothing on the wire).

use super::DelayState;
use super::message::{Done, OutMsg, inline, untagged};
use crate::memory::MemoryOps;
use crate::stream::{QpState, Stream};
use crate::term::TermCode;
use crate::wire::Opcode;
use crate::work::{SendFlags, SendOp, WcStatus};

impl Stream {
    /// Time `now` has come for the Delay at the head of the send queue, if any: it starts
    /// (a Delay that just reached the head), or it ends and completes, letting the
    /// requests behind it go.
    pub(in crate::stream) fn delay_timeout(&mut self, now: std::time::Instant) {
        if let Some(DelayState::Waiting(d)) = self.tx.delay {
            // It starts now and ends at a deadline (poll_timeout), never in this call.
            self.tx.delay = Some(DelayState::Until(now.checked_add(d)));
            return;
        }
        let Some(DelayState::Until(Some(end))) = self.tx.delay else {
            return;
        };
        if now < end {
            return;
        }
        self.tx.delay = None;
        if let Some(wr) = self.tx.sq.pop_front() {
            let seq = self.tx.start(&wr);
            self.tx.finish(seq, WcStatus::Success, None);
            self.release_completions();
        }
    }

    /// True if all this stream has to do is send-queue requests behind one that waits for
    /// a queued registration ([`LocalOps::registration_pending`](crate::LocalOps)): the
    /// connection is idle until that is done, not stalled.
    pub fn waits_on_registration(&self, mem: &dyn MemoryOps) -> bool {
        self.tx.idle_but_queued()
            && self.rx.direct.is_none()
            && self
                .tx
                .sq
                .front()
                .is_some_and(|wr| names_pending(&wr.op, mem))
    }

    /// The end of a running Delay.
    pub(in crate::stream) fn delay_deadline(&self) -> Option<std::time::Instant> {
        match self.tx.delay {
            Some(DelayState::Until(t)) => t,
            _ => None,
        }
    }

    /// Picks the next message: a Terminate, the RTR, a response owed to the peer, then the
    /// send queue.
    pub(super) fn next_message(&mut self, mem: &mut dyn MemoryOps) -> Option<OutMsg> {
        if let Some(term) = self.tx.term.take() {
            let msn = self.tx.next_msn(2);
            let len = term.buffer_len();
            return Some(OutMsg {
                header: untagged(Opcode::Terminate, 2, msn, 0),
                imm: None,
                src: inline(|b| term.emit(b), len),
                len: len as u32,
                off: 0,
                done: Done::Terminate,
            });
        }
        if !self.may_send() {
            // Nothing may go on the wire yet (a Responder before the first FPDU), but
            // requests that only touch local memory need no wire: run those at the head.
            if matches!(self.state, QpState::Rts | QpState::Closing) {
                self.run_local_head(mem);
            }
            return None;
        }
        if let Some(rtr) = self.tx.rtr.take() {
            return Some(self.rtr_message(rtr));
        }
        if let Some(resp) = self.tx.irq.pop_front() {
            self.tx.responding = true;
            return Some(self.response_message(resp));
        }
        loop {
            let wr = self.tx.sq.front()?;
            if let SendOp::Delay { duration } = wr.op {
                // Held until the time has passed (Stream::handle_timeout ends it).
                self.tx.delay.get_or_insert(DelayState::Waiting(duration));
                return None;
            }
            if names_pending(&wr.op, &*mem) {
                return None;
            }
            let needs_orq = matches!(
                wr.op,
                SendOp::Read { .. }
                    | SendOp::ReadSgl { .. }
                    | SendOp::FetchAdd { .. }
                    | SendOp::CmpSwap { .. }
            );
            if wr.flags.contains(SendFlags::FENCE) && !self.tx.orq.is_empty() {
                return None;
            }
            if needs_orq && self.ord > 0 && self.tx.orq.len() >= usize::from(self.ord) {
                return None;
            }
            let wr = self.tx.sq.pop_front()?;
            let seq = self.tx.start(&wr);
            let result = match execute_local(&wr.op, mem) {
                Some(done) => done.map(|()| None),
                None => register_first(&wr.op, mem)
                    .and_then(|()| self.request_message(wr, seq, mem))
                    .map(Some),
            };
            match result {
                Ok(Some(m)) => return Some(m),
                // Executed locally, in send-queue order; nothing goes on the wire.
                Ok(None) => self.tx.finish(seq, WcStatus::Success, None),
                Err(WcStatus::LocalQpOperation) => {
                    // Not valid on this stream (no ORD), but harmless: fail just this one.
                    self.tx.finish(seq, WcStatus::LocalQpOperation, None);
                }
                Err(status) => {
                    self.tx.finish(seq, status, None);
                    self.local_failure();
                    return self.next_message(mem);
                }
            }
        }
    }

    /// A request failed its local checks before anything of it went on the wire. Seed
    /// 001's two options: the queue pair goes to Error with a Terminate (the default), or,
    /// with [`Stream::set_drain_on_local_failure`], the send queue is drained: every
    /// later request completes as flushed until [`Stream::resume_send_queue`], while the
    /// receive side, responses owed to the peer and requests already under way go on.
    fn local_failure(&mut self) {
        if !self.tx.drain_on_local_failure {
            return self.fatal(TermCode::RDMAP_LOCAL_CATASTROPHIC, None, None);
        }
        self.tx.sq_drained = true;
        while let Some(wr) = self.tx.sq.pop_front() {
            let seq = self.tx.start(&wr);
            self.tx.finish(seq, WcStatus::Flushed, None);
        }
        self.release_completions();
    }

    /// Executes the Local Invalidate, fast registration and bind requests at the head of
    /// the send queue, stopping at the first request that needs the wire (or a fence).
    fn run_local_head(&mut self, mem: &mut dyn MemoryOps) {
        while let Some(wr) = self.tx.sq.front() {
            let fenced = wr.flags.contains(SendFlags::FENCE) && !self.tx.orq.is_empty();
            if fenced || !is_local_only(&wr.op) || names_pending(&wr.op, &*mem) {
                return;
            }
            let Some(wr) = self.tx.sq.pop_front() else {
                return;
            };
            let seq = self.tx.start(&wr);
            match execute_local(&wr.op, mem) {
                Some(Ok(())) | None => self.tx.finish(seq, WcStatus::Success, None),
                Some(Err(status)) => {
                    self.tx.finish(seq, status, None);
                    self.local_failure();
                    return;
                }
            }
        }
    }
}

/// True if `op` names an STag whose registration is still queued: it waits at the head
/// of the send queue (see [`LocalOps::registration_pending`](crate::LocalOps)).
fn names_pending(op: &SendOp, mem: &dyn MemoryOps) -> bool {
    op.local_stags().any(|s| mem.registration_pending(s))
}

/// True for requests that only touch local memory.
fn is_local_only(op: &SendOp) -> bool {
    matches!(
        op,
        SendOp::LocalInvalidate { .. } | SendOp::FastRegister(_) | SendOp::Bind(_)
    )
}

/// Runs a request that only touches local memory (Local Invalidate, fast registration,
/// window bind); `None` for requests that put a message on the wire.
fn execute_local(op: &SendOp, mem: &mut dyn MemoryOps) -> Option<Result<(), WcStatus>> {
    let done = match op {
        SendOp::LocalInvalidate { stag } => mem.local_invalidate(*stag),
        SendOp::FastRegister(fr) => mem.fast_register(fr),
        SendOp::Bind(b) => mem.bind(b),
        _ => return None,
    };
    Some(done.map_err(|e| {
        tracing::debug!(error = %e, "local work request failed");
        WcStatus::LocalProtection
    }))
}

/// The registration of a combined register-and-send, done before its message is built;
/// nothing for other requests.
fn register_first(op: &SendOp, mem: &mut dyn MemoryOps) -> Result<(), WcStatus> {
    match op {
        SendOp::RegisterSend { reg, .. } => mem.fast_register(reg).map_err(|e| {
            tracing::debug!(error = %e, "registration of a register-and-send failed");
            WcStatus::LocalProtection
        }),
        _ => Ok(()),
    }
}
