//! A message being sent: its header, where its payload comes from, and what happens once
//! its last segment is out; the header builders every message uses; the RTR.

use bytes::Bytes;
use ddp::{STag, SegmentRepr, TaggedRepr, UntaggedRepr};
use mpa::Rtr;

use super::OrqEntry;
use crate::stream::Stream;
use crate::wire::{
    ATOMIC_REQUEST_LEN, Opcode, READ_V2_FLAG, RdmapControl, ReadRequestRepr, TERMINATE_MAX_LEN,
};
use crate::work::Payload;

/// Largest RDMAP header carried inline after a DDP header: the Atomic Request and the
/// largest Terminate header are both 52 octets.
const INLINE_MAX: usize = if ATOMIC_REQUEST_LEN > TERMINATE_MAX_LEN {
    ATOMIC_REQUEST_LEN
} else {
    TERMINATE_MAX_LEN
};
/// STag of the zero-length RDMA Write RTR, as siw sends it (some hardware rejects STag 0).
const RTR_WRITE_STAG: u32 = 1;

/// Where a message's payload comes from.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub(super) enum Source {
    Empty,
    Bytes(Bytes),
    Sgl(crate::Sgl),
    /// Local memory read with remote-read access on the peer's behalf (Read Response).
    Remote(ReadRequestRepr),
    Inline(
        #[serde(with = "crate::stream::snapshot::array")] [u8; INLINE_MAX],
        usize,
    ),
}

/// What happens after a message's last segment is emitted.
#[derive(Copy, Clone, Debug, serde::Serialize, serde::Deserialize)]
pub(super) enum Done {
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
pub(super) struct OutMsg {
    /// The DDP header (and RDMAP control) of the whole message; each segment's own is
    /// derived from it.
    pub(super) header: SegmentRepr,
    /// A Send with Immediate Data's value, after the DDP header of every segment.
    pub(super) imm: Option<u32>,
    /// Where the payload comes from.
    pub(super) src: Source,
    /// Payload octets in the whole message.
    pub(super) len: u32,
    /// Payload octets already sent.
    pub(super) off: u32,
    /// What happens once the last segment is out.
    pub(super) done: Done,
}

impl OutMsg {
    /// The message of send request `seq`, completed once its octets are written.
    pub(super) fn request(seq: u64, header: SegmentRepr, src: Source, len: u32) -> Self {
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

/// The header of an untagged message on queue `qn` with MSN `msn` (`inv`: the STag a Send
/// with Invalidate names), marked last; [`segment`](super::segment) cuts it up.
pub(super) fn untagged(op: Opcode, qn: u32, msn: u32, inv: u32) -> SegmentRepr {
    SegmentRepr::Untagged(UntaggedRepr {
        last: true,
        rsvd_ulp: RdmapControl::new(op).emit(),
        rsvd_ulp_ext: inv,
        qn,
        msn,
        mo: 0,
    })
}

/// The header of a tagged message into `stag` at `to`, marked last.
pub(super) fn tagged(op: Opcode, stag: STag, to: u64) -> SegmentRepr {
    SegmentRepr::Tagged(TaggedRepr {
        last: true,
        rsvd_ulp: RdmapControl::new(op).emit(),
        stag,
        to,
    })
}

/// An inline payload of `len` octets that `emit` writes (an RDMAP header such as a Read
/// Request's), held in the message itself.
pub(super) fn inline(emit: impl FnOnce(&mut [u8]), len: usize) -> Source {
    let mut buf = [0u8; INLINE_MAX];
    emit(&mut buf[..len]);
    Source::Inline(buf, len)
}

/// Where a request's payload comes from; an empty one is [`Source::Empty`].
pub(super) fn payload_source(p: Payload) -> Source {
    match p {
        Payload::Bytes(b) if b.is_empty() => Source::Empty,
        Payload::Bytes(b) => Source::Bytes(b),
        Payload::Sgl(sgl) => Source::Sgl(sgl),
    }
}

/// `h` with the Read V2 mark in its RDMAP control octet when `v2`.
pub(super) fn read_v2_flag(h: SegmentRepr, v2: bool) -> SegmentRepr {
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

impl Stream {
    /// The RFC 6581 RTR this side sends first: a zero-length Write, Read (which enters the
    /// ORQ, its empty response consumed silently) or Send.
    pub(super) fn rtr_message(&mut self, rtr: Rtr) -> OutMsg {
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
}
