//! The receive side: DDP and RDMAP validation of every incoming segment, placement, the
//! receive queue, and Terminate construction.

use std::collections::VecDeque;

use ddp::{Access, DdpError, STag, SegmentRepr, TaggedRepr, UntaggedRepr, check_untagged};
use mpa::{Extensions, RtrFlags};

use super::tx::{Flush, IrqEntry, OrqEntry, ReadSink};
use super::{Event, QpState, Stream, StreamStats};
use crate::atomic;
use crate::memory::{Memory, SharedRecv};
use crate::sgl::Sge;
use crate::term::TermCode;
use crate::wire::{
    AtomicOp, AtomicRequestRepr, AtomicResponseRepr, CopiedDdpHeader, IMMEDIATE_LEN, Opcode,
    READ_V2_FLAG, READ_V2_REQUEST_LEN, ReadRequestRepr, ReadV2RequestRepr, SEND_IMM_LEN,
    TerminateRepr,
};
use crate::work::{Completion, Queue, RecvWr, WcOpcode, WcStatus, WrId};

/// MPA error code for "no matching RTR" (RFC 6581 §8).
const MPA_NO_MATCHING_RTR: u8 = 7;

/// A Send being placed into a receive buffer.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct InRecv {
    wr: RecvWr,
    msn: u32,
    cap: u32,
}

#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub(super) struct RxState {
    pub(super) recv: VecDeque<RecvWr>,
    /// Next expected MSN per queue number (RFC 5041 §5.1: the first is 1).
    msn: [u32; 4],
    current: Option<InRecv>,
    /// The peer has sent its first FPDU (always true on the Initiator side).
    pub(super) peer_started: bool,
    /// Responder in peer-to-peer mode: the RTR types it accepts as the first FPDU.
    rtr: Option<RtrFlags>,
    stopped: bool,
    pub(super) eof: bool,
    /// An RDMA Write segment whose payload is being read straight into memory.
    #[serde(with = "crate::stream::snapshot::not_direct")]
    pub(super) direct: Option<super::direct::Direct>,
}

impl RxState {
    pub(super) fn new(responder: bool, p2p: bool, rtr: RtrFlags) -> Self {
        Self {
            recv: VecDeque::new(),
            msn: [1; 4],
            current: None,
            peer_started: !responder,
            rtr: (responder && p2p).then_some(rtr),
            stopped: false,
            eof: false,
            direct: None,
        }
    }

    pub(super) fn accepting(&self) -> bool {
        !self.stopped && !self.eof
    }

    pub(super) fn stop(&mut self) {
        self.stopped = true;
    }

    pub(super) fn outstanding(&self) -> usize {
        self.recv.len() + usize::from(self.current.is_some())
    }

    /// Takes every posted receive, the one in progress first.
    pub(super) fn drain(&mut self) -> Vec<WrId> {
        let cur = self.current.take().map(|c| c.wr.wr_id);
        cur.into_iter()
            .chain(self.recv.drain(..).map(|wr| wr.wr_id))
            .collect()
    }
}

/// A Terminate for `code`, copying the offending segment's headers where RFC 5040 Fig. 10
/// asks for them.
pub(super) fn build_terminate(
    code: TermCode,
    ulpdu: Option<&[u8]>,
    rdma_header: Option<[u8; 28]>,
) -> TerminateRepr {
    let ddp = ulpdu.filter(|_| code.copies_ddp_header()).and_then(|u| {
        Some((
            u16::try_from(u.len()).ok()?,
            CopiedDdpHeader::from_ulpdu(u)?,
        ))
    });
    TerminateRepr {
        code,
        ddp_seg_len: ddp.as_ref().map(|(len, _)| *len),
        ddp_header: ddp.map(|(_, h)| h),
        rdma_header: rdma_header.filter(|_| code.copies_rdma_header()),
    }
}

fn sgl_len(sgl: &[Sge]) -> u32 {
    sgl.iter().fold(0u32, |a, s| a.saturating_add(s.len))
}

