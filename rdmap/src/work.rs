//! Work requests posted to a stream and the completions it reports.
//!
//! These types are runtime-free: the engine wraps them for the verbs API. Local memory is
//! named by `(STag, tagged offset)` pairs and reached through [`Memory`](crate::Memory), so a
//! work request never borrows application memory.

use bytes::Bytes;
use ddp::{Access, STag};

use crate::sgl::{Sge, Sgl};
use crate::term::TermCode;

/// An application-chosen identifier echoed back in the completion of a work request.
pub type WrId = u64;

/// A span of the peer's registered memory, as advertised by the peer.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct RemoteBuf {
    /// The peer's STag.
    pub stag: STag,
    /// Tagged offset of the first octet.
    pub to: u64,
    /// Length in octets.
    pub len: u32,
}

impl RemoteBuf {
    /// Octets of the [`encode`](Self::encode)d form.
    pub const ENCODED_LEN: usize = 16;

    /// The stable 16-octet form for exchange in MPA private data or a Send: STag, TO and
    /// length, big-endian (`stag[4] to[8] len[4]`).
    pub fn encode(&self) -> [u8; Self::ENCODED_LEN] {
        let mut b = [0u8; Self::ENCODED_LEN];
        b[..4].copy_from_slice(&self.stag.to_u32().to_be_bytes());
        b[4..12].copy_from_slice(&self.to.to_be_bytes());
        b[12..].copy_from_slice(&self.len.to_be_bytes());
        b
    }

    /// Reads the [`encode`](Self::encode)d form from the first 16 octets of `src`; `None`
    /// if `src` is shorter.
    pub fn decode(src: &[u8]) -> Option<Self> {
        let b: &[u8; Self::ENCODED_LEN] = src.get(..Self::ENCODED_LEN)?.try_into().ok()?;
        let [
            s0,
            s1,
            s2,
            s3,
            t0,
            t1,
            t2,
            t3,
            t4,
            t5,
            t6,
            t7,
            l0,
            l1,
            l2,
            l3,
        ] = *b;
        Some(Self {
            stag: STag::from_u32(u32::from_be_bytes([s0, s1, s2, s3])),
            to: u64::from_be_bytes([t0, t1, t2, t3, t4, t5, t6, t7]),
            len: u32::from_be_bytes([l0, l1, l2, l3]),
        })
    }

    /// The part `[offset, offset + len)` of this buffer (clamped to it).
    pub fn slice(&self, offset: u32, len: u32) -> Self {
        let offset = offset.min(self.len);
        Self {
            stag: self.stag,
            to: self.to.wrapping_add(offset.into()),
            len: len.min(self.len - offset),
        }
    }
}

/// The data of a Send or RDMA Write.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Payload {
    /// Owned bytes, transmitted as they are (no registration needed).
    Bytes(Bytes),
    /// A gather list of local registered memory, read with local-read access when the
    /// message is transmitted.
    Sgl(Sgl),
}

impl Payload {
    /// Total length in octets, or `None` if it does not fit the 32-bit message length.
    pub fn len(&self) -> Option<u32> {
        match self {
            Self::Bytes(b) => u32::try_from(b.len()).ok(),
            Self::Sgl(sgl) => sgl
                .iter()
                .try_fold(0u32, |acc, sge| acc.checked_add(sge.len)),
        }
    }

    /// True if the payload carries no octets.
    pub fn is_empty(&self) -> bool {
        self.len() == Some(0)
    }
}

/// Flags of a send-queue work request.
#[derive(
    Copy, Clone, Debug, PartialEq, Eq, Hash, Default, serde::Serialize, serde::Deserialize,
)]
pub struct SendFlags(u8);

impl SendFlags {
    /// No flags: unsignaled, no solicited event, no fence.
    pub const NONE: Self = Self(0);
    /// Report a completion when the request finishes successfully (errors always complete).
    pub const SIGNALED: Self = Self(0x01);
    /// Ask the peer for a solicited event (Send and Immediate Data variants only).
    pub const SOLICITED: Self = Self(0x02);
    /// Start only after every earlier RDMA Read and Atomic of this queue has completed.
    pub const FENCE: Self = Self(0x04);
    /// Seed 000's push path: this request was pushed, its pushed copy was discarded, and
    /// it runs from the send queue instead. Its completion says so
    /// ([`Completion::push_discarded`]); nothing else changes. Set by the push path, not
    /// by applications.
    pub const PUSH_DISCARDED: Self = Self(0x08);
    /// Seed 000's push path: this request runs from its pushed message. Its completion
    /// carries the flag back ([`Completion::flags`]), so the push path knows which
    /// requests held its resources. Set by the push path, not by applications.
    pub const PUSHED: Self = Self(0x10);

