//! The transmit side: send queue, outstanding Read/Atomic requests (ORQ), responses owed to
//! the peer (IRQ), segmentation and FPDU emission.

use std::collections::VecDeque;
use std::ops::Range;

use bytes::{Bytes, BytesMut};
use ddp::{Access, STag, SegmentRepr, TaggedRepr, UntaggedRepr};
use mpa::{Extensions, Rtr};

use super::transmit::{Chained, IN_PLACE_MIN, Transmit, ZERO_COPY_MIN};
use super::{QpState, Stream, StreamStats};
use crate::memory::{Memory, MemoryOps};
use crate::term::TermCode;
use crate::wire::{
    ATOMIC_REQUEST_LEN, AtomicOp, AtomicRequestRepr, AtomicResponseRepr, Opcode, READ_V2_FLAG,
    READ_V2_REQUEST_LEN, RdmapControl, ReadRequestRepr, ReadV2RequestRepr, SEND_IMM_LEN,
    TERMINATE_MAX_LEN, TerminateRepr,
};
use crate::work::{
    Completion, Payload, Queue, RemoteBuf, SendFlags, SendOp, SendWr, Sge, WcOpcode, WcStatus,
};

/// Largest RDMAP header carried inline after a DDP header: the Atomic Request and the
/// largest Terminate header are both 52 octets.
const INLINE_MAX: usize = if ATOMIC_REQUEST_LEN > TERMINATE_MAX_LEN {
    ATOMIC_REQUEST_LEN
} else {
    TERMINATE_MAX_LEN
};
/// STag of the zero-length RDMA Write RTR, as siw sends it (some hardware rejects STag 0).
const RTR_WRITE_STAG: u32 = 1;

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

/// Where a message's payload comes from.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
enum Source {
    Empty,
    Bytes(Bytes),
    Sgl(crate::Sgl),
    /// Local memory read with remote-read access on the peer's behalf (Read Response).
    Remote(ReadRequestRepr),
    Inline(
        #[serde(with = "crate::snapshot::array")] [u8; INLINE_MAX],
        usize,
    ),
}

/// What happens after a message's last segment is emitted.
#[derive(Copy, Clone, Debug, serde::Serialize, serde::Deserialize)]
enum Done {
    /// Complete send request `seq` once its octets are written.
    Written(u64),
    /// A response left: free its IRD slot.
    Response,
    /// The Terminate left.
    Terminate,
    Nothing,
}

/// A message being segmented.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct OutMsg {
    header: SegmentRepr,
    /// A Send with Immediate Data's value, after the DDP header of every segment.
    imm: Option<u32>,
    src: Source,
    len: u32,
    off: u32,
    done: Done,
}

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
    /// [`Stream::handle_timeout`] gives it a start, then its end.
    pub(super) delay: Option<DelayState>,
    /// Seed 001's option 1: a local failure drains the send queue instead of ending the
    /// stream.
    pub(super) drain_on_local_failure: bool,
    /// The send queue is drained: posts complete as flushed until it is resumed.
    pub(super) sq_drained: bool,
}

/// The progress of the Delay at the head of the send queue.
#[derive(Copy, Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(super) enum DelayState {
    /// Reached the head; starts at the next time the stream is told.
    Waiting(std::time::Duration),
    /// Later requests go out from this instant on; `None`: a duration past what the
    /// clock can represent, which only a flush ends.
    Until(#[serde(with = "crate::snapshot::deadline")] Option<std::time::Instant>),
}

impl TxState {
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

    pub(super) fn all_written(&self) -> bool {
        self.written >= self.emitted
    }

    pub(super) fn has_work(&self) -> bool {
        self.rtr.is_some() || self.current.is_some() || !self.irq.is_empty() || !self.sq.is_empty()
    }

    pub(super) fn is_idle(&self) -> bool {
        self.sq.is_empty()
            && self.inflight.is_empty()
            && self.current.is_none()
            && self.orq.is_empty()
            && self.irq.is_empty()
            && !self.responding
            && self.term.is_none()
            && self.rtr.is_none()
            && self.all_written()
    }

    fn next_msn(&mut self, qn: u32) -> u32 {
        let slot = &mut self.msn[qn as usize & 3];
        *slot = slot.wrapping_add(1);
        *slot
    }

