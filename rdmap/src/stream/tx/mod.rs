//! The transmit side: send queue, outstanding Read/Atomic requests (ORQ), responses owed to
//! the peer (IRQ), segmentation and FPDU emission.
//!
//! The work is split by concern:
//! - this module: [`TxState`], the queues it keeps (send queue, ORQ, IRQ, requests in
//!   flight) and what they report;
//! - `queue`: which message goes next (Terminate, RTR, responses, then the send queue),
//!   Delays and requests that only touch local memory;
//! - `message`: a message being sent (`OutMsg`), its payload source and
//!   headers, and the RTR;
//! - `request`: the message of a send-queue request, after its local checks;
//! - `response`: the Read and Atomic Responses owed to the peer;
//! - `segment`: cutting a message into FPDUs, one at a time, and framing each;
//! - `completion`: send-queue completions, reported in posting order, and flushing.

mod completion;
mod message;
mod queue;
mod request;
mod response;
mod segment;

use std::collections::VecDeque;

use mpa::Rtr;

use crate::sgl::Sge;
use crate::term::TermCode;
use crate::wire::{AtomicResponseRepr, ReadRequestRepr, TerminateRepr};
use crate::work::{Completion, SendWr};

use message::OutMsg;

/// How outstanding work is flushed.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(super) enum Flush {
    /// This side is sending a Terminate over a working connection: requests whose octets
    /// were all handed to the socket still complete once written.
    KeepSent,
    /// The connection is gone or the peer terminated: flush everything; with the peer's
    /// Terminate code, the oldest outstanding Read or Atomic reports the peer's verdict.
    All(Option<TermCode>),
}

/// A send-queue request that has started, kept until its completion is reported in order.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct Inflight {
    seq: u64,
    wc: Completion,
    signaled: bool,
    /// All octets are emitted; it completes once they are written.
    sent: bool,
    done: bool,
}

/// An outbound Read or Atomic waiting for its response.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub(super) enum OrqEntry {
    /// The zero-length Read RTR: its empty response is consumed silently.
    Rtr,
    Read {
        seq: u64,
        /// Octets the Read asked for.
        len: u32,
        received: u32,
        sink: ReadSink,
    },
    Atomic {
        seq: u64,
        req_id: u32,
        result: Sge,
    },
}

/// Where an outstanding Read's data goes, and how its responses name it.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub(super) enum ReadSink {
    /// RFC 5040: the responses name this local STag and TO.
    Named(Sge),
    /// Read V2: the responses name the request's MSN on QN 1 (`id`) and the offset within
    /// the read; the data fills `sgl` in order.
    V2 { id: u32, sgl: crate::Sgl },
}

/// A response owed to the peer, in request order.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub(super) enum IrqEntry {
    /// A Read; `v2` for a Read V2 Request (the sink fields then hold its identifier).
    Read {
        req: ReadRequestRepr,
        v2: bool,
    },
    Atomic(AtomicResponseRepr),
}

/// The transmit side of a [`Stream`](super::Stream): its queues, the message being sent
/// and how much of it the socket accepted.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub(super) struct TxState {
    pub(super) sq: VecDeque<SendWr>,
    inflight: VecDeque<Inflight>,
    next_seq: u64,
    /// Last MSN sent per queue number (pre-incremented, so the first message carries 1).
    msn: [u32; 4],
    current: Option<OutMsg>,
    pub(super) orq: VecDeque<OrqEntry>,
    pub(super) irq: VecDeque<IrqEntry>,
    /// The current message is a response (it still holds an IRD slot).
    responding: bool,
    pub(super) term: Option<TerminateRepr>,
    pub(super) rtr: Option<Rtr>,
    emitted: u64,
    pub(super) written: u64,
    pub(super) wait_written: VecDeque<(u64, u64)>,
    pub(super) drained_reported: bool,
    /// A Delay at the head of the send queue: its duration until the next
    /// [`Stream::handle_timeout`](super::Stream::handle_timeout) gives it a start, then its
    /// end.
    pub(super) delay: Option<DelayState>,
    /// Seed 001's option 1: a local failure drains the send queue instead of ending the
    /// stream.
    pub(super) drain_on_local_failure: bool,
    /// The send queue is drained: posts complete as flushed until it is resumed.
    pub(super) sq_drained: bool,
    /// Unsignaled requests are reported too (their completions' flags say so).
    pub(super) complete_every_send: bool,
}