    /// True if every flag of `other` is set in `self`.
    pub const fn contains(self, other: Self) -> bool {
        self.0 & other.0 == other.0
    }
}

impl core::ops::BitOr for SendFlags {
    type Output = Self;
    fn bitor(self, rhs: Self) -> Self {
        Self(self.0 | rhs.0)
    }
}

/// The operation of a send-queue work request.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum SendOp {
    /// Send (opcode 0x3), or Send with Invalidate (0x4) when `invalidate` is set; with
    /// [`SendFlags::SOLICITED`] the SE variants (0x5, 0x6). With `immediate`, the
    /// extension's Send with Immediate Data variants (0xC–0xF), which need a peer that
    /// agreed to [`mpa::Extensions::SEND_IMMEDIATE`]: on any other connection the request
    /// completes with [`WcStatus::LocalQpOperation`] and nothing is sent.
    Send {
        /// The message.
        data: Payload,
        /// The peer STag the message asks the peer to invalidate.
        invalidate: Option<STag>,
        /// A 32-bit value delivered in the peer's receive completion with the message
        /// ([`Completion::immediate`]).
        immediate: Option<u32>,
    },
    /// RDMA Write (opcode 0x0) of `data` to `dst` on the peer.
    Write {
        /// The data to write.
        data: Payload,
        /// Where it lands on the peer; `data` must not be longer than `dst.len`.
        dst: RemoteBuf,
    },
    /// RDMA Read (Read Request 0x1, answered by Read Responses 0x2) of `src` on the peer into
    /// local memory `dst` (which must be at least `src.len` long).
    Read {
        /// The peer's source buffer.
        src: RemoteBuf,
        /// The local sink.
        dst: Sge,
    },
    /// RDMA Read V2 of `src` on the peer into a scatter list of local memory, filled in
    /// order (seed 003 §3.3: the sink never goes on the wire, so it need not be one
    /// region). Needs a peer that agreed to [`mpa::Extensions::READ_V2`]; on any other
    /// connection it completes with [`WcStatus::LocalQpOperation`] and nothing is sent.
    ReadSgl {
        /// The peer's source buffer.
        src: RemoteBuf,
        /// The local sink: at least `src.len` octets, written with local-write access.
        dst: Sgl,
    },
    /// Immediate Data (RFC 7306, opcode 0x8, or 0x9 with [`SendFlags::SOLICITED`]).
    Immediate {
        /// The 8 octets delivered in the peer's receive completion.
        data: u64,
    },
    /// Atomic Fetch-and-Add (RFC 7306, AOpCode 0): the original value is written to
    /// `result` (8 octets, little-endian) and reported in the completion.
    FetchAdd {
        /// The peer's 8-octet, 8-aligned target.
        dst: RemoteBuf,
        /// The addend.
        add: u64,
        /// Field boundaries for masked multi-field adds; 0 for one 64-bit add.
        mask: u64,
        /// Local 8-octet buffer for the original value.
        result: Sge,
    },
    /// Atomic Compare-and-Swap (RFC 7306, AOpCode 2), masked.
    CmpSwap {
        /// The peer's 8-octet, 8-aligned target.
        dst: RemoteBuf,
        /// Value compared with the target under `compare_mask`.
        compare: u64,
        /// Bits that take part in the comparison (all ones for a plain compare).
        compare_mask: u64,
        /// Value swapped in under `swap_mask`.
        swap: u64,
        /// Bits that are swapped (all ones for a plain swap).
        swap_mask: u64,
        /// Local 8-octet buffer for the original value.
        result: Sge,
    },
    /// Local Invalidate: makes `stag` (a region or window of this side) unusable until it
    /// is registered or bound again. Nothing goes on the wire.
    LocalInvalidate {
        /// The STag to invalidate.
        stag: STag,
    },
    /// Fast registration of a region. Nothing goes on the wire.
    FastRegister(FastReg),
    /// Binds a type 2 memory window to this queue pair. Nothing goes on the wire.
    Bind(Bind),
    /// Seed 001's combined register-and-send: fast-registers `reg` and then sends `data`
    /// (a Send, opcode 0x3), as one request with one completion (opcode
    /// [`WcOpcode::Send`]). The message usually advertises the new STag; the peer gives it
    /// back with Send with Invalidate, which invalidates it (the seed's deregistration by
    /// an incoming message). A registration that fails sends nothing and is a local
    /// failure of the request.
    RegisterSend {
        /// The fast registration done first.
        reg: FastReg,
        /// The message.
        data: Payload,
    },
    /// Delay (seed 004): holds back the requests posted after it on this send queue for
    /// `duration`, to meter what a process puts on the wire; other queue pairs are not
    /// held. It completes when the time has passed. Nothing goes on the wire.
    Delay {
        /// How long later requests wait.
        duration: core::time::Duration,
    },
}