/// Places `data` at message offset `mo` of a scatter list (a receive buffer, or a Read V2
/// sink).
fn scatter(
    mem: &mut dyn Memory,
    sgl: &[Sge],
    mut mo: u32,
    mut data: &[u8],
) -> Result<(), crate::memory::AccessError> {
    for sge in sgl {
        if data.is_empty() {
            break;
        }
        if mo >= sge.len {
            mo -= sge.len;
            continue;
        }
        let n = ((sge.len - mo) as usize).min(data.len());
        let (head, rest) = data.split_at(n);
        mem.write(sge.stag, sge.to + u64::from(mo), head, Access::LOCAL_WRITE)?;
        data = rest;
        mo = 0;
    }
    Ok(())
}

impl Stream {
    /// Validates and executes one incoming DDP segment.
    pub(super) fn on_ulpdu(
        &mut self,
        ulpdu: &[u8],
        mem: &mut dyn Memory,
        srq: &mut dyn SharedRecv,
    ) {
        let (seg, payload, op) = match super::checks::check_segment(ulpdu, self.extensions) {
            Ok(x) => x,
            Err((code, copy)) => return self.fatal(code, copy.then_some(ulpdu), None),
        };
        StreamStats::count(&mut self.stats.octets_received, op, payload.len());
        if op == Opcode::Terminate && seg.last() {
            self.stats.terminates_received += 1;
        }
        if !self.rx.peer_started && op != Opcode::Terminate {
            if !self.first_fpdu(&seg, op, payload) {
                return self.fatal(TermCode::llp(MPA_NO_MATCHING_RTR), None, None);
            }
            self.rx.peer_started = true;
            self.events.push_back(Event::Ready);
            if matches!(op, Opcode::Send) && self.rx.rtr.is_some() {
                // The zero-length Send RTR uses MSN 1 on QN 0 but consumes no buffer.
                self.rx.msn[0] = 2;
                return;
            }
        }
        // Read V2's mark: a reserved bit to RFC 5040, ignored unless both sides agreed.
        let v2 =
            seg.rsvd_ulp() & READ_V2_FLAG != 0 && self.extensions.contains(Extensions::READ_V2);
        match seg {
            SegmentRepr::Tagged(t) if op == Opcode::RdmaWrite => {
                self.on_write(&t, payload, ulpdu, mem)
            }
            SegmentRepr::Tagged(t) => self.on_read_response(&t, payload, ulpdu, mem, v2),
            SegmentRepr::Untagged(u) => match op {
                Opcode::ReadRequest => self.on_read_request(&u, payload, ulpdu, mem, v2),
                Opcode::AtomicRequest => self.on_atomic_request(&u, payload, ulpdu, mem),
                Opcode::AtomicResponse => self.on_atomic_response(&u, payload, ulpdu, mem),
                Opcode::Terminate => self.on_terminate(&u, payload, ulpdu),
                Opcode::ImmediateData | Opcode::ImmediateDataSe => {
                    self.refill_from_srq(srq);
                    self.on_immediate(&u, op, payload, ulpdu)
                }
                _ if op.has_send_immediate() => {
                    // Every segment starts with the 4-octet immediate value; MO counts
                    // only the payload after it.
                    let Some((imm, payload)) = payload.split_first_chunk::<SEND_IMM_LEN>() else {
                        return self.fatal(TermCode::OP_UNSPECIFIED, Some(ulpdu), None);
                    };
                    self.refill_from_srq(srq);
                    let imm = u32::from_be_bytes(*imm);
                    self.on_send(&u, op, payload, ulpdu, mem, Some(imm))
                }
                _ => {
                    self.refill_from_srq(srq);
                    self.on_send(&u, op, payload, ulpdu, mem, None)
                }
            },
        }
    }

    /// Responder: is this first FPDU acceptable? In peer-to-peer mode it must be one of the
    /// RTRs the Reply offered (RFC 6581 §9.3); otherwise anything is.
    fn first_fpdu(&self, seg: &SegmentRepr, op: Opcode, payload: &[u8]) -> bool {
        let Some(allowed) = self.rx.rtr else {
            return true;
        };
        match (seg, op) {
            (SegmentRepr::Tagged(t), Opcode::RdmaWrite) => {
                allowed.contains(RtrFlags::WRITE) && t.last && payload.is_empty()
            }
            (SegmentRepr::Untagged(u), Opcode::ReadRequest) => {
                allowed.contains(RtrFlags::READ)
                    && u.msn == 1
                    && ReadRequestRepr::parse(payload).is_ok_and(|r| r.size == 0)
            }
            (SegmentRepr::Untagged(u), Opcode::Send) => {
                allowed.contains(RtrFlags::SEND) && u.msn == 1 && u.last && payload.is_empty()
            }
            _ => false,
        }
    }

