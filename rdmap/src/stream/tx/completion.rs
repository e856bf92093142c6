//! Send-queue completions: a request is entered when it starts, finished when its octets
//! are written or its response placed, and reported in posting order; flushing completes
//! everything outstanding in error.

use super::{Flush, Inflight, TxState};
use crate::term::TermCode;
use crate::work::{Completion, Queue, SendFlags, SendOp, SendWr, WcOpcode, WcStatus};

impl TxState {
    /// Starts send request `wr`: it is given the next sequence number, returned, and waits
    /// in order for its completion to be reported.
    pub(in crate::stream) fn start(&mut self, wr: &SendWr) -> u64 {
        let seq = self.next_seq;
        self.next_seq += 1;
        let mut wc = Completion::new(wr.wr_id, Queue::Send, wr.op.wc_opcode(), WcStatus::Success);
        wc.push_discarded = wr.flags.contains(SendFlags::PUSH_DISCARDED);
        wc.flags = wr.flags;
        wc.byte_len = match &wr.op {
            SendOp::Send { data, .. }
            | SendOp::Write { data, .. }
            | SendOp::RegisterSend { data, .. } => data.len().unwrap_or(0),
            SendOp::Read { src, .. } | SendOp::ReadSgl { src, .. } => src.len,
            SendOp::Immediate { .. } => 0,
            SendOp::FetchAdd { .. } | SendOp::CmpSwap { .. } => 8,
            SendOp::LocalInvalidate { .. }
            | SendOp::FastRegister(_)
            | SendOp::Bind(_)
            | SendOp::Delay { .. } => 0,
        };
        self.inflight.push_back(Inflight {
            seq,
            wc,
            signaled: wr.flags.contains(SendFlags::SIGNALED),
            sent: false,
            done: false,
        });
        seq
    }

    /// The request `seq` in flight, if not yet reported.
    pub(super) fn entry(&mut self, seq: u64) -> Option<&mut Inflight> {
        let front = self.inflight.front()?.seq;
        let idx = usize::try_from(seq.checked_sub(front)?).ok()?;
        self.inflight.get_mut(idx)
    }

    /// Marks request `seq` finished with `status`.
    pub(in crate::stream) fn finish(
        &mut self,
        seq: u64,
        status: WcStatus,
        atomic_orig: Option<u64>,
    ) {
        if let Some(e) = self.entry(seq)
            && !e.done
        {
            e.done = true;
            e.wc.status = status;
            e.wc.atomic_orig = atomic_orig;
        }
    }

    /// The next completion to report, in posting order.
    pub(in crate::stream) fn pop_finished(&mut self) -> Option<Completion> {
        while self.inflight.front().is_some_and(|e| e.done) {
            let e = self.inflight.pop_front()?;
            if e.signaled || e.wc.status != WcStatus::Success || self.complete_every_send {
                return Some(e.wc);
            }
        }
        None
    }

    pub(in crate::stream) fn flush(&mut self, how: Flush) {
        self.current = None;
        self.delay = None;
        self.responding = false;
        self.rtr = None;
        self.orq.clear();
        self.irq.clear();
        let mut remote = match how {
            Flush::KeepSent => None,
            Flush::All(code) => {
                self.wait_written.clear();
                code
            }
        };
        for e in &mut self.inflight {
            if e.done || (how == Flush::KeepSent && e.sent) {
                continue;
            }
            e.done = true;
            e.wc.status = WcStatus::Flushed;
            // The peer's verdict is pinned on the oldest request still waiting for a
            // response from it; Sends and Writes complete at the socket and never do.
            let awaits_peer = matches!(
                e.wc.opcode,
                WcOpcode::Read | WcOpcode::FetchAdd | WcOpcode::CmpSwap
            );
            if let Some(code) = remote.take().filter(|_| awaits_peer) {
                e.wc.status = remote_status(code);
                e.wc.term = Some(code);
            }
        }
        while let Some(wr) = self.sq.pop_front() {
            let seq = self.start(&wr);
            self.finish(seq, WcStatus::Flushed, None);
        }
    }
}

/// What a requester reports when the peer's Terminate names this class of error.
fn remote_status(code: TermCode) -> WcStatus {
    let protection = matches!(
        (u8::from(code.layer()), code.etype()),
        (0, 1) | (1, 1) // RDMAP remote protection, DDP tagged buffer
    );
    if protection {
        WcStatus::RemoteAccess
    } else {
        WcStatus::RemoteOperation
    }
}