/// The progress of the Delay at the head of the send queue.
#[derive(Copy, Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(super) enum DelayState {
    /// Reached the head; starts at the next time the stream is told.
    Waiting(std::time::Duration),
    /// Later requests go out from this instant on; `None`: a duration past what the
    /// clock can represent, which only a flush ends.
    Until(#[serde(with = "crate::stream::snapshot::deadline")] Option<std::time::Instant>),
}

impl TxState {
    /// An idle transmit side; `rtr`: the RTR to send first, if this side does.
    pub(super) fn new(rtr: Option<Rtr>) -> Self {
        Self {
            sq: VecDeque::new(),
            inflight: VecDeque::new(),
            next_seq: 0,
            msn: [0; 4],
            current: None,
            orq: VecDeque::new(),
            irq: VecDeque::new(),
            responding: false,
            term: None,
            rtr,
            emitted: 0,
            written: 0,
            wait_written: VecDeque::new(),
            drained_reported: false,
            delay: None,
            drain_on_local_failure: false,
            sq_drained: false,
            complete_every_send: false,
        }
    }

    /// Send requests posted and not yet reported.
    pub(super) fn outstanding(&self) -> usize {
        self.sq.len() + self.inflight.len()
    }

    /// Responses owed to the peer, including one being sent: the IRD in use.
    pub(super) fn ird_in_use(&self) -> usize {
        self.irq.len() + usize::from(self.responding)
    }

    /// The socket accepted every octet emitted so far.
    pub(super) fn all_written(&self) -> bool {
        self.written >= self.emitted
    }

    /// Something is ready to go on the wire: the RTR, the rest of a message, a response or
    /// a queued request.
    pub(super) fn has_work(&self) -> bool {
        self.rtr.is_some() || self.current.is_some() || !self.irq.is_empty() || !self.sq.is_empty()
    }

    /// Nothing is queued, in flight, owed or unwritten.
    pub(super) fn is_idle(&self) -> bool {
        self.sq.is_empty() && self.idle_but_queued()
    }

    /// Nothing is in flight, owed or unwritten (requests may be queued).
    pub(super) fn idle_but_queued(&self) -> bool {
        self.inflight.is_empty()
            && self.current.is_none()
            && self.orq.is_empty()
            && self.irq.is_empty()
            && !self.responding
            && self.term.is_none()
            && self.rtr.is_none()
            && self.all_written()
    }

    /// Another writer put `octets` on the stream: they are emitted and written as far as
    /// this side's accounting goes (wrapping: the other writer's word is not trusted).
    pub(super) fn skip(&mut self, octets: u64) {
        self.emitted = self.emitted.wrapping_add(octets);
        self.written = self.written.wrapping_add(octets);
    }

    /// The MSN of the last message on queue number `qn`.
    pub(super) fn last_msn(&self, qn: u32) -> u32 {
        self.msn[qn as usize & 3]
    }

    /// Another writer sent messages on queue number `qn` up to MSN `msn`.
    pub(super) fn set_last_msn(&mut self, qn: u32, msn: u32) {
        self.msn[qn as usize & 3] = msn;
    }

    /// The MSN of the next message on queue number `qn`.
    fn next_msn(&mut self, qn: u32) -> u32 {
        let slot = &mut self.msn[qn as usize & 3];
        *slot = slot.wrapping_add(1);
        *slot
    }
}
