//! Send queue entries: work requests encoded into [`SQE_SIZE`]-octet entries by the
//! library and decoded, checked field by field, by the daemon. The layout, its field
//! names and a view that reads and writes them are in `entry.rs`.

use bytes::Bytes;
use rdmap::{Bind, FastReg, Payload, SendFlags, SendOp, SendWr};

use super::{EncodeError, SQE_SIZE};
use crate::codec::Malformed;

mod entry;

use entry::{
    F_IMMEDIATE, F_INVALIDATE, F_ONE_TOUCH, P_INLINE, P_SGL, REQUEST_FLAGS, SendEntry, op,
};
pub use entry::{F_PUSH_DISCARDED, F_PUSHED, INLINE_MAX, SQ_SGES};

/// Encodes a send work request. A `Bytes` payload longer than [`INLINE_MAX`] is handed to
/// `stage`, which copies it into the staging area and returns its offset (or `None` when
/// there is no room).
///
/// The entry, [`SQE_SIZE`] octets, little-endian:
///
/// | off | size | field |
/// |---|---|---|
/// | 0 | 1 | opcode: 1 Send, 2 Write, 3 Read, 4 Immediate, 5 FetchAdd, 6 CmpSwap, 7 LocalInvalidate, 8 FastRegister, 9 Bind, 10 Delay, 11 RegisterSend, 12 ReadSgl (Read V2 into the gather list of the body) |
/// | 1 | 1 | flags: 0x01 signaled, 0x02 solicited, 0x04 fence, 0x08 invalidate STag present, 0x10 pushed (a twin message went to the push region), 0x20 one-touch (Bind), 0x40 immediate value present (Send), 0x80 push discarded (the library could not write it to its shared socket itself) |
/// | 2 | 1 | payload: 0 none, 1 inline (in the body), 2 gather list (in the body), 3 staged |
/// | 3 | 1 | gather entries in the body (payload 2; 1 for a Read's sink or an Atomic's result) |
/// | 4 | 4 | payload length (inline or staged) |
/// | 8 | 8 | work request id |
/// | 16 | 4 | STag: remote (Write, Read, Atomics), to invalidate (Send, LocalInvalidate), the region (FastRegister), the window (Bind) |
/// | 20 | 4 | the region's STag (Bind, RegisterSend) |
/// | 24 | 8 | tagged offset: remote (Write, Read, Atomics), FastRegister's, Bind's, RegisterSend's |
/// | 32 | 4 | remote length (Write, Read, Atomics) |
/// | 36 | 4 | access (FastRegister, Bind, RegisterSend) |
/// | 40 | 8 | a: add, compare, length (FastRegister, Bind), immediate data (Immediate; a Send's 32-bit value in the low half), nanoseconds (Delay) |
/// | 48 | 8 | b: add mask, compare mask, length (RegisterSend) |
/// | 56 | 8 | c: swap |
/// | 64 | 8 | d: swap mask |
/// | 72 | 4 | staged offset (payload 3) |
/// | 76 | 20 | zero |
/// | 96 | 160 | body: inline payload, or gather entries of 16 octets: STag u32, length u32, tagged offset u64 |
pub fn encode_sqe(
    wr: &SendWr,
    stage: &mut dyn FnMut(&[u8]) -> Option<u32>,
) -> Result<[u8; SQE_SIZE], EncodeError> {
    let mut e = SendEntry::new([0u8; SQE_SIZE]);
    let mut flags = 0u8;
    for (f, bit) in REQUEST_FLAGS {
        if wr.flags.contains(f) {
            flags |= bit;
        }
    }
    e.set_wr_id(wr.wr_id);
    let (opcode, op_flags) = put_op(&mut e, &wr.op, stage)?;
    e.set_opcode(opcode);
    e.set_flags(flags | op_flags);
    Ok(e.into_inner())
}

