//! Work queue entries in the rings: send ([`SQE_SIZE`] octets), receive ([`RQE_SIZE`]) and
//! completion ([`CQE_SIZE`]) entries, fixed little-endian layouts.
//!
//! Send queue entry:
//!
//! ```text
//! 0   u8   opcode: 1 Send, 2 Write, 3 Read, 4 Immediate, 5 FetchAdd, 6 CmpSwap,
//!          7 LocalInvalidate, 8 FastRegister, 9 Bind, 10 Delay, 11 RegisterSend,
//!          12 ReadSgl (Read V2 into the gather list of the body)
//! 1   u8   flags: 0x01 signaled, 0x02 solicited, 0x04 fence, 0x08 invalidate STag present,
//!          0x10 pushed (a twin message went to the push region), 0x20 one-touch (Bind),
//!          0x40 immediate value present (Send)
//! 2   u8   payload: 0 none, 1 inline (in the body), 2 gather list (in the body), 3 staged
//! 3   u8   gather entries in the body (payload 2; 1 for a Read's sink or an Atomic's
//!          result)
//! 4   u32  payload length (inline or staged)
//! 8   u64  work request id
//! 16  u32  STag: remote (Write, Read, Atomics), to invalidate (Send, LocalInvalidate),
//!          the region (FastRegister), the window (Bind)
//! 20  u32  the region's STag (Bind, RegisterSend)
//! 24  u64  tagged offset: remote (Write, Read, Atomics), FastRegister's, Bind's,
//!          RegisterSend's
//! 32  u32  remote length (Write, Read, Atomics)
//! 36  u32  access (FastRegister, Bind, RegisterSend)
//! 40  u64  a: add, compare, length (FastRegister, Bind), immediate data (Immediate; a
//!          Send's 32-bit value in the low half), nanoseconds (Delay)
//! 48  u64  b: add mask, compare mask, length (RegisterSend)
//! 56  u64  c: swap
//! 64  u64  d: swap mask
//! 72  u32  staged offset (payload 3)
//! 76  20   zero
//! 96  160  body: inline payload, or gather entries of 16 octets (STag u32, length u32,
//!          tagged offset u64)
//! ```
//!
//! Receive queue entry: `0 u64 wr_id, 8 u8 entries, 9 7 zero, 16 ..` up to 15 scatter
//! entries. Completion entry: see [`encode_cqe`].

use bytes::Bytes;
use rdmap::Bind;
use rdmap::{
    Access, Completion, FastReg, Payload, Queue, RecvWr, RemoteBuf, STag, SendFlags, SendOp,
    SendWr, Sge, Sgl, TermCode, WcOpcode, WcStatus,
};

use crate::codec::Malformed;
pub use crate::qpseg::{CQE_SIZE, RQE_SIZE, SQE_SIZE};

const BODY: usize = 96;
/// The longest payload carried inline in a send queue entry.
pub const INLINE_MAX: usize = SQE_SIZE - BODY;
/// The most gather entries of a send queue entry.
pub const SQ_SGES: usize = INLINE_MAX / 16;
/// The most scatter entries of a receive queue entry.
pub const RQ_SGES: usize = (RQE_SIZE - 16) / 16;

const F_SIGNALED: u8 = 0x01;
const F_SOLICITED: u8 = 0x02;
const F_FENCE: u8 = 0x04;
const F_INVALIDATE: u8 = 0x08;
const F_ONE_TOUCH: u8 = 0x20;
const F_IMMEDIATE: u8 = 0x40;
/// The entry's twin message was pushed (seed 000's indication 110).
pub const F_PUSHED: u8 = 0x10;

const P_INLINE: u8 = 1;
const P_SGL: u8 = 2;
const P_STAGED: u8 = 3;

/// Why a work request does not fit an entry.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum EncodeError {
    /// More gather or scatter entries than an entry holds.
    TooManyEntries {
        /// How many the entry holds.
        max: usize,
    },
    /// The staging area has no room for the payload now.
    NoStagingRoom,
}