    fn on_write(&mut self, t: &TaggedRepr, payload: &[u8], ulpdu: &[u8], mem: &mut dyn Memory) {
        // RFC 5041 §5.2: STag and TO of a zero-length tagged segment are not checked.
        if payload.is_empty() {
            return;
        }
        if !self.incoming_rdma {
            return self.fatal(TermCode::ACCESS_RIGHTS, Some(ulpdu), None);
        }
        if let Err(e) = mem.write(t.stag, t.to, payload, Access::REMOTE_WRITE) {
            return self.fatal(e.tagged_term(), Some(ulpdu), None);
        }
        self.write_placed(t, payload.len(), mem);
    }

    /// An RDMA Write segment's `len` payload octets are in memory (copied, or read there
    /// directly): it counts, and the last one completes its message.
    pub(super) fn write_placed(&mut self, t: &TaggedRepr, len: usize, mem: &mut dyn Memory) {
        self.stats.bytes_placed += len as u64;
        if t.last {
            mem.message_placed(t.stag);
        }
    }

    /// A Read Response segment (`v2`: a Read V2 Response), matched against the oldest
    /// outstanding Read.
    fn on_read_response(
        &mut self,
        t: &TaggedRepr,
        payload: &[u8],
        ulpdu: &[u8],
        mem: &mut dyn Memory,
        v2: bool,
    ) {
        let placed = match self.tx.orq.front_mut() {
            Some(OrqEntry::Rtr) if payload.is_empty() && t.last => {
                self.tx.orq.pop_front();
                return;
            }
            Some(OrqEntry::Read { sink, .. }) if matches!(sink, ReadSink::V2 { .. }) != v2 => {
                // A V1 response to a V2 request, or the other way round.
                Err(TermCode::UNEXPECTED_OPCODE)
            }
            Some(OrqEntry::Read {
                seq,
                len: total,
                received,
                sink,
            }) => {
                let len = payload.len() as u32;
                // V1 names the sink STag and TO; V2 the read's identifier and the offset
                // within the read.
                let (stag, base) = match sink {
                    ReadSink::Named(s) => (s.stag, s.to),
                    ReadSink::V2 { id, .. } => (STag::from_u32(*id), 0),
                };
                if payload.is_empty() {
                    // RFC 5041 §5.2: STag and TO of a zero-length segment are not checked.
                    Ok((*seq, *received == *total))
                } else if t.stag != stag {
                    Err(TermCode::from_ddp(DdpError::InvalidStag))
                } else {
                    // Strict placement: each segment continues exactly where the previous
                    // one ended, inside the part of the sink still to be filled. A hole,
                    // an overlap or an overrun is a bounds violation of that remainder
                    // (DDP tagged 0x01), and nothing of the segment is placed.
                    let rest = base.checked_add(u64::from(*received));
                    let left = u64::from(*total - *received);
                    match rest.map(|rest| ddp::tagged_offset(t.to, len.into(), rest, left)) {
                        Some(Ok(0)) => match sink {
                            ReadSink::Named(s) => {
                                mem.write(s.stag, t.to, payload, Access::LOCAL_WRITE)
                            }
                            ReadSink::V2 { sgl, .. } => scatter(mem, sgl, *received, payload),
                        }
                        .map_err(|e| e.tagged_term())
                        .map(|()| {
                            *received += len;
                            (*seq, *received == *total)
                        }),
                        Some(Err(e)) => Err(TermCode::from_ddp(e)),
                        // A hole before the segment.
                        _ => Err(TermCode::from_ddp(DdpError::BaseBounds)),
                    }
                }
            }
            _ => Err(TermCode::UNEXPECTED_OPCODE),
        };
        match placed {
            Err(code) => self.fatal(code, Some(ulpdu), None),
            Ok((seq, complete)) => {
                self.stats.bytes_placed += payload.len() as u64;
                if !t.last {
                    return;
                }
                self.tx.orq.pop_front();
                if complete {
                    self.tx.finish(seq, WcStatus::Success, None);
                    self.release_completions();
                } else {
                    // A Read Response shorter than requested.
                    self.tx.finish(seq, WcStatus::RemoteInvalidRequest, None);
                    self.fatal(TermCode::OP_UNSPECIFIED, Some(ulpdu), None);
                }
            }
        }
    }