/// Writes the fields of `op`; returns its opcode and the flags it sets.
fn put_op(
    e: &mut SendEntry<[u8; SQE_SIZE]>,
    op: &SendOp,
    stage: &mut dyn FnMut(&[u8]) -> Option<u32>,
) -> Result<(u8, u8), EncodeError> {
    Ok(match op {
        SendOp::Send {
            data,
            invalidate,
            immediate,
        } => {
            e.set_payload(data, stage)?;
            let mut flags = 0;
            if let Some(s) = invalidate {
                flags |= F_INVALIDATE;
                e.set_stag(*s);
            }
            if let Some(imm) = immediate {
                flags |= F_IMMEDIATE;
                e.set_a(u64::from(*imm));
            }
            (op::SEND, flags)
        }
        SendOp::Write { data, dst } => {
            e.set_payload(data, stage)?;
            e.set_remote(dst);
            (op::WRITE, 0)
        }
        SendOp::Read { src, dst } => {
            e.set_remote(src);
            e.set_sges(&[*dst]);
            (op::READ, 0)
        }
        SendOp::ReadSgl { src, dst } => {
            if dst.len() > SQ_SGES {
                return Err(EncodeError::TooManyEntries { max: SQ_SGES });
            }
            e.set_remote(src);
            e.set_payload_kind(P_SGL);
            e.set_sges(dst);
            (op::READ_SGL, 0)
        }
        SendOp::Immediate { data } => {
            e.set_a(*data);
            (op::IMMEDIATE, 0)
        }
        SendOp::FetchAdd {
            dst,
            add,
            mask,
            result,
        } => {
            e.set_remote(dst);
            e.set_a(*add);
            e.set_b(*mask);
            e.set_sges(&[*result]);
            (op::FETCH_ADD, 0)
        }
        SendOp::CmpSwap {
            dst,
            compare,
            compare_mask,
            swap,
            swap_mask,
            result,
        } => {
            e.set_remote(dst);
            e.set_a(*compare);
            e.set_b(*compare_mask);
            e.set_c(*swap);
            e.set_d(*swap_mask);
            e.set_sges(&[*result]);
            (op::CMP_SWAP, 0)
        }
        SendOp::LocalInvalidate { stag } => {
            e.set_stag(*stag);
            (op::LOCAL_INVALIDATE, 0)
        }
        SendOp::FastRegister(f) => {
            e.set_stag(f.stag);
            e.set_to(f.to);
            e.set_access(f.access);
            e.set_a(f.len);
            (op::FAST_REGISTER, 0)
        }
        SendOp::Bind(b) => {
            e.set_stag(b.mw);
            e.set_region_stag(b.mr);
            e.set_to(b.to);
            e.set_access(b.access);
            e.set_a(b.len);
            (op::BIND, if b.one_touch { F_ONE_TOUCH } else { 0 })
        }
        SendOp::RegisterSend { reg, data } => {
            e.set_payload(data, stage)?;
            e.set_region_stag(reg.stag);
            e.set_to(reg.to);
            e.set_access(reg.access);
            e.set_b(reg.len);
            (op::REGISTER_SEND, 0)
        }
        SendOp::Delay { duration } => {
            e.set_a(u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX));
            (op::DELAY, 0)
        }
    })
}

/// Replaces the payload of an encoded Send or Write entry by `data`, inline: the pushed
/// message of a request whose own entry names a gather list. False (and `e` unchanged)
/// for another operation or more than [`INLINE_MAX`] octets.
pub fn set_inline(e: &mut [u8; SQE_SIZE], data: &[u8]) -> bool {
    let mut e = SendEntry::new(e);
    if !matches!(e.opcode(), op::SEND | op::WRITE) || data.len() > INLINE_MAX {
        return false;
    }
    e.set_payload_kind(P_INLINE);
    e.set_sge_count(0);
    e.set_payload_len(data.len() as u32);
    let body = e.body_mut();
    body.fill(0);
    body[..data.len()].copy_from_slice(data);
    true
}

/// True if the entry has flag `bit`.
fn has_flag(e: &[u8; SQE_SIZE], bit: u8) -> bool {
    SendEntry::new(e).flags() & bit != 0
}

/// Sets flag `bit` of an encoded entry.
fn add_flag(e: &mut [u8; SQE_SIZE], bit: u8) {
    let mut e = SendEntry::new(e);
    let flags = e.flags();
    e.set_flags(flags | bit);
}