fn le32(e: &mut [u8], at: usize, v: u32) {
    e[at..at + 4].copy_from_slice(&v.to_le_bytes());
}
fn le64(e: &mut [u8], at: usize, v: u64) {
    e[at..at + 8].copy_from_slice(&v.to_le_bytes());
}
fn get32(e: &[u8], at: usize) -> u32 {
    let mut b = [0u8; 4];
    b.copy_from_slice(&e[at..at + 4]);
    u32::from_le_bytes(b)
}
fn get64(e: &[u8], at: usize) -> u64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(&e[at..at + 8]);
    u64::from_le_bytes(b)
}

fn put_sges(e: &mut [u8], at: usize, sges: &[Sge]) {
    for (i, s) in sges.iter().enumerate() {
        let o = at + i * 16;
        le32(e, o, s.stag.to_u32());
        le32(e, o + 4, s.len);
        le64(e, o + 8, s.to);
    }
}

fn get_sges(e: &[u8], at: usize, n: usize) -> Sgl {
    let mut sgl = Sgl::new();
    for i in 0..n {
        let o = at + i * 16;
        sgl.push(Sge {
            stag: STag::from_u32(get32(e, o)),
            len: get32(e, o + 4),
            to: get64(e, o + 8),
        });
    }
    sgl
}

fn put_remote(e: &mut [u8], r: &RemoteBuf) {
    le32(e, 16, r.stag.to_u32());
    le64(e, 24, r.to);
    le32(e, 32, r.len);
}

fn get_remote(e: &[u8]) -> RemoteBuf {
    RemoteBuf {
        stag: STag::from_u32(get32(e, 16)),
        to: get64(e, 24),
        len: get32(e, 32),
    }
}