    /// Send, Send with Invalidate, Send with SE (and Invalidate), each also with Immediate
    /// Data (`imm`, taken from the last segment): placed into the receive buffer at the
    /// head of the queue.
    fn on_send(
        &mut self,
        u: &UntaggedRepr,
        op: Opcode,
        payload: &[u8],
        ulpdu: &[u8],
        mem: &mut dyn Memory,
        imm: Option<u32>,
    ) {
        let len = payload.len() as u32;
        let (expected, cap) = match &self.rx.current {
            Some(c) => (c.msn, Some(c.cap)),
            None => (
                self.rx.msn[0],
                self.rx.recv.front().map(|wr| sgl_len(&wr.sgl)),
            ),
        };
        if let Err(e) = check_untagged(u.msn, expected, u.mo, len, cap) {
            if matches!(e, DdpError::TooLong | DdpError::InvalidMo) {
                // The receive that was to take this message is too short: it completes
                // with a local length error (verbs semantics), the rest is flushed.
                let wr = match self.rx.current.take() {
                    Some(c) => Some(c.wr),
                    None => self.rx.recv.pop_front(),
                };
                if let Some(wr) = wr {
                    let mut wc = Completion::new(
                        wr.wr_id,
                        Queue::Recv,
                        WcOpcode::Recv,
                        WcStatus::LocalLength,
                    );
                    wc.term = Some(TermCode::from_ddp(e));
                    self.push_completion(wc);
                }
            }
            return self.fatal(TermCode::from_ddp(e), Some(ulpdu), None);
        }
        let cur = match self.rx.current.take() {
            Some(c) => c,
            None => match self.rx.recv.pop_front() {
                Some(wr) => InRecv {
                    cap: sgl_len(&wr.sgl),
                    wr,
                    msn: u.msn,
                },
                None => {
                    return self.fatal(TermCode::from_ddp(DdpError::NoBuffer), Some(ulpdu), None);
                }
            },
        };
        if let Err(e) = scatter(mem, &cur.wr.sgl, u.mo, payload) {
            tracing::debug!(error = %e, "receive buffer rejected placement");
            let mut wc = Completion::new(
                cur.wr.wr_id,
                Queue::Recv,
                WcOpcode::Recv,
                WcStatus::LocalProtection,
            );
            wc.term = Some(TermCode::from_ddp(DdpError::LocalCatastrophic));
            self.push_completion(wc);
            return self.fatal(
                TermCode::from_ddp(DdpError::LocalCatastrophic),
                Some(ulpdu),
                None,
            );
        }
        self.stats.bytes_placed += u64::from(len);
        if !u.last {
            self.rx.current = Some(cur);
            return;
        }
        self.rx.msn[0] = self.rx.msn[0].wrapping_add(1);
        let mut wc = Completion::new(cur.wr.wr_id, Queue::Recv, WcOpcode::Recv, WcStatus::Success);
        wc.byte_len = u.mo + len;
        wc.solicited = op.solicited();
        wc.immediate = imm.map(u64::from);
        if op.invalidates() {
            let stag = STag::from_u32(u.rsvd_ulp_ext);
            if let Err(e) = mem.invalidate(stag) {
                self.rx.current = Some(cur);
                return self.fatal(e.invalidate_term(), Some(ulpdu), None);
            }
            wc.invalidated = Some(stag);
        }
        self.push_completion(wc);
    }

    /// A new incoming message with no receive of this queue pair posted takes one from the
    /// shared receive queue, if the queue pair draws on one.
    fn refill_from_srq(&mut self, srq: &mut dyn SharedRecv) {
        if self.rx.current.is_none()
            && self.rx.recv.is_empty()
            && let Some(wr) = srq.take()
        {
            self.rx.recv.push_back(wr);
        }
    }