    fn start(&mut self, wr: &SendWr) -> u64 {
        let seq = self.next_seq;
        self.next_seq += 1;
        let mut wc = Completion::new(wr.wr_id, Queue::Send, wr.op.wc_opcode(), WcStatus::Success);
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

    fn entry(&mut self, seq: u64) -> Option<&mut Inflight> {
        let front = self.inflight.front()?.seq;
        let idx = usize::try_from(seq.checked_sub(front)?).ok()?;
        self.inflight.get_mut(idx)
    }

    /// Marks request `seq` finished with `status`.
    pub(super) fn finish(&mut self, seq: u64, status: WcStatus, atomic_orig: Option<u64>) {
        if let Some(e) = self.entry(seq)
            && !e.done
        {
            e.done = true;
            e.wc.status = status;
            e.wc.atomic_orig = atomic_orig;
        }
    }

    /// The next completion to report, in posting order.
    pub(super) fn pop_finished(&mut self) -> Option<Completion> {
        while self.inflight.front().is_some_and(|e| e.done) {
            let e = self.inflight.pop_front()?;
            if e.signaled || e.wc.status != WcStatus::Success {
                return Some(e.wc);
            }
        }
        None
    }

    pub(super) fn flush(&mut self, how: Flush) {
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

impl OutMsg {
    /// The message of send request `seq`, completed once its octets are written.
    fn request(seq: u64, header: SegmentRepr, src: Source, len: u32) -> Self {
        Self {
            header,
            imm: None,
            src,
            len,
            off: 0,
            done: Done::Written(seq),
        }
    }
}

fn untagged(op: Opcode, qn: u32, msn: u32, inv: u32) -> SegmentRepr {
    SegmentRepr::Untagged(UntaggedRepr {
        last: true,
        rsvd_ulp: RdmapControl::new(op).emit(),
        rsvd_ulp_ext: inv,
        qn,
        msn,
        mo: 0,
    })
}

fn tagged(op: Opcode, stag: STag, to: u64) -> SegmentRepr {
    SegmentRepr::Tagged(TaggedRepr {
        last: true,
        rsvd_ulp: RdmapControl::new(op).emit(),
        stag,
        to,
    })
}

fn inline(emit: impl FnOnce(&mut [u8]), len: usize) -> Source {
    let mut buf = [0u8; INLINE_MAX];
    emit(&mut buf[..len]);
    Source::Inline(buf, len)
}

fn payload_source(p: Payload) -> Source {
    match p {
        Payload::Bytes(b) if b.is_empty() => Source::Empty,
        Payload::Bytes(b) => Source::Bytes(b),
        Payload::Sgl(sgl) => Source::Sgl(sgl),
    }
}

impl Stream {
    /// Time `now` has come for the Delay at the head of the send queue, if any: it starts
    /// (a Delay that just reached the head), or it ends and completes, letting the
    /// requests behind it go.
    pub(super) fn delay_timeout(&mut self, now: std::time::Instant) {
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

    /// The end of a running Delay.
    pub(super) fn delay_deadline(&self) -> Option<std::time::Instant> {
        match self.tx.delay {
            Some(DelayState::Until(t)) => t,
            _ => None,
        }
    }

    /// Emits one FPDU if there is anything to send. Returns false when idle or blocked.
    pub(super) fn transmit_one(&mut self, mem: &mut dyn MemoryOps, out: &mut Transmit) -> bool {
        if self.tx.current.is_none() {
            match self.next_message(mem) {
                Some(m) => self.tx.current = Some(m),
                None => return false,
            }
        }
        let Some(msg) = self.tx.current.take() else {
            return false;
        };
        let ddp_len = msg.header.header_len();
        // A Send with Immediate Data's value rides after the DDP header of every segment.
        let hlen = ddp_len + msg.imm.map_or(0, |_| SEND_IMM_LEN);
        let max = u32::from(self.cfg.mulpdu)
            .saturating_sub(hlen as u32)
            .max(1);
        let seg_len = (msg.len - msg.off).min(max);
        let last = msg.off + seg_len == msg.len;
        let header = segment_header(&msg.header, msg.off, last);
        let mut hbuf = [0u8; ddp::UNTAGGED_HEADER_LEN + SEND_IMM_LEN];
        header.emit(&mut hbuf[..ddp_len]);
        if let Some(imm) = msg.imm {
            hbuf[ddp_len..hlen].copy_from_slice(&imm.to_be_bytes());
        }

        let range = msg.off as usize..(msg.off + seg_len) as usize;
        if let Some(payload) = chained_payload(&msg, range.clone(), mem, self.framer.markers()) {
            // Header into the arena; the payload by reference, its PAD and CRC behind it.
            let head = out.arena(ddp::UNTAGGED_HEADER_LEN + SEND_IMM_LEN + 2);
            if let Some(trailer) = self
                .framer
                .encode_deferred(&hbuf[..hlen], range.len(), head)
            {
                if matches!(payload, Chained::InPlace { .. }) {
                    self.stats.bytes_sent_in_place += range.len() as u64;
                }
                out.push_chained(payload, trailer);
                return self.segment_sent(msg, seg_len, last);
            }
        }
        let dst = out.arena(self.framer.wire_len(hlen + seg_len as usize));
        let header = &hbuf[..hlen];
        let len = seg_len as usize;
        // The payload is copied once, from where it is straight into the FPDU.
        let filled = self
            .framer
            .encode_with(header, len, dst, |d| match &msg.src {
                Source::Empty => Ok(()),
                Source::Inline(buf, n) => {
                    d.extend_from_slice(&buf[..*n]);
                    Ok(())
                }
                Source::Bytes(b) => {
                    d.extend_from_slice(&b[range]);
                    Ok(())
                }
                Source::Sgl(sgl) => gather(mem, sgl, msg.off, len, d)
                    .map_err(|_| TermCode::RDMAP_LOCAL_CATASTROPHIC),
                Source::Remote(req) => {
                    let to = req.src_to.wrapping_add(msg.off.into());
                    mem.read_append(req.src_stag, to, len, d, Access::REMOTE_READ)
                        .map_err(|e| e.rdmap_term())
                }
            });
        if let Err(code) = filled {
            self.source_failed(&msg, code);
            return true;
        }
        self.segment_sent(msg, seg_len, last)
    }

    /// Bookkeeping after one segment of `msg` went out.
    fn segment_sent(&mut self, mut msg: OutMsg, seg_len: u32, last: bool) -> bool {
        self.tx.emitted = self.framer.position();
        self.stats.fpdus_sent += 1;
        let op = RdmapControl::parse(msg.header.rsvd_ulp()).opcode;
        StreamStats::count(&mut self.stats.octets_sent, op, seg_len as usize);
        if last && op == Opcode::Terminate {
            self.stats.terminates_sent += 1;
        }
        msg.off += seg_len;
        if last {
            self.message_sent(msg.done);
        } else {
            self.tx.current = Some(msg);
        }
        true
    }

    /// Local data could not be read while a message was being sent.
    fn source_failed(&mut self, msg: &OutMsg, code: TermCode) {
        match (&msg.src, msg.done) {
            (Source::Remote(req), _) => {
                // RFC 5040 §4.8: the copied Read Request header reflects the progress.
                let rdma = req.advanced(msg.off).to_bytes();
                self.fatal(code, None, Some(rdma));
            }
            (_, Done::Written(seq)) => {
                self.tx.finish(seq, WcStatus::LocalProtection, None);
                self.fatal(code, None, None);
            }
            _ => self.fatal(code, None, None),
        }
    }

    fn message_sent(&mut self, done: Done) {
        match done {
            Done::Written(seq) => {
                if let Some(e) = self.tx.entry(seq) {
                    e.sent = true;
                }
                self.tx.wait_written.push_back((self.tx.emitted, seq));
            }
            Done::Response => self.tx.responding = false,
            Done::Terminate => {
                if self.tx.all_written() {
                    self.set_state(QpState::Error);
                }
            }
            Done::Nothing => {}
        }
    }

    /// Picks the next message: a Terminate, the RTR, a response owed to the peer, then the
    /// send queue.
    fn next_message(&mut self, mem: &mut dyn MemoryOps) -> Option<OutMsg> {
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
            if fenced || !is_local_only(&wr.op) {
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

    fn rtr_message(&mut self, rtr: Rtr) -> OutMsg {
        let (header, src) = match rtr {
            Rtr::Write => (
                tagged(Opcode::RdmaWrite, STag::from_u32(RTR_WRITE_STAG), 0),
                Source::Empty,
            ),
            Rtr::Read => {
                self.tx.orq.push_back(OrqEntry::Rtr);
                let req = ReadRequestRepr {
                    sink_stag: STag::from_u32(0),
                    sink_to: 0,
                    size: 0,
                    src_stag: STag::from_u32(RTR_WRITE_STAG),
                    src_to: 0,
                };
                let msn = self.tx.next_msn(1);
                (
                    untagged(Opcode::ReadRequest, 1, msn, 0),
                    inline(|b| req.emit(b), ReadRequestRepr::buffer_len()),
                )
            }
            Rtr::Send => {
                let msn = self.tx.next_msn(0);
                (untagged(Opcode::Send, 0, msn, 0), Source::Empty)
            }
        };
        let len = match &src {
            Source::Inline(_, l) => *l as u32,
            _ => 0,
        };
        OutMsg {
            header,
            imm: None,
            src,
            len,
            off: 0,
            done: Done::Nothing,
        }
    }

    fn response_message(&mut self, resp: IrqEntry) -> OutMsg {
        match resp {
            IrqEntry::Read { req, v2 } => OutMsg {
                header: read_v2_flag(tagged(Opcode::ReadResponse, req.sink_stag, req.sink_to), v2),
                imm: None,
                len: req.size,
                src: if req.size == 0 {
                    Source::Empty
                } else {
                    Source::Remote(req)
                },
                off: 0,
                done: Done::Response,
            },
            IrqEntry::Atomic(r) => {
                let msn = self.tx.next_msn(3);
                OutMsg {
                    header: untagged(Opcode::AtomicResponse, 3, msn, 0),
                    imm: None,
                    src: inline(|b| r.emit(b), AtomicResponseRepr::buffer_len()),
                    len: AtomicResponseRepr::buffer_len() as u32,
                    off: 0,
                    done: Done::Response,
                }
            }
        }
    }

    /// Turns a send request into its message, after the local checks.
    fn request_message(
        &mut self,
        wr: SendWr,
        seq: u64,
        mem: &mut dyn Memory,
    ) -> Result<OutMsg, WcStatus> {
        let solicited = wr.flags.contains(SendFlags::SOLICITED);
        match wr.op {
            SendOp::LocalInvalidate { .. }
            | SendOp::FastRegister(_)
            | SendOp::Bind(_)
            | SendOp::Delay { .. } => Err(WcStatus::LocalQpOperation),
            SendOp::Send {
                data,
                invalidate,
                immediate,
            } => self.send_message(seq, mem, data, invalidate, immediate, solicited),
            // Registered already (register_first): the rest is a plain Send.
            SendOp::RegisterSend { data, .. } => {
                self.send_message(seq, mem, data, None, None, solicited)
            }
            SendOp::Write { data, dst } => {
                let len = check_payload(mem, &data)?;
                if len > dst.len {
                    return Err(WcStatus::LocalLength);
                }
                Ok(OutMsg::request(
                    seq,
                    tagged(Opcode::RdmaWrite, dst.stag, dst.to),
                    payload_source(data),
                    len,
                ))
            }
            SendOp::Immediate { data } => {
                let op = if solicited {
                    Opcode::ImmediateDataSe
                } else {
                    Opcode::ImmediateData
                };
                let msn = self.tx.next_msn(0);
                let src = inline(|b| b.copy_from_slice(&data.to_be_bytes()), 8);
                Ok(OutMsg::request(seq, untagged(op, 0, msn, 0), src, 8))
            }
            SendOp::Read { src, dst } => {
                if dst.len < src.len {
                    return Err(WcStatus::LocalLength);
                }
                let sink = Sge {
                    len: src.len,
                    ..dst
                };
                self.read_message(seq, mem, src, sink.into(), false)
            }
            SendOp::ReadSgl { src, dst } => self.read_message(seq, mem, src, dst, true),
            SendOp::FetchAdd {
                dst,
                add,
                mask,
                result,
            } => self.atomic_message(
                seq,
                mem,
                dst.stag,
                dst.to,
                result,
                (AtomicOp::FetchAdd, add, mask, 0, u64::MAX),
            ),
            SendOp::CmpSwap {
                dst,
                compare,
                compare_mask,
                swap,
                swap_mask,
                result,
            } => self.atomic_message(
                seq,
                mem,
                dst.stag,
                dst.to,
                result,
                (AtomicOp::CmpSwap, swap, swap_mask, compare, compare_mask),
            ),
        }
    }

    /// A Send of any variant (`immediate`: the extension's Send with Immediate Data).
    fn send_message(
        &mut self,
        seq: u64,
        mem: &mut dyn Memory,
        data: Payload,
        invalidate: Option<STag>,
        immediate: Option<u32>,
        solicited: bool,
    ) -> Result<OutMsg, WcStatus> {
        if immediate.is_some() && !self.extensions.contains(Extensions::SEND_IMMEDIATE) {
            // The peer did not agree: it would take the opcode for an error.
            return Err(WcStatus::LocalQpOperation);
        }
        let len = check_payload(mem, &data)?;
        let op = Opcode::send(invalidate.is_some(), solicited, immediate.is_some());
        let msn = self.tx.next_msn(0);
        let inv = invalidate.map_or(0, STag::to_u32);
        Ok(OutMsg {
            imm: immediate,
            ..OutMsg::request(seq, untagged(op, 0, msn, inv), payload_source(data), len)
        })
    }

    /// A Read of `src` into `sink` (at least `src.len` octets): Read V2 when both sides
    /// agreed, an RFC 5040 Read (whose sink must be one entry) otherwise, or, for
    /// `v2_only` (a scatter list), not at all.
    fn read_message(
        &mut self,
        seq: u64,
        mem: &mut dyn Memory,
        src: RemoteBuf,
        sink: crate::Sgl,
        v2_only: bool,
    ) -> Result<OutMsg, WcStatus> {
        let v2 = self.extensions.contains(Extensions::READ_V2);
        if self.ord == 0 || (v2_only && !v2) {
            return Err(WcStatus::LocalQpOperation);
        }
        let room = sink.iter().try_fold(0u32, |a, s| a.checked_add(s.len));
        if room.is_none_or(|r| r < src.len) {
            return Err(WcStatus::LocalLength);
        }
        for sge in &sink {
            mem.check(sge.stag, sge.to, sge.len, Access::LOCAL_WRITE)
                .map_err(|_| WcStatus::LocalProtection)?;
        }
        let msn = self.tx.next_msn(1);
        let header = read_v2_flag(untagged(Opcode::ReadRequest, 1, msn, 0), v2);
        let (sink, req, len) = match (v2, sink.first().copied()) {
            (false, Some(one)) => {
                // Read V1: the sink goes on the wire.
                let req = ReadRequestRepr {
                    sink_stag: one.stag,
                    sink_to: one.to,
                    size: src.len,
                    src_stag: src.stag,
                    src_to: src.to,
                };
                let len = ReadRequestRepr::buffer_len();
                (ReadSink::Named(one), inline(|b| req.emit(b), len), len)
            }
            _ => {
                // Read V2: no sink on the wire; it stays in the ORQ entry.
                let req = ReadV2RequestRepr {
                    size: src.len,
                    src_stag: src.stag,
                    src_to: src.to,
                };
                let sink = ReadSink::V2 { id: msn, sgl: sink };
                let len = READ_V2_REQUEST_LEN;
                (sink, inline(|b| req.emit(b), len), len)
            }
        };
        self.tx.orq.push_back(OrqEntry::Read {
            seq,
            len: src.len,
            received: 0,
            sink,
        });
        Ok(OutMsg {
            done: Done::Nothing,
            ..OutMsg::request(seq, header, req, len as u32)
        })
    }

    fn atomic_message(
        &mut self,
        seq: u64,
        mem: &mut dyn Memory,
        stag: STag,
        to: u64,
        result: Sge,
        (op, data, data_mask, compare, compare_mask): (AtomicOp, u64, u64, u64, u64),
    ) -> Result<OutMsg, WcStatus> {
        if self.ord == 0 {
            return Err(WcStatus::LocalQpOperation);
        }
        if result.len < 8 {
            return Err(WcStatus::LocalLength);
        }
        mem.check(result.stag, result.to, 8, Access::LOCAL_WRITE)
            .map_err(|_| WcStatus::LocalProtection)?;
        let msn = self.tx.next_msn(1);
        // The Request Identifier is the MSN, as urdma does: unique among outstanding requests.
        let req = AtomicRequestRepr {
            op,
            req_id: msn,
            stag,
            to,
            add_or_swap: data,
            add_or_swap_mask: data_mask,
            compare,
            compare_mask,
        };
        self.tx.orq.push_back(OrqEntry::Atomic {
            seq,
            req_id: msn,
            result,
        });
        let len = AtomicRequestRepr::buffer_len();
        Ok(OutMsg {
            header: untagged(Opcode::AtomicRequest, 1, msn, 0),
            imm: None,
            src: inline(|b| req.emit(b), len),
            len: len as u32,
            off: 0,
            done: Done::Nothing,
        })
    }
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

/// The header of the segment at `off` of a message.
/// `h` with the Read V2 mark in its RDMAP control octet when `v2`.
fn read_v2_flag(h: SegmentRepr, v2: bool) -> SegmentRepr {
    if !v2 {
        return h;
    }
    match h {
        SegmentRepr::Tagged(t) => SegmentRepr::Tagged(TaggedRepr {
            rsvd_ulp: t.rsvd_ulp | READ_V2_FLAG,
            ..t
        }),
        SegmentRepr::Untagged(u) => SegmentRepr::Untagged(UntaggedRepr {
            rsvd_ulp: u.rsvd_ulp | READ_V2_FLAG,
            ..u
        }),
    }
}

fn segment_header(h: &SegmentRepr, off: u32, last: bool) -> SegmentRepr {
    match *h {
        SegmentRepr::Tagged(t) => SegmentRepr::Tagged(TaggedRepr {
            last,
            to: t.to.wrapping_add(off.into()),
            ..t
        }),
        SegmentRepr::Untagged(u) => SegmentRepr::Untagged(UntaggedRepr { last, mo: off, ..u }),
    }
}

/// Length of a payload after checking every gather entry for local-read access.
fn check_payload(mem: &dyn Memory, p: &Payload) -> Result<u32, WcStatus> {
    let len = p.len().ok_or(WcStatus::LocalLength)?;
    if let Payload::Sgl(sgl) = p {
        for sge in sgl {
            mem.check(sge.stag, sge.to, sge.len, Access::LOCAL_READ)
                .map_err(|_| WcStatus::LocalProtection)?;
        }
    }
    Ok(len)
}

/// Reads `dst.len()` octets starting at `off` of the message described by `sgl`.
/// Appends `len` octets of the gather list `sgl`, starting `off` octets in, to `dst`.
/// The payload of the segment `range` of `msg`, to be chained by reference rather than
/// copied into the FPDU: an application's `Bytes` from 512 octets, or registered memory
/// from 4 KiB when it lies in one place (one SGE, or the range a Read Request names) with
/// the rights needed. Never with markers (they would go inside the payload).
fn chained_payload(
    msg: &OutMsg,
    range: Range<usize>,
    mem: &mut dyn MemoryOps,
    markers: bool,
) -> Option<Chained> {
    let len = range.len();
    if markers || len < ZERO_COPY_MIN {
        return None;
    }
    let (stag, to, access) = match &msg.src {
        Source::Bytes(b) => return Some(Chained::Bytes(b.slice(range))),
        _ if len < IN_PLACE_MIN => return None,
        Source::Sgl(sgl) => {
            let (stag, to) = within_one_sge(sgl, range.start as u64, len)?;
            (stag, to, Access::LOCAL_READ)
        }
        Source::Remote(req) => (
            req.src_stag,
            req.src_to.wrapping_add(range.start as u64),
            Access::REMOTE_READ,
        ),
        Source::Empty | Source::Inline(..) => return None,
    };
    let (region, off) = mem.in_place(stag, to, len, access).ok()??;
    Some(Chained::InPlace { region, off, len })
}

/// Where `[off, off + len)` of the gather list `sgl` lies, if inside one element.
fn within_one_sge(sgl: &[Sge], mut off: u64, len: usize) -> Option<(STag, u64)> {
    for sge in sgl {
        let sge_len = u64::from(sge.len);
        if off < sge_len {
            return (off + len as u64 <= sge_len).then(|| (sge.stag, sge.to.wrapping_add(off)));
        }
        off -= sge_len;
    }
    None
}

fn gather(
    mem: &mut dyn Memory,
    sgl: &[Sge],
    mut off: u32,
    mut len: usize,
    dst: &mut BytesMut,
) -> Result<(), crate::memory::AccessError> {
    for sge in sgl {
        if len == 0 {
            break;
        }
        if off >= sge.len {
            off -= sge.len;
            continue;
        }
        let n = ((sge.len - off) as usize).min(len);
        mem.read_append(
            sge.stag,
            sge.to.wrapping_add(u64::from(off)),
            n,
            dst,
            Access::LOCAL_READ,
        )?;
        len -= n;
        off = 0;
    }
    Ok(())
}