/// Encodes a send work request. A `Bytes` payload longer than [`INLINE_MAX`] is handed to
/// `stage`, which copies it into the staging area and returns its offset (or `None` when
/// there is no room).
pub fn encode_sqe(
    wr: &SendWr,
    stage: &mut dyn FnMut(&[u8]) -> Option<u32>,
) -> Result<[u8; SQE_SIZE], EncodeError> {
    let mut e = [0u8; SQE_SIZE];
    let mut flags = 0u8;
    for (f, bit) in [
        (SendFlags::SIGNALED, F_SIGNALED),
        (SendFlags::SOLICITED, F_SOLICITED),
        (SendFlags::FENCE, F_FENCE),
    ] {
        if wr.flags.contains(f) {
            flags |= bit;
        }
    }
    le64(&mut e, 8, wr.wr_id);
    let mut payload = |e: &mut [u8; SQE_SIZE], data: &Payload| -> Result<(), EncodeError> {
        match data {
            Payload::Bytes(b) if b.len() <= INLINE_MAX => {
                e[2] = P_INLINE;
                le32(e, 4, b.len() as u32);
                e[BODY..BODY + b.len()].copy_from_slice(b);
            }
            Payload::Bytes(b) => {
                let len = u32::try_from(b.len()).map_err(|_| EncodeError::NoStagingRoom)?;
                let at = stage(b).ok_or(EncodeError::NoStagingRoom)?;
                e[2] = P_STAGED;
                le32(e, 4, len);
                le32(e, 72, at);
            }
            Payload::Sgl(sgl) => {
                if sgl.len() > SQ_SGES {
                    return Err(EncodeError::TooManyEntries { max: SQ_SGES });
                }
                e[2] = P_SGL;
                e[3] = sgl.len() as u8;
                put_sges(e, BODY, sgl);
            }
        }
        Ok(())
    };
    let opcode = match &wr.op {
        SendOp::Send {
            data,
            invalidate,
            immediate,
        } => {
            payload(&mut e, data)?;
            if let Some(s) = invalidate {
                flags |= F_INVALIDATE;
                le32(&mut e, 16, s.to_u32());
            }
            if let Some(imm) = immediate {
                flags |= F_IMMEDIATE;
                le64(&mut e, 40, u64::from(*imm));
            }
            1
        }
        SendOp::Write { data, dst } => {
            payload(&mut e, data)?;
            put_remote(&mut e, dst);
            2
        }
        SendOp::Read { src, dst } => {
            put_remote(&mut e, src);
            e[3] = 1;
            put_sges(&mut e, BODY, &[*dst]);
            3
        }
        SendOp::Immediate { data } => {
            le64(&mut e, 40, *data);
            4
        }
        SendOp::FetchAdd {
            dst,
            add,
            mask,
            result,
        } => {
            put_remote(&mut e, dst);
            le64(&mut e, 40, *add);
            le64(&mut e, 48, *mask);
            e[3] = 1;
            put_sges(&mut e, BODY, &[*result]);
            5
        }
        SendOp::CmpSwap {
            dst,
            compare,
            compare_mask,
            swap,
            swap_mask,
            result,
        } => {
            put_remote(&mut e, dst);
            le64(&mut e, 40, *compare);
            le64(&mut e, 48, *compare_mask);
            le64(&mut e, 56, *swap);
            le64(&mut e, 64, *swap_mask);
            e[3] = 1;
            put_sges(&mut e, BODY, &[*result]);
            6
        }
        SendOp::LocalInvalidate { stag } => {
            le32(&mut e, 16, stag.to_u32());
            7
        }
        SendOp::FastRegister(f) => {
            le32(&mut e, 16, f.stag.to_u32());
            le64(&mut e, 24, f.to);
            le32(&mut e, 36, u32::from(f.access.bits()));
            le64(&mut e, 40, f.len);
            8
        }
        SendOp::Bind(b) => {
            if b.one_touch {
                flags |= F_ONE_TOUCH;
            }
            le32(&mut e, 16, b.mw.to_u32());
            le32(&mut e, 20, b.mr.to_u32());
            le64(&mut e, 24, b.to);
            le32(&mut e, 36, u32::from(b.access.bits()));
            le64(&mut e, 40, b.len);
            9
        }
        SendOp::ReadSgl { src, dst } => {
            if dst.len() > SQ_SGES {
                return Err(EncodeError::TooManyEntries { max: SQ_SGES });
            }
            put_remote(&mut e, src);
            e[2] = P_SGL;
            e[3] = dst.len() as u8;
            put_sges(&mut e, BODY, dst);
            12
        }
        SendOp::RegisterSend { reg, data } => {
            payload(&mut e, data)?;
            le32(&mut e, 20, reg.stag.to_u32());
            le64(&mut e, 24, reg.to);
            le32(&mut e, 36, u32::from(reg.access.bits()));
            le64(&mut e, 48, reg.len);
            11
        }
        SendOp::Delay { duration } => {
            le64(
                &mut e,
                40,
                u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX),
            );
            10
        }
    };
    e[0] = opcode;
    e[1] = flags;
    Ok(e)
}

/// Replaces the payload of an encoded Send or Write entry by `data`, inline: the pushed
/// message of a request whose own entry names a gather list. False (and `e` unchanged)
/// for another operation or more than [`INLINE_MAX`] octets.
pub fn set_inline(e: &mut [u8; SQE_SIZE], data: &[u8]) -> bool {
    if !matches!(e[0], 1 | 2) || data.len() > INLINE_MAX {
        return false;
    }
    e[2] = P_INLINE;
    e[3] = 0;
    le32(e, 4, data.len() as u32);
    e[BODY..].fill(0);
    e[BODY..BODY + data.len()].copy_from_slice(data);
    true
}

/// True if the entry says its twin message was pushed.
pub fn sqe_pushed(e: &[u8; SQE_SIZE]) -> bool {
    e[1] & F_PUSHED != 0
}

/// Marks an encoded entry as having a pushed twin.
pub fn mark_pushed(e: &mut [u8; SQE_SIZE]) {
    e[1] |= F_PUSHED;
}

/// Where the octets of an owned (`Bytes`) payload are.
#[derive(Copy, Clone, Debug)]
pub enum Data<'a> {
    /// In the entry.
    Inline(&'a [u8]),
    /// In the staging area.
    Staged {
        /// Offset in the area.
        offset: u32,
        /// Length.
        len: u32,
    },
}