/// A fast registration, posted on the send queue: re-arms a region allocated for fast
/// registration under a new tag instance, tagged offset, length and rights.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct FastReg {
    /// The region's STag with the new tag instance it will answer to.
    pub stag: STag,
    /// Tagged offset of the region's first octet.
    pub to: u64,
    /// Length in octets (at most what the region was allocated with).
    pub len: u64,
    /// Rights granted.
    pub access: Access,
}

/// A memory window bind: exposes `[to, to + len)` of region `mr` under window `mw` with
/// `access` (the region needing `Access::needed_to_bind`). Posted on the send queue it binds a type 2 window
/// to this queue pair.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct Bind {
    /// The window's STag with the new tag instance it will answer to.
    pub mw: STag,
    /// The region the window lies in.
    pub mr: STag,
    /// Tagged offset (in the region's address space) of the window's first octet.
    pub to: u64,
    /// Length in octets.
    pub len: u64,
    /// Rights granted through the window.
    pub access: Access,
    /// One-touch (seed 001): the window serves exactly one inbound RDMA Write message and
    /// invalidates itself once its last segment is placed; a second message through it is
    /// refused with a Terminate.
    pub one_touch: bool,
}

impl SendOp {
    /// Every local STag the request names (gather and scatter lists, Atomic result
    /// buffers, the region a fast registration arms or a window is bound to, the target of
    /// a Local Invalidate); the peer's STags are not local.
    pub fn local_stags(&self) -> impl Iterator<Item = STag> + '_ {
        fn payload(p: &Payload) -> &[Sge] {
            match p {
                Payload::Sgl(sgl) => sgl,
                Payload::Bytes(_) => &[],
            }
        }
        let (list, one): (&[Sge], Option<STag>) = match self {
            Self::Send { data, .. } | Self::Write { data, .. } => (payload(data), None),
            Self::Read { dst, .. } => (core::slice::from_ref(dst), None),
            Self::ReadSgl { dst, .. } => (&dst[..], None),
            Self::FetchAdd { result, .. } | Self::CmpSwap { result, .. } => {
                (core::slice::from_ref(result), None)
            }
            Self::LocalInvalidate { stag } => (&[], Some(*stag)),
            Self::FastRegister(reg) => (&[], Some(reg.stag)),
            Self::Bind(b) => (&[], Some(b.mr)),
            Self::RegisterSend { reg, data } => (payload(data), Some(reg.stag)),
            Self::Immediate { .. } | Self::Delay { .. } => (&[], None),
        };
        list.iter().map(|s| s.stag).chain(one)
    }

    /// Octets of local data this request sends (a Send's or Write's payload; 0 for the
    /// others, whose requests are a few header octets). `u32::MAX` if it does not fit.
    pub fn payload_len(&self) -> u32 {
        match self {
            Self::Send { data, .. }
            | Self::Write { data, .. }
            | Self::RegisterSend { data, .. } => data.len().unwrap_or(u32::MAX),
            _ => 0,
        }
    }

    /// The opcode its completion reports.
    pub fn wc_opcode(&self) -> WcOpcode {
        match self {
            Self::Send { .. } | Self::RegisterSend { .. } => WcOpcode::Send,
            Self::Write { .. } => WcOpcode::Write,
            Self::Read { .. } | Self::ReadSgl { .. } => WcOpcode::Read,
            Self::Immediate { .. } => WcOpcode::Immediate,
            Self::FetchAdd { .. } => WcOpcode::FetchAdd,
            Self::CmpSwap { .. } => WcOpcode::CmpSwap,
            Self::LocalInvalidate { .. } => WcOpcode::LocalInvalidate,
            Self::FastRegister(_) => WcOpcode::FastRegister,
            Self::Bind(_) => WcOpcode::Bind,
            Self::Delay { .. } => WcOpcode::Delay,
        }
    }
}

/// A send-queue work request.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SendWr {
    /// Echoed in the completion.
    pub wr_id: WrId,
    /// What to do.
    pub op: SendOp,
    /// Signaling, solicited event, fence.
    pub flags: SendFlags,
}

/// A receive-queue work request: a scatter list that takes one incoming Send or Immediate
/// Data message.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct RecvWr {
    /// Echoed in the completion.
    pub wr_id: WrId,
    /// Where the message is placed, in order; written with local-write access.
    pub sgl: Sgl,
}

/// Which queue a completion belongs to.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum Queue {
    /// The send queue.
    Send,
    /// The receive queue.
    Recv,
}