    /// Immediate Data (RFC 7306 §6): exactly 8 octets, one segment, consumes a receive.
    fn on_immediate(&mut self, u: &UntaggedRepr, op: Opcode, payload: &[u8], ulpdu: &[u8]) {
        // Immediate Data is not placed: the receive only has to exist (RFC 7306 §6.2), and
        // a wrong length is an RDMAP error, not a DDP one (wire-format.md §5.7).
        let cap = self.rx.recv.front().map(|_| u32::MAX);
        if let Err(e) = check_untagged(u.msn, self.rx.msn[0], u.mo, payload.len() as u32, cap) {
            return self.fatal(TermCode::from_ddp(e), Some(ulpdu), None);
        }
        let Ok(data) = <[u8; IMMEDIATE_LEN]>::try_from(payload) else {
            return self.fatal(TermCode::OP_UNSPECIFIED, Some(ulpdu), None);
        };
        if !u.last || u.mo != 0 {
            return self.fatal(TermCode::OP_UNSPECIFIED, Some(ulpdu), None);
        }
        let Some(wr) = self.rx.recv.pop_front() else {
            return self.fatal(TermCode::from_ddp(DdpError::NoBuffer), Some(ulpdu), None);
        };
        self.rx.msn[0] = self.rx.msn[0].wrapping_add(1);
        let mut wc = Completion::new(
            wr.wr_id,
            Queue::Recv,
            WcOpcode::RecvImmediate,
            WcStatus::Success,
        );
        wc.immediate = Some(u64::from_be_bytes(data));
        wc.solicited = op.solicited();
        self.push_completion(wc);
    }

    /// Checks common to the single-segment messages on QN 1 and QN 3: the MSN, one
    /// segment, and exactly `len` octets of RDMAP header.
    fn single_segment(
        &mut self,
        u: &UntaggedRepr,
        payload: &[u8],
        ulpdu: &[u8],
        len: usize,
    ) -> bool {
        let qn = u.qn as usize;
        let got = payload.len() as u32;
        if let Err(e) = check_untagged(u.msn, self.rx.msn[qn], u.mo, got, Some(len as u32)) {
            self.fatal(TermCode::from_ddp(e), Some(ulpdu), None);
            return false;
        }
        if !u.last || payload.len() != len {
            self.fatal(TermCode::OP_UNSPECIFIED, Some(ulpdu), None);
            return false;
        }
        self.rx.msn[qn] = self.rx.msn[qn].wrapping_add(1);
        true
    }

    /// Read and Atomic Requests on QN 1 share the IRD (RFC 7306 §5.1); beyond it siw
    /// reports a catastrophic error localized to the stream.
    fn inbound_request(
        &mut self,
        u: &UntaggedRepr,
        payload: &[u8],
        ulpdu: &[u8],
        len: usize,
    ) -> bool {
        if self.tx.drained_reported {
            // After a close drained the send side, the driver shuts TCP's sending half:
            // a response could never go out. The peer's request is flushed at its end
            // when it sees the close.
            tracing::debug!("request after close ignored");
            return false;
        }
        if self.tx.ird_in_use() >= usize::from(self.ird) {
            self.fatal(TermCode::CATASTROPHIC_STREAM, Some(ulpdu), None);
            return false;
        }
        self.single_segment(u, payload, ulpdu, len)
    }

    /// A Read Request (`v2`: a Read V2 Request, whose responses name its MSN instead of
    /// a sink).
    fn on_read_request(
        &mut self,
        u: &UntaggedRepr,
        payload: &[u8],
        ulpdu: &[u8],
        mem: &mut dyn Memory,
        v2: bool,
    ) {
        let len = if v2 {
            READ_V2_REQUEST_LEN
        } else {
            ReadRequestRepr::buffer_len()
        };
        if !self.inbound_request(u, payload, ulpdu, len) {
            return;
        }
        let parsed = if v2 {
            ReadV2RequestRepr::parse(payload).map(|r| r.to_read_request(u.msn))
        } else {
            ReadRequestRepr::parse(payload)
        };
        let Ok(req) = parsed else {
            return self.fatal(TermCode::OP_UNSPECIFIED, Some(ulpdu), None);
        };
        if req.size > 0 && !self.incoming_rdma {
            return self.fatal(TermCode::ACCESS_RIGHTS, Some(ulpdu), Some(req.to_bytes()));
        }
        // RFC 5040 §5.2.1: nothing about the source is checked for a zero-length Read.
        if req.size > 0
            && let Err(e) = mem.check(req.src_stag, req.src_to, req.size, Access::REMOTE_READ)
        {
            return self.fatal(e.rdmap_term(), Some(ulpdu), Some(req.to_bytes()));
        }
        self.tx.irq.push_back(IrqEntry::Read { req, v2 });
    }