/// An `own` for [`decode_sqe`] that copies inline payloads into a fresh `Bytes` and takes
/// no staged ones (one allocation per payload: for tests and the occasional entry).
pub fn copy_inline(d: Data<'_>) -> Option<Bytes> {
    match d {
        Data::Inline(b) => Some(Bytes::copy_from_slice(b)),
        Data::Staged { .. } => None,
    }
}

/// Decodes a send queue entry copied out of the ring. `own` makes `Bytes` of an owned
/// payload's octets (`None` if it cannot: a staged range outside the area). Every field is
/// checked; nothing in `e` is trusted.
pub fn decode_sqe(
    e: &[u8; SQE_SIZE],
    own: &mut dyn FnMut(Data<'_>) -> Option<Bytes>,
) -> Result<SendWr, Malformed> {
    let flags_bits = e[1];
    let known = F_SIGNALED | F_SOLICITED | F_FENCE | F_INVALIDATE | F_PUSHED | F_ONE_TOUCH;
    if flags_bits & !(known | F_IMMEDIATE) != 0 {
        return Err(Malformed("send entry flags"));
    }
    let mut flags = SendFlags::NONE;
    for (f, bit) in [
        (SendFlags::SIGNALED, F_SIGNALED),
        (SendFlags::SOLICITED, F_SOLICITED),
        (SendFlags::FENCE, F_FENCE),
    ] {
        if flags_bits & bit != 0 {
            flags = flags | f;
        }
    }
    let nsge = usize::from(e[3]);
    let len = get32(e, 4);
    let mut payload = || -> Result<Payload, Malformed> {
        match e[2] {
            P_INLINE if len as usize <= INLINE_MAX => {
                own(Data::Inline(&e[BODY..BODY + len as usize]))
                    .map(Payload::Bytes)
                    .ok_or(Malformed("inline payload"))
            }
            P_STAGED => own(Data::Staged {
                offset: get32(e, 72),
                len,
            })
            .map(Payload::Bytes)
            .ok_or(Malformed("staged range")),
            P_SGL if nsge <= SQ_SGES => Ok(Payload::Sgl(get_sges(e, BODY, nsge))),
            _ => Err(Malformed("send entry payload")),
        }
    };
    let one_sge = || -> Result<Sge, Malformed> {
        if nsge != 1 {
            return Err(Malformed("send entry sink"));
        }
        Ok(get_sges(e, BODY, 1)[0])
    };
    let access = || Access::from_bits_truncate(get32(e, 36) as u8);
    let op = match e[0] {
        1 => SendOp::Send {
            data: payload()?,
            invalidate: (flags_bits & F_INVALIDATE != 0).then(|| STag::from_u32(get32(e, 16))),
            immediate: (flags_bits & F_IMMEDIATE != 0).then(|| get32(e, 40)),
        },
        2 => SendOp::Write {
            data: payload()?,
            dst: get_remote(e),
        },
        3 => SendOp::Read {
            src: get_remote(e),
            dst: one_sge()?,
        },
        4 => SendOp::Immediate { data: get64(e, 40) },
        5 => SendOp::FetchAdd {
            dst: get_remote(e),
            add: get64(e, 40),
            mask: get64(e, 48),
            result: one_sge()?,
        },
        6 => SendOp::CmpSwap {
            dst: get_remote(e),
            compare: get64(e, 40),
            compare_mask: get64(e, 48),
            swap: get64(e, 56),
            swap_mask: get64(e, 64),
            result: one_sge()?,
        },
        7 => SendOp::LocalInvalidate {
            stag: STag::from_u32(get32(e, 16)),
        },
        8 => SendOp::FastRegister(FastReg {
            stag: STag::from_u32(get32(e, 16)),
            to: get64(e, 24),
            len: get64(e, 40),
            access: access(),
        }),
        9 => SendOp::Bind(Bind {
            mw: STag::from_u32(get32(e, 16)),
            mr: STag::from_u32(get32(e, 20)),
            to: get64(e, 24),
            len: get64(e, 40),
            access: access(),
            one_touch: flags_bits & F_ONE_TOUCH != 0,
        }),
        10 => SendOp::Delay {
            duration: std::time::Duration::from_nanos(get64(e, 40)),
        },
        11 => SendOp::RegisterSend {
            reg: FastReg {
                stag: STag::from_u32(get32(e, 20)),
                to: get64(e, 24),
                len: get64(e, 48),
                access: access(),
            },
            data: payload()?,
        },
        12 => match payload()? {
            Payload::Sgl(dst) => SendOp::ReadSgl {
                src: get_remote(e),
                dst,
            },
            Payload::Bytes(_) => return Err(Malformed("read sink")),
        },
        _ => return Err(Malformed("send entry opcode")),
    };
    Ok(SendWr {
        wr_id: get64(e, 8),
        op,
        flags,
    })
}

/// Encodes a receive work request.
pub fn encode_rqe(wr: &RecvWr) -> Result<[u8; RQE_SIZE], EncodeError> {
    if wr.sgl.len() > RQ_SGES {
        return Err(EncodeError::TooManyEntries { max: RQ_SGES });
    }
    let mut e = [0u8; RQE_SIZE];
    le64(&mut e, 0, wr.wr_id);
    e[8] = wr.sgl.len() as u8;
    put_sges(&mut e, 16, &wr.sgl);
    Ok(e)
}

/// Decodes a receive queue entry copied out of the ring.
pub fn decode_rqe(e: &[u8; RQE_SIZE]) -> Result<RecvWr, Malformed> {
    let n = usize::from(e[8]);
    if n > RQ_SGES {
        return Err(Malformed("receive entry count"));
    }
    Ok(RecvWr {
        wr_id: get64(e, 0),
        sgl: get_sges(e, 16, n),
    })
}

const OPCODES: [WcOpcode; 12] = [
    WcOpcode::Send,
    WcOpcode::Write,
    WcOpcode::Read,
    WcOpcode::Immediate,
    WcOpcode::FetchAdd,
    WcOpcode::CmpSwap,
    WcOpcode::LocalInvalidate,
    WcOpcode::FastRegister,
    WcOpcode::Bind,
    WcOpcode::Recv,
    WcOpcode::RecvImmediate,
    WcOpcode::Delay,
];

const STATUSES: [WcStatus; 8] = [
    WcStatus::Success,
    WcStatus::LocalLength,
    WcStatus::LocalProtection,
    WcStatus::LocalQpOperation,
    WcStatus::Flushed,
    WcStatus::RemoteAccess,
    WcStatus::RemoteOperation,
    WcStatus::RemoteInvalidRequest,
];

/// Encodes a completion:
///
/// ```text
/// 0   u64  work request id
/// 8   u8   queue: 0 send, 1 receive
/// 9   u8   opcode: index into Send, Write, Read, Immediate, FetchAdd, CmpSwap,
///          LocalInvalidate, FastRegister, Bind, Recv, RecvImmediate
/// 10  u8   status: index into Success, LocalLength, LocalProtection, LocalQpOperation,
///          Flushed, RemoteAccess, RemoteOperation, RemoteInvalidRequest
/// 11  u8   flags: 0x01 invalidated, 0x02 solicited, 0x04 immediate, 0x08 atomic
///          original, 0x10 Terminate code, 0x20 push discarded
/// 12  u32  octets
/// 16  u32  the invalidated STag
/// 20  2    the Terminate code's two wire octets
/// 24  u64  immediate data
/// 32  u64  the Atomic's original value
/// 40  24   zero
/// ```
pub fn encode_cqe(wc: &Completion) -> [u8; CQE_SIZE] {
    let mut e = [0u8; CQE_SIZE];
    le64(&mut e, 0, wc.wr_id);
    e[8] = u8::from(wc.queue == Queue::Recv);
    e[9] = OPCODES.iter().position(|o| *o == wc.opcode).unwrap_or(0) as u8;
    e[10] = STATUSES
        .iter()
        .position(|s| *s == wc.status)
        .unwrap_or(STATUSES.len() - 1) as u8;
    let mut flags = 0u8;
    if let Some(s) = wc.invalidated {
        flags |= 0x01;
        le32(&mut e, 16, s.to_u32());
    }
    if wc.solicited {
        flags |= 0x02;
    }
    if let Some(v) = wc.immediate {
        flags |= 0x04;
        le64(&mut e, 24, v);
    }
    if let Some(v) = wc.atomic_orig {
        flags |= 0x08;
        le64(&mut e, 32, v);
    }
    if let Some(t) = wc.term {
        flags |= 0x10;
        e[20..22].copy_from_slice(&t.to_wire());
    }
    if wc.push_discarded {
        flags |= 0x20;
    }
    e[11] = flags;
    le32(&mut e, 12, wc.byte_len);
    e
}

/// Decodes a completion copied out of the ring.
pub fn decode_cqe(e: &[u8; CQE_SIZE]) -> Result<Completion, Malformed> {
    let queue = match e[8] {
        0 => Queue::Send,
        1 => Queue::Recv,
        _ => return Err(Malformed("completion queue")),
    };
    let opcode = *OPCODES
        .get(usize::from(e[9]))
        .ok_or(Malformed("completion opcode"))?;
    let status = *STATUSES
        .get(usize::from(e[10]))
        .ok_or(Malformed("completion status"))?;
    let flags = e[11];
    let mut wc = Completion::new(get64(e, 0), queue, opcode, status);
    wc.byte_len = get32(e, 12);
    wc.invalidated = (flags & 0x01 != 0).then(|| STag::from_u32(get32(e, 16)));
    wc.solicited = flags & 0x02 != 0;
    wc.immediate = (flags & 0x04 != 0).then(|| get64(e, 24));
    wc.atomic_orig = (flags & 0x08 != 0).then(|| get64(e, 32));
    wc.term = (flags & 0x10 != 0).then(|| TermCode::from_wire([e[20], e[21]]));
    wc.push_discarded = flags & 0x20 != 0;
    Ok(wc)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn no_stage(_: &[u8]) -> Option<u32> {
        None
    }

    fn round_trip(wr: SendWr) {
        let mut staged = Vec::new();
        let e = encode_sqe(&wr, &mut |b| {
            staged = b.to_vec();
            Some(64)
        })
        .unwrap();
        let back = decode_sqe(&e, &mut |d| match d {
            Data::Staged { offset, len } => {
                (offset == 64 && len as usize == staged.len()).then(|| Bytes::from(staged.clone()))
            }
            inline => copy_inline(inline),
        })
        .unwrap();
        assert_eq!(back, wr);
    }

    fn sge(n: u32) -> Sge {
        Sge {
            stag: STag::from_u32(0x100 + n),
            to: u64::from(n) << 32,
            len: n * 10,
        }
    }

    fn remote() -> RemoteBuf {
        RemoteBuf {
            stag: STag::from_u32(0xabcd_ef01),
            to: 0x1122_3344_5566_7788,
            len: 65536,
        }
    }

    #[test]
    fn a_write_with_a_gather_list_is_laid_out_as_documented() {
        let wr = SendWr {
            wr_id: 0x0102_0304_0506_0708,
            op: SendOp::Write {
                data: Payload::Sgl([sge(1), sge(2)].into()),
                dst: remote(),
            },
            flags: SendFlags::SIGNALED | SendFlags::FENCE,
        };
        let e = encode_sqe(&wr, &mut no_stage).unwrap();
        #[rustfmt::skip]
        let head: &[u8] = &[
            2, 0x05, 2, 2, 0, 0, 0, 0,
            8, 7, 6, 5, 4, 3, 2, 1,
            0x01, 0xef, 0xcd, 0xab, 0, 0, 0, 0,
            0x88, 0x77, 0x66, 0x55, 0x44, 0x33, 0x22, 0x11,
            0, 0, 1, 0,
        ];
        assert_eq!(&e[..36], head);
        #[rustfmt::skip]
        let body: &[u8] = &[
            0x01, 0x01, 0, 0,  10, 0, 0, 0,  0, 0, 0, 0, 1, 0, 0, 0,
            0x02, 0x01, 0, 0,  20, 0, 0, 0,  0, 0, 0, 0, 2, 0, 0, 0,
        ];
        assert_eq!(&e[BODY..BODY + 32], body);
        assert!(e[36..BODY].iter().all(|&b| b == 0));
        round_trip(wr);
    }

    #[test]
    fn every_operation_round_trips() {
        let inline = Payload::Bytes(Bytes::from_static(b"hello"));
        let big = Payload::Bytes(Bytes::from(vec![7u8; INLINE_MAX + 1]));
        let ops = [
            SendOp::Send {
                data: inline,
                invalidate: Some(STag::from_u32(0x4401)),
                immediate: Some(0x8001_0203),
            },
            SendOp::Send {
                data: big.clone(),
                invalidate: None,
                immediate: None,
            },
            SendOp::Write {
                data: Payload::Bytes(Bytes::from(vec![1u8; INLINE_MAX])),
                dst: remote(),
            },
            SendOp::Write {
                data: big,
                dst: remote(),
            },
            SendOp::Read {
                src: remote(),
                dst: sge(3),
            },
            SendOp::Immediate { data: 0xfeed },
            SendOp::FetchAdd {
                dst: remote(),
                add: 5,
                mask: 0,
                result: sge(4),
            },
            SendOp::CmpSwap {
                dst: remote(),
                compare: 1,
                compare_mask: 2,
                swap: 3,
                swap_mask: 4,
                result: sge(5),
            },
            SendOp::LocalInvalidate {
                stag: STag::from_u32(0x77),
            },
            SendOp::FastRegister(FastReg {
                stag: STag::from_u32(0x301),
                to: 4096,
                len: 8192,
                access: Access::REMOTE_WRITE | Access::LOCAL_READ,
            }),
            SendOp::Bind(Bind {
                mw: STag::from_u32(0x501),
                mr: STag::from_u32(0x601),
                to: 10,
                len: 20,
                access: Access::REMOTE_READ,
                one_touch: true,
            }),
            SendOp::Delay {
                duration: std::time::Duration::from_micros(1500),
            },
            SendOp::ReadSgl {
                src: RemoteBuf {
                    stag: STag::from_u32(0x801),
                    to: 7,
                    len: 300,
                },
                dst: [
                    Sge {
                        stag: STag::from_u32(0x901),
                        to: 0,
                        len: 100,
                    },
                    Sge {
                        stag: STag::from_u32(0x902),
                        to: 50,
                        len: 200,
                    },
                ]
                .into(),
            },
            SendOp::RegisterSend {
                reg: FastReg {
                    stag: STag::from_u32(0x701),
                    to: 0x1000,
                    len: 4096,
                    access: Access::REMOTE_WRITE,
                },
                data: Payload::Bytes(Bytes::from_static(b"advert")),
            },
            SendOp::Send {
                data: Payload::Sgl(Sgl::new()),
                invalidate: None,
                immediate: None,
            },
        ];
        for op in ops {
            round_trip(SendWr {
                wr_id: 9,
                op,
                flags: SendFlags::SOLICITED,
            });
        }
    }

    #[test]
    fn entries_that_do_not_fit_are_refused_and_garbage_is_malformed() {
        let many: Sgl = (0..=SQ_SGES as u32).map(sge).collect::<Vec<_>>().into();
        let wr = SendWr {
            wr_id: 1,
            op: SendOp::Send {
                data: Payload::Sgl(many),
                invalidate: None,
                immediate: None,
            },
            flags: SendFlags::NONE,
        };
        assert_eq!(
            encode_sqe(&wr, &mut no_stage),
            Err(EncodeError::TooManyEntries { max: SQ_SGES })
        );
        let wr = SendWr {
            wr_id: 1,
            op: SendOp::Send {
                data: Payload::Bytes(Bytes::from(vec![0; 4096])),
                invalidate: None,
                immediate: None,
            },
            flags: SendFlags::NONE,
        };
        assert_eq!(
            encode_sqe(&wr, &mut no_stage),
            Err(EncodeError::NoStagingRoom)
        );
        let rwr = RecvWr {
            wr_id: 1,
            sgl: (0..=RQ_SGES as u32).map(sge).collect::<Vec<_>>().into(),
        };
        assert!(encode_rqe(&rwr).is_err());

        // Every single-octet corruption of the header either decodes or is Malformed;
        // none panics.
        let good = encode_sqe(
            &SendWr {
                wr_id: 1,
                op: SendOp::Write {
                    data: Payload::Sgl([sge(1)].into()),
                    dst: remote(),
                },
                flags: SendFlags::NONE,
            },
            &mut no_stage,
        )
        .unwrap();
        for at in 0..BODY {
            for v in [0u8, 1, 0x7f, 0xff] {
                let mut e = good;
                e[at] = v;
                let _ = decode_sqe(&e, &mut copy_inline);
            }
        }
        let mut e = good;
        e[0] = 13;
        assert_eq!(
            decode_sqe(&e, &mut copy_inline),
            Err(Malformed("send entry opcode"))
        );
        let mut e = good;
        e[2] = P_INLINE;
        e[4..8].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(decode_sqe(&e, &mut copy_inline).is_err());
        let mut e = good;
        e[3] = 200;
        assert!(decode_sqe(&e, &mut copy_inline).is_err());
        let mut e = [0u8; RQE_SIZE];
        e[8] = 16;
        assert!(decode_rqe(&e).is_err());
    }

    #[test]
    fn a_gather_list_entry_becomes_its_inline_message() {
        let wr = SendWr {
            wr_id: 5,
            op: SendOp::Write {
                data: Payload::Sgl([sge(1), sge(2)].into()),
                dst: remote(),
            },
            flags: SendFlags::SIGNALED,
        };
        let mut e = encode_sqe(&wr, &mut no_stage).unwrap();
        assert!(set_inline(&mut e, b"eight oc"));
        let back = decode_sqe(&e, &mut copy_inline).unwrap();
        let want = SendWr {
            op: SendOp::Write {
                data: Payload::Bytes(Bytes::from_static(b"eight oc")),
                dst: remote(),
            },
            ..wr
        };
        assert_eq!(back, want);
        assert!(!set_inline(&mut e, &[0; INLINE_MAX + 1]));
        let mut read = encode_sqe(
            &SendWr {
                wr_id: 1,
                op: SendOp::Read {
                    src: remote(),
                    dst: sge(1),
                },
                flags: SendFlags::NONE,
            },
            &mut no_stage,
        )
        .unwrap();
        assert!(!set_inline(&mut read, b"x"));
    }

    #[test]
    fn completions_round_trip() {
        let rwr = RecvWr {
            wr_id: 3,
            sgl: [sge(1), sge(2), sge(3)].into(),
        };
        assert_eq!(decode_rqe(&encode_rqe(&rwr).unwrap()).unwrap(), rwr);
        let mut wc = Completion::new(42, Queue::Recv, WcOpcode::RecvImmediate, WcStatus::Success);
        wc.byte_len = 8;
        wc.solicited = true;
        wc.immediate = Some(0x1234);
        wc.invalidated = Some(STag::from_u32(0x99));
        let e = encode_cqe(&wc);
        #[rustfmt::skip]
        let head: &[u8] = &[42, 0, 0, 0, 0, 0, 0, 0, 1, 10, 0, 0x07, 8, 0, 0, 0, 0x99, 0, 0, 0];
        assert_eq!(&e[..20], head);
        assert_eq!(decode_cqe(&e).unwrap(), wc);
        let mut wc = Completion::new(1, Queue::Send, WcOpcode::CmpSwap, WcStatus::RemoteAccess);
        wc.atomic_orig = Some(5);
        wc.term = Some(TermCode::from_wire([0x12, 0x03]));
        wc.push_discarded = true;
        assert_eq!(encode_cqe(&wc)[11], 0x38);
        assert_eq!(decode_cqe(&encode_cqe(&wc)).unwrap(), wc);
        let mut bad = encode_cqe(&wc);
        bad[9] = 12;
        assert!(decode_cqe(&bad).is_err());
        bad[9] = 0;
        bad[10] = 8;
        assert!(decode_cqe(&bad).is_err());
        bad[10] = 0;
        bad[8] = 2;
        assert!(decode_cqe(&bad).is_err());
    }
}