/// The operation a completion reports.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[non_exhaustive]
pub enum WcOpcode {
    /// A Send (any variant) left this side.
    Send,
    /// An RDMA Write left this side.
    Write,
    /// An RDMA Read finished: its data was placed locally.
    Read,
    /// Immediate Data left this side.
    Immediate,
    /// An Atomic Fetch-and-Add finished.
    FetchAdd,
    /// An Atomic Compare-and-Swap finished.
    CmpSwap,
    /// A Local Invalidate finished.
    LocalInvalidate,
    /// A fast registration finished.
    FastRegister,
    /// A memory window bind finished.
    Bind,
    /// A Delay's time passed.
    Delay,
    /// A Send (any variant) arrived.
    Recv,
    /// Immediate Data arrived (the value is in [`Completion::immediate`]).
    RecvImmediate,
}

/// The status of a completion.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[non_exhaustive]
pub enum WcStatus {
    /// The request finished.
    Success,
    /// A local length rule was broken (for example a Read sink shorter than the source, or
    /// a message longer than 2^32 - 1).
    LocalLength,
    /// Local memory named by the request failed its checks (STag, bounds or rights).
    LocalProtection,
    /// The request is not valid on this queue pair (for example an unsupported operation).
    LocalQpOperation,
    /// The queue pair entered the Error state before the request finished.
    Flushed,
    /// The peer's Terminate reported a protection error for this stream.
    RemoteAccess,
    /// The peer's Terminate reported an operation or catastrophic error.
    RemoteOperation,
    /// The peer's response did not match the request (wrong length or sink).
    RemoteInvalidRequest,
}

/// A work completion.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[non_exhaustive]
pub struct Completion {
    /// The work request's identifier.
    pub wr_id: WrId,
    /// Send or receive queue.
    pub queue: Queue,
    /// What finished.
    pub opcode: WcOpcode,
    /// How it finished.
    pub status: WcStatus,
    /// Octets transferred: the message length of a receive, the length of a Read, 8 for
    /// atomics, the payload length of a Send or Write.
    pub byte_len: u32,
    /// The local STag the peer invalidated with Send with Invalidate.
    pub invalidated: Option<STag>,
    /// The peer asked for a solicited event (Send with SE variants, Immediate Data with SE).
    pub solicited: bool,
    /// Immediate Data received: the 8 octets of RFC 7306 Immediate Data (opcode
    /// [`WcOpcode::RecvImmediate`]), or the 32-bit value of a Send with Immediate Data
    /// (opcode [`WcOpcode::Recv`], the value in the low 32 bits).
    pub immediate: Option<u64>,
    /// The original remote value returned by an Atomic.
    pub atomic_orig: Option<u64>,
    /// The Terminate that caused an error status, when one was sent or received.
    pub term: Option<TermCode>,
    /// Through a local daemon with the push path (seed 000): the request was pushed, the
    /// daemon discarded the pushed copy, and it ran from the send queue instead.
    pub push_discarded: bool,
    /// A send-queue completion's request flags as posted ([`SendFlags::SIGNALED`] says
    /// whether it asked for this completion: a stream that reports every request, see
    /// [`Stream::set_complete_every_send`](crate::Stream::set_complete_every_send), also
    /// reports those that did not); none for a receive.
    pub flags: SendFlags,
}

impl Completion {
    /// A completion with no length, flags or extras (the engine fills in what applies).
    pub fn new(wr_id: WrId, queue: Queue, opcode: WcOpcode, status: WcStatus) -> Self {
        Self {
            wr_id,
            queue,
            opcode,
            status,
            byte_len: 0,
            invalidated: None,
            solicited: false,
            immediate: None,
            atomic_orig: None,
            term: None,
            push_discarded: false,
            flags: SendFlags::NONE,
        }
    }

    /// True for [`WcStatus::Success`].
    pub fn is_ok(&self) -> bool {
        self.status == WcStatus::Success
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remote_buf_encoding_is_stable() {
        let r = RemoteBuf {
            stag: STag::from_u32(0x1122_3344),
            to: 0x0102_0304_0506_0708,
            len: 0xa0b0_c0d0,
        };
        let b = r.encode();
        assert_eq!(
            b,
            [
                0x11, 0x22, 0x33, 0x44, 1, 2, 3, 4, 5, 6, 7, 8, 0xa0, 0xb0, 0xc0, 0xd0
            ]
        );
        assert_eq!(RemoteBuf::decode(&b), Some(r));
        assert_eq!(RemoteBuf::decode(&b[..15]), None);
        let s = r.slice(0x10, 0x20);
        assert_eq!((s.to, s.len), (0x0102_0304_0506_0718, 0x20));
        assert_eq!(r.slice(u32::MAX, 5).len, 0);
    }
}
