//! Work queue entries in the rings: send ([`SQE_SIZE`] octets), receive ([`RQE_SIZE`]) and
//! completion ([`CQE_SIZE`]) entries, fixed little-endian layouts, drawn on their encoders:
//! [`encode_sqe`], [`encode_rqe`], [`encode_cqe`].
//!
//! Each layout has its own file, which names every field's octets in a `field` module, as
//! `ddp`'s wire views do, and reads and writes the fields by those names:
//!
//! - `send/`: the send queue entry: a 96-octet head (opcode, flags, payload kind, work
//!   request id, the remote buffer, registration and Atomic operands), then a 160-octet
//!   body holding the payload inline ([`INLINE_MAX`]) or a gather list ([`SQ_SGES`]
//!   entries);
//! - `recv.rs`: the receive queue entry: work request id, count, then up to [`RQ_SGES`]
//!   scatter entries;
//! - `completion.rs`: the completion entry;
//! - `sge.rs`: the 16-octet gather or scatter entry both lists are made of.

mod completion;
mod recv;
mod send;
mod sge;

pub use crate::qpseg::{CQE_SIZE, RQE_SIZE, SQE_SIZE};
pub use completion::{decode_cqe, encode_cqe, set_sq_done, sq_done};
pub use recv::{RQ_SGES, decode_rqe, encode_rqe};
pub use send::{
    Data, F_PUSH_DISCARDED, F_PUSHED, INLINE_MAX, SQ_SGES, copy_inline, decode_sqe, encode_sqe,
    mark_push_discarded, mark_pushed, set_inline, sqe_push_discarded, sqe_pushed,
};

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

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use rdmap::{
        Access, Bind, Completion, FastReg, Payload, Queue, RecvWr, RemoteBuf, STag, SendFlags,
        SendOp, SendWr, Sge, Sgl, TermCode, WcOpcode, WcStatus,
    };

    use super::*;
    use crate::codec::Malformed;

    /// Where a send queue entry's body starts, and the payload kind of an inline payload:
    /// literal, so that these tests pin the layout rather than repeat it.
    const BODY: usize = 96;
    const P_INLINE: u8 = 1;

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