/// True if the entry says its twin message was pushed.
pub fn sqe_pushed(e: &[u8; SQE_SIZE]) -> bool {
    has_flag(e, F_PUSHED)
}

/// Marks an encoded entry as having a pushed twin.
pub fn mark_pushed(e: &mut [u8; SQE_SIZE]) {
    add_flag(e, F_PUSHED);
}

/// True if the library could not write the request to its shared socket itself.
pub fn sqe_push_discarded(e: &[u8; SQE_SIZE]) -> bool {
    has_flag(e, F_PUSH_DISCARDED)
}

/// Marks an encoded entry as one the library could not write to its shared socket.
pub fn mark_push_discarded(e: &mut [u8; SQE_SIZE]) {
    add_flag(e, F_PUSH_DISCARDED);
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
    let e = SendEntry::new(e);
    // Every bit of the flags octet has a meaning: none is garbage.
    let flags_bits = e.flags();
    let mut flags = SendFlags::NONE;
    for (f, bit) in REQUEST_FLAGS {
        if flags_bits & bit != 0 {
            flags = flags | f;
        }
    }
    let op = get_op(&e, own)?;
    Ok(SendWr {
        wr_id: e.wr_id(),
        op,
        flags,
    })
}

/// The operation of an entry whose flags are known.
fn get_op(
    e: &SendEntry<&[u8; SQE_SIZE]>,
    own: &mut dyn FnMut(Data<'_>) -> Option<Bytes>,
) -> Result<SendOp, Malformed> {
    let flags = e.flags();
    Ok(match e.opcode() {
        op::SEND => SendOp::Send {
            data: e.payload(own)?,
            invalidate: (flags & F_INVALIDATE != 0).then(|| e.stag()),
            immediate: (flags & F_IMMEDIATE != 0).then(|| e.a_low()),
        },
        op::WRITE => SendOp::Write {
            data: e.payload(own)?,
            dst: e.remote(),
        },
        op::READ => SendOp::Read {
            src: e.remote(),
            dst: e.sink()?,
        },
        op::IMMEDIATE => SendOp::Immediate { data: e.a() },
        op::FETCH_ADD => SendOp::FetchAdd {
            dst: e.remote(),
            add: e.a(),
            mask: e.b(),
            result: e.sink()?,
        },
        op::CMP_SWAP => SendOp::CmpSwap {
            dst: e.remote(),
            compare: e.a(),
            compare_mask: e.b(),
            swap: e.c(),
            swap_mask: e.d(),
            result: e.sink()?,
        },
        op::LOCAL_INVALIDATE => SendOp::LocalInvalidate { stag: e.stag() },
        op::FAST_REGISTER => SendOp::FastRegister(FastReg {
            stag: e.stag(),
            to: e.to(),
            len: e.a(),
            access: e.access(),
        }),
        op::BIND => SendOp::Bind(Bind {
            mw: e.stag(),
            mr: e.region_stag(),
            to: e.to(),
            len: e.a(),
            access: e.access(),
            one_touch: flags & F_ONE_TOUCH != 0,
        }),
        op::DELAY => SendOp::Delay {
            duration: std::time::Duration::from_nanos(e.a()),
        },
        op::REGISTER_SEND => SendOp::RegisterSend {
            reg: FastReg {
                stag: e.region_stag(),
                to: e.to(),
                len: e.b(),
                access: e.access(),
            },
            data: e.payload(own)?,
        },
        op::READ_SGL => match e.payload(own)? {
            Payload::Sgl(dst) => SendOp::ReadSgl {
                src: e.remote(),
                dst,
            },
            Payload::Bytes(_) => return Err(Malformed("read sink")),
        },
        _ => return Err(Malformed("send entry opcode")),
    })
}

#[cfg(test)]
mod tests {
    use rdmap::{Access, RemoteBuf, STag, Sge};

    use super::*;

    fn no_stage(_: &[u8]) -> Option<u32> {
        None
    }

    /// The first 96 octets (the head) of `op`'s entry with work request id 0x0102..08.
    fn head(op: SendOp, flags: SendFlags, stage: &mut dyn FnMut(&[u8]) -> Option<u32>) -> Vec<u8> {
        let wr = SendWr {
            wr_id: 0x0102_0304_0506_0708,
            op,
            flags,
        };
        encode_sqe(&wr, stage).unwrap()[..96].to_vec()
    }

    #[test]
    fn a_compare_and_swap_entry_is_laid_out_as_documented() {
        let wr = SendWr {
            wr_id: 0x1122_3344_5566_7788,
            op: SendOp::CmpSwap {
                dst: RemoteBuf {
                    stag: STag::from_u32(0x0a0b_0c0d),
                    to: 0x0102_0304_0506_0708,
                    len: 8,
                },
                compare: 0xa1a2_a3a4_a5a6_a7a8,
                compare_mask: u64::MAX,
                swap: 0xb1b2_b3b4_b5b6_b7b8,
                swap_mask: 0xff00,
                result: Sge {
                    stag: STag::from_u32(0x31),
                    to: 0x1000,
                    len: 8,
                },
            },
            flags: SendFlags::SIGNALED | SendFlags::SOLICITED,
        };
        let e = encode_sqe(&wr, &mut no_stage).unwrap();
        let mut want = [0u8; SQE_SIZE];
        #[rustfmt::skip]
        let written: &[u8] = &[
            6, 0x03, 0, 1,  0, 0, 0, 0,
            0x88, 0x77, 0x66, 0x55, 0x44, 0x33, 0x22, 0x11,
            0x0d, 0x0c, 0x0b, 0x0a,  0, 0, 0, 0,
            0x08, 0x07, 0x06, 0x05, 0x04, 0x03, 0x02, 0x01,
            8, 0, 0, 0,  0, 0, 0, 0,
            0xa8, 0xa7, 0xa6, 0xa5, 0xa4, 0xa3, 0xa2, 0xa1,
            0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
            0xb8, 0xb7, 0xb6, 0xb5, 0xb4, 0xb3, 0xb2, 0xb1,
            0, 0xff, 0, 0, 0, 0, 0, 0,
        ];
        want[..72].copy_from_slice(written);
        #[rustfmt::skip]
        want[96..112].copy_from_slice(&[
            0x31, 0, 0, 0,  8, 0, 0, 0,  0, 0x10, 0, 0, 0, 0, 0, 0,
        ]);
        assert_eq!(e, want);
        assert_eq!(decode_sqe(&e, &mut copy_inline).unwrap(), wr);
    }

    #[test]
    fn a_send_inline_or_staged_is_laid_out_as_documented() {
        // A Send inline, with an STag to invalidate and a 32-bit immediate value.
        let send = head(
            SendOp::Send {
                data: Payload::Bytes(Bytes::from_static(b"hello")),
                invalidate: Some(STag::from_u32(0x4401)),
                immediate: Some(0x8001_0203),
            },
            SendFlags::NONE,
            &mut no_stage,
        );
        #[rustfmt::skip]
        let want: &[u8] = &[
            1, 0x48, 1, 0,  5, 0, 0, 0,
            8, 7, 6, 5, 4, 3, 2, 1,
            0x01, 0x44, 0, 0,  0, 0, 0, 0,
            0, 0, 0, 0, 0, 0, 0, 0,
            0, 0, 0, 0,  0, 0, 0, 0,
            0x03, 0x02, 0x01, 0x80, 0, 0, 0, 0,
        ];
        assert_eq!(&send[..48], want);
        assert!(send[48..].iter().all(|&b| b == 0));
        let e = encode_sqe(
            &SendWr {
                wr_id: 1,
                op: SendOp::Send {
                    data: Payload::Bytes(Bytes::from_static(b"hello")),
                    invalidate: None,
                    immediate: None,
                },
                flags: SendFlags::NONE,
            },
            &mut no_stage,
        )
        .unwrap();
        assert_eq!(&e[96..102], b"hello\0");

        // A staged Send: the payload's length and its offset in the staging area.
        let staged = head(
            SendOp::Send {
                data: Payload::Bytes(Bytes::from(vec![0; 300])),
                invalidate: None,
                immediate: None,
            },
            SendFlags::FENCE,
            &mut |_| Some(0x0a0b),
        );
        assert_eq!(&staged[..8], &[1, 0x04, 3, 0, 0x2c, 0x01, 0, 0]);
        assert_eq!(&staged[72..76], &[0x0b, 0x0a, 0, 0]);
        assert!(staged[16..72].iter().all(|&b| b == 0));
    }

    #[test]
    fn registrations_and_binds_are_laid_out_as_documented() {
        // A Bind: the window, the region, the offset, the rights and the length.
        let bind = head(
            SendOp::Bind(Bind {
                mw: STag::from_u32(0x0501),
                mr: STag::from_u32(0x0601),
                to: 0x10,
                len: 0x20,
                access: Access::from_bits_truncate(0x0c),
                one_touch: true,
            }),
            SendFlags::NONE,
            &mut no_stage,
        );
        #[rustfmt::skip]
        let want: &[u8] = &[
            9, 0x20, 0, 0,  0, 0, 0, 0,
            8, 7, 6, 5, 4, 3, 2, 1,
            0x01, 0x05, 0, 0,  0x01, 0x06, 0, 0,
            0x10, 0, 0, 0, 0, 0, 0, 0,
            0, 0, 0, 0,  0x0c, 0, 0, 0,
            0x20, 0, 0, 0, 0, 0, 0, 0,
        ];
        assert_eq!(&bind[..48], want);

        // A FastRegister: STag, offset, rights, length in `a`.
        let fr = head(
            SendOp::FastRegister(FastReg {
                stag: STag::from_u32(0x0301),
                to: 0x1000,
                len: 0x2000,
                access: Access::from_bits_truncate(0x03),
            }),
            SendFlags::NONE,
            &mut no_stage,
        );
        assert_eq!(&fr[..4], &[8, 0, 0, 0]);
        assert_eq!(&fr[16..48], &{
            let mut w = [0u8; 32];
            w[..4].copy_from_slice(&[0x01, 0x03, 0, 0]);
            w[8..16].copy_from_slice(&[0, 0x10, 0, 0, 0, 0, 0, 0]);
            w[20] = 0x03;
            w[24..32].copy_from_slice(&[0, 0x20, 0, 0, 0, 0, 0, 0]);
            w
        });

        // A RegisterSend: the region's STag in its own field, the length in `b`.
        let rs = head(
            SendOp::RegisterSend {
                reg: FastReg {
                    stag: STag::from_u32(0x0701),
                    to: 0x30,
                    len: 0x40,
                    access: Access::from_bits_truncate(0x02),
                },
                data: Payload::Bytes(Bytes::from_static(b"ad")),
            },
            SendFlags::NONE,
            &mut no_stage,
        );
        #[rustfmt::skip]
        let want: &[u8] = &[
            11, 0, 1, 0,  2, 0, 0, 0,
            8, 7, 6, 5, 4, 3, 2, 1,
            0, 0, 0, 0,  0x01, 0x07, 0, 0,
            0x30, 0, 0, 0, 0, 0, 0, 0,
            0, 0, 0, 0,  0x02, 0, 0, 0,
            0, 0, 0, 0, 0, 0, 0, 0,
            0x40, 0, 0, 0, 0, 0, 0, 0,
        ];
        assert_eq!(&rs[..56], want);
    }

    #[test]
    fn a_delay_and_the_pushed_flag_are_laid_out_as_documented() {
        // A Delay: nanoseconds in `a`.
        let delay = head(
            SendOp::Delay {
                duration: std::time::Duration::from_nanos(0x0102_0304),
            },
            SendFlags::NONE,
            &mut no_stage,
        );
        assert_eq!(&delay[..4], &[10, 0, 0, 0]);
        assert_eq!(&delay[40..48], &[4, 3, 2, 1, 0, 0, 0, 0]);

        // Pushed: flag 0x10 of octet 1.
        let mut e = [0u8; SQE_SIZE];
        e[1] = 0x01;
        mark_pushed(&mut e);
        assert_eq!(e[1], 0x11);
        assert!(sqe_pushed(&e));
        // Discarded by the library's own push: flag 0x80.
        assert!(!sqe_push_discarded(&e));
        mark_push_discarded(&mut e);
        assert_eq!(e[1], 0x91);
        assert!(sqe_push_discarded(&e));
    }
}