    fn on_atomic_request(
        &mut self,
        u: &UntaggedRepr,
        payload: &[u8],
        ulpdu: &[u8],
        mem: &mut dyn Memory,
    ) {
        if !self.inbound_request(u, payload, ulpdu, AtomicRequestRepr::buffer_len()) {
            return;
        }
        let Ok(req) = AtomicRequestRepr::parse(payload) else {
            return self.fatal(TermCode::OP_UNSPECIFIED, Some(ulpdu), None);
        };
        if matches!(req.op, AtomicOp::Unknown(_)) {
            return self.fatal(TermCode::UNEXPECTED_OPCODE, Some(ulpdu), None);
        }
        if !self.incoming_rdma {
            return self.fatal(TermCode::ACCESS_RIGHTS, Some(ulpdu), None);
        }
        // RFC 7306 §8.2: a misaligned target is a Remote Operation error 0x07, memory untouched.
        if req.to % 8 != 0 {
            return self.fatal(TermCode::CATASTROPHIC_STREAM, Some(ulpdu), None);
        }
        let mut op = |orig| atomic::apply(&req, orig).unwrap_or(orig);
        match mem.atomic(req.stag, req.to, &mut op) {
            Ok(orig) => self.tx.irq.push_back(IrqEntry::Atomic(AtomicResponseRepr {
                req_id: req.req_id,
                orig,
            })),
            Err(e) => self.fatal(e.rdmap_term(), Some(ulpdu), None),
        }
    }

    fn on_atomic_response(
        &mut self,
        u: &UntaggedRepr,
        payload: &[u8],
        ulpdu: &[u8],
        mem: &mut dyn Memory,
    ) {
        if !self.single_segment(u, payload, ulpdu, AtomicResponseRepr::buffer_len()) {
            return;
        }
        let Ok(resp) = AtomicResponseRepr::parse(payload) else {
            return self.fatal(TermCode::OP_UNSPECIFIED, Some(ulpdu), None);
        };
        let (seq, result) = match self.tx.orq.front() {
            Some(&OrqEntry::Atomic {
                seq,
                req_id,
                result,
            }) if req_id == resp.req_id => (seq, result),
            _ => return self.fatal(TermCode::UNEXPECTED_OPCODE, Some(ulpdu), None),
        };
        self.tx.orq.pop_front();
        let bytes = resp.orig.to_le_bytes();
        if mem
            .write(result.stag, result.to, &bytes, Access::LOCAL_WRITE)
            .is_err()
        {
            self.tx.finish(seq, WcStatus::LocalProtection, None);
            return self.fatal(TermCode::RDMAP_LOCAL_CATASTROPHIC, None, None);
        }
        self.tx.finish(seq, WcStatus::Success, Some(resp.orig));
        self.release_completions();
    }

    /// A Terminate from the peer (RFC 5040 §5.4): deliver it, flush, stop.
    fn on_terminate(&mut self, u: &UntaggedRepr, payload: &[u8], ulpdu: &[u8]) {
        if let Err(e) = check_untagged(
            u.msn,
            self.rx.msn[2],
            u.mo,
            payload.len() as u32,
            Some(u32::MAX),
        ) {
            return self.fatal(TermCode::from_ddp(e), Some(ulpdu), None);
        }
        let term = TerminateRepr::parse(payload).unwrap_or(TerminateRepr {
            code: TermCode::OP_UNSPECIFIED,
            ddp_seg_len: None,
            ddp_header: None,
            rdma_header: None,
        });
        tracing::debug!(code = ?term.code, "Terminate received");
        self.rx.stop();
        self.tx.term = None;
        self.flush(Flush::All(Some(term.code)));
        self.events.push_back(Event::TerminateReceived(term));
        self.set_state(QpState::Error);
    }
}
