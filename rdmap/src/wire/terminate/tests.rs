//! Terminate header tests against the §5.5 vectors.

use super::*;
use crate::wire::test_util::{hex, ulpdu};
use crate::wire::{RdmapControl, ReadRequestRepr};
use ddp::STag;
use proptest::prelude::*;

/// §5.5 MPA CRC error: 2/0/2, no copied headers (ULPDU 22).
const MPA_CRC_FPDU: &str = "0000: 00 16 41 47 00 00 00 00 00 00 00 02 00 00 00 01
    0010: 00 00 00 00 20 02 00 00 7f e4 25 85";

/// §5.5 RFC 6581 insufficient IRD: 2/0/6.
const IRD_FPDU: &str = "0000: 00 16 41 47 00 00 00 00 00 00 00 02 00 00 00 01
    0010: 00 00 00 00 20 06 00 00 65 40 fb 1b";

/// §5.5 DDP untagged "invalid MSN - no buffer", M=1 D=1, the offending Send header (ULPDU 42).
const DDP_FPDU: &str = "0000: 00 2a 41 47 00 00 00 00 00 00 00 02 00 00 00 01
    0010: 00 00 00 00 12 02 c0 00 00 64 41 43 00 00 00 00
    0020: 00 00 00 00 00 00 00 05 00 00 00 00 71 0d 5e 50";

/// §5.5 RDMAP remote protection "invalid STag" on a Read Request, M=1 D=1 R=1 (ULPDU 70).
const RDMAP_FPDU: &str = "0000: 00 46 41 47 00 00 00 00 00 00 00 02 00 00 00 01
    0010: 00 00 00 00 01 00 e0 00 00 2e 41 41 00 00 00 00
    0020: 00 00 00 01 00 00 00 01 00 00 00 00 11 22 33 44
    0030: 00 00 00 00 00 00 20 00 00 00 01 00 de ad be ef
    0040: 00 00 00 00 00 00 30 00 f0 a0 fd 60";

/// §5.4 RDMA Read Request (the message the RDMAP Terminate above answers, except SrcSTag).
const READ_REQUEST_FPDU: &str = "0000: 00 2e 41 41 00 00 00 00 00 00 00 01 00 00 00 01
    0010: 00 00 00 00 11 22 33 44 00 00 00 00 00 00 20 00
    0020: 00 00 01 00 55 66 77 88 00 00 00 00 00 00 30 00
    0030: 05 ca 54 df";

/// §5.4 RDMA Write, L=1 (a tagged segment).
const WRITE_FPDU: &str = "0000: 00 16 c1 40 12 34 56 78 00 00 00 00 00 00 10 00
    0010: 00 01 02 03 04 05 06 07 ea ef b4 f7";

/// The whole ULPDU of an FPDU.
fn ulpdu_of(fpdu: &str) -> Vec<u8> {
    ulpdu(&hex(fpdu)).to_vec()
}

/// The Terminate header of a §5.5 FPDU: the ULPDU after its 18-octet DDP header.
fn term_header(fpdu: &str) -> Vec<u8> {
    let u = ulpdu_of(fpdu);
    assert_eq!(RdmapControl::parse(u[1]).opcode, Opcode::Terminate);
    u[UNTAGGED_HEADER_LEN..].to_vec()
}

/// The 18-octet Send header copied in the DDP vector (QN 0, MSN 5, MO 0).
fn send_header() -> CopiedDdpHeader {
    CopiedDdpHeader::from_ulpdu(&hex(
        "41 43 00 00 00 00 00 00 00 00 00 00 00 05 00 00 00 00",
    ))
    .unwrap()
}

fn read_request_header() -> [u8; READ_REQUEST_LEN] {
    ReadRequestRepr {
        sink_stag: STag::from_u32(0x1122_3344),
        sink_to: 0x2000,
        size: 0x100,
        src_stag: STag::from_u32(0xdead_beef),
        src_to: 0x3000,
    }
    .to_bytes()
}

fn ddp_repr() -> TerminateRepr {
    TerminateRepr {
        code: TermCode::DDP_NO_BUFFER,
        ddp_seg_len: Some(0x64),
        ddp_header: Some(send_header()),
        rdma_header: None,
    }
}

fn rdmap_repr() -> TerminateRepr {
    TerminateRepr {
        code: TermCode::INVALID_STAG,
        ddp_seg_len: Some(0x2e),
        ddp_header: Some(CopiedDdpHeader::from_ulpdu(&ulpdu_of(READ_REQUEST_FPDU)).unwrap()),
        rdma_header: Some(read_request_header()),
    }
}

#[test]
fn vector_lengths() {
    assert_eq!(term_header(MPA_CRC_FPDU).len(), 4);
    assert_eq!(term_header(IRD_FPDU).len(), 4);
    assert_eq!(term_header(DDP_FPDU).len(), 24);
    assert_eq!(term_header(RDMAP_FPDU).len(), TERMINATE_MAX_LEN);
}

#[test]
fn deconstruct() {
    let b = term_header(MPA_CRC_FPDU);
    let p = TerminatePacket::new_checked(&b[..]).unwrap();
    assert_eq!(p.code(), TermCode::MPA_CRC);
    assert_eq!((p.m(), p.d(), p.r()), (false, false, false));
    assert_eq!(p.ddp_seg_len(), None);
    assert_eq!(p.ddp_header(), None);
    assert_eq!(p.rdma_header(), None);
    assert_eq!(p.header_len(), Ok(4));

    let b = term_header(DDP_FPDU);
    let p = TerminatePacket::new_checked(&b[..]).unwrap();
    assert_eq!(p.code(), TermCode::DDP_NO_BUFFER);
    assert_eq!((p.m(), p.d(), p.r()), (true, true, false));
    assert_eq!(p.ddp_seg_len(), Some(0x64));
    assert_eq!(p.ddp_header(), Some(send_header().as_bytes()));
    assert_eq!(p.rdma_header(), None);
    assert_eq!(p.header_len(), Ok(24));

    let b = term_header(RDMAP_FPDU);
    let p = TerminatePacket::new_checked(&b[..]).unwrap();
    assert_eq!(p.code(), TermCode::INVALID_STAG);
    assert_eq!((p.m(), p.d(), p.r()), (true, true, true));
    assert_eq!(p.ddp_seg_len(), Some(0x2e));
    assert_eq!(p.ddp_header().map(<[u8]>::len), Some(18));
    assert_eq!(p.rdma_header(), Some(&read_request_header()[..]));
    let rr = ReadRequestRepr::parse(p.rdma_header().unwrap()).unwrap();
    assert_eq!(rr.src_stag, STag::from_u32(0xdead_beef));
}

#[test]
fn construct() {
    let mut buf = [0xa5u8; 4];
    let mut p = TerminatePacket::new_unchecked(&mut buf[..]);
    p.set_code(TermCode::MPA_INSUFFICIENT_IRD);
    p.set_flags(false, false, false);
    assert_eq!(&buf[..], &term_header(IRD_FPDU)[..]);

    let mut buf = [0xa5u8; 24];
    let mut p = TerminatePacket::new_unchecked(&mut buf[..]);
    p.set_code(TermCode::DDP_NO_BUFFER);
    p.set_flags(true, true, false);
    p.set_ddp_seg_len(0x64);
    p.set_ddp_header(send_header().as_bytes());
    assert_eq!(&buf[..], &term_header(DDP_FPDU)[..]);

    let mut buf = [0xa5u8; 52];
    let mut p = TerminatePacket::new_unchecked(&mut buf[..]);
    p.set_code(TermCode::INVALID_STAG);
    p.set_flags(true, true, true);
    p.set_ddp_seg_len(0x2e);
    p.set_ddp_header(&ulpdu_of(READ_REQUEST_FPDU)[..18]);
    p.set_rdma_header(&read_request_header());
    assert_eq!(&buf[..], &term_header(RDMAP_FPDU)[..]);
}

#[test]
fn parse() {
    assert_eq!(
        TerminateRepr::parse(&term_header(MPA_CRC_FPDU)),
        Ok(TerminateRepr::new(TermCode::MPA_CRC))
    );
    assert_eq!(
        TerminateRepr::parse(&term_header(IRD_FPDU)),
        Ok(TerminateRepr::new(TermCode::llp(6)))
    );
    assert_eq!(TerminateRepr::parse(&term_header(DDP_FPDU)), Ok(ddp_repr()));
    let r = TerminateRepr::parse(&term_header(RDMAP_FPDU)).unwrap();
    assert_eq!(r, rdmap_repr());
    let h = r.ddp_header.unwrap();
    assert!(!h.is_tagged());
    assert_eq!(h.len(), 18);
    assert_eq!(h.rdmap_control().opcode, Opcode::ReadRequest);
}

#[test]
fn emit() {
    let cases = [
        (TerminateRepr::new(TermCode::MPA_CRC), MPA_CRC_FPDU),
        (TerminateRepr::new(TermCode::MPA_INSUFFICIENT_IRD), IRD_FPDU),
        (ddp_repr(), DDP_FPDU),
        (rdmap_repr(), RDMAP_FPDU),
    ];
    for (repr, fpdu) in cases {
        let expect = term_header(fpdu);
        assert_eq!(repr.buffer_len(), expect.len(), "{repr}");
        let mut buf = vec![0xa5u8; repr.buffer_len()];
        repr.emit(&mut buf);
        assert_eq!(buf, expect, "{repr}");
    }
}

#[test]
fn impossible_len() {
    for fpdu in [MPA_CRC_FPDU, DDP_FPDU, RDMAP_FPDU] {
        let b = term_header(fpdu);
        for len in 0..b.len() {
            assert_eq!(
                TerminatePacket::new_checked(&b[..len]).err(),
                Some(WireError::Truncated),
                "len {len}"
            );
            assert_eq!(TerminateRepr::parse(&b[..len]), Err(WireError::Truncated));
        }
    }
}

#[test]
fn trailing_zeros_are_tolerated_but_not_garbage() {
    // A sender that keeps zero-filled space for omitted headers (52 octets, M=D=R=0).
    let mut b = term_header(MPA_CRC_FPDU);
    b.resize(TERMINATE_MAX_LEN, 0);
    assert_eq!(
        TerminateRepr::parse(&b),
        Ok(TerminateRepr::new(TermCode::MPA_CRC))
    );
    let mut b = term_header(DDP_FPDU);
    b.extend_from_slice(&[0; 28]);
    assert_eq!(TerminateRepr::parse(&b), Ok(ddp_repr()));
    b.push(1);
    assert_eq!(TerminateRepr::parse(&b), Err(WireError::Malformed));
    // The packet view still reads it.
    assert_eq!(
        TerminatePacket::new_checked(&b[..]).unwrap().code(),
        TermCode::DDP_NO_BUFFER
    );
}

#[test]
fn reserved_bits_are_ignored_on_parse() {
    let mut b = term_header(DDP_FPDU);
    b[2] |= 0x1f;
    b[3] = 0xff;
    assert_eq!(TerminateRepr::parse(&b), Ok(ddp_repr()));
}

#[test]
fn d_without_m_has_a_zero_length_field() {
    let repr = TerminateRepr {
        ddp_seg_len: None,
        ..ddp_repr()
    };
    let mut buf = vec![0xa5u8; repr.buffer_len()];
    repr.emit(&mut buf);
    assert_eq!(&buf[..6], &[0x12, 0x02, 0x40, 0x00, 0x00, 0x00]);
    assert_eq!(TerminateRepr::parse(&buf), Ok(repr));
}

#[test]
fn for_segment_rebuilds_the_read_request_vector() {
    // The §5.4 Read Request with SrcSTag 0xdeadbeef is the message of the §5.5 Terminate.
    let mut offending = ulpdu_of(READ_REQUEST_FPDU);
    offending[34..38].copy_from_slice(&0xdead_beef_u32.to_be_bytes());
    let t = TerminateRepr::for_segment(TermCode::INVALID_STAG, &offending);
    assert_eq!(t, rdmap_repr());
    let mut buf = vec![0u8; t.buffer_len()];
    t.emit(&mut buf);
    assert_eq!(buf, term_header(RDMAP_FPDU));
}

#[test]
fn for_segment_follows_figure_10() {
    let send = hex("41 43 00 00 00 00 00 00 00 00 00 00 00 05 00 00 00 00 aa bb");
    // DDP errors: M and D, no R.
    let t = TerminateRepr::for_segment(TermCode::DDP_NO_BUFFER, &send);
    assert_eq!(t.ddp_seg_len, Some(20));
    assert_eq!(t.ddp_header, Some(send_header()));
    assert_eq!(t.rdma_header, None);
    // Remote protection on a Send (not a Read Request): no R.
    let t = TerminateRepr::for_segment(TermCode::OP_CANNOT_INVALIDATE, &send);
    assert_eq!(t.rdma_header, None);
    assert!(t.ddp_header.is_some());
    // LLP and local catastrophic: nothing.
    for code in [TermCode::MPA_CRC, TermCode::RDMAP_LOCAL_CATASTROPHIC] {
        assert_eq!(
            TerminateRepr::for_segment(code, &send),
            TerminateRepr::new(code)
        );
    }
    // A segment too short to hold its header: no copy.
    assert_eq!(
        TerminateRepr::for_segment(TermCode::DDP_NO_BUFFER, &send[..10]),
        TerminateRepr::new(TermCode::DDP_NO_BUFFER)
    );
    // A tagged segment copies 14 octets, and parsing picks 14 from the copied T bit.
    let write = ulpdu_of(WRITE_FPDU);
    let t = TerminateRepr::for_segment(TermCode::DDP_BASE_BOUNDS, &write);
    let h = t.ddp_header.unwrap();
    assert!(h.is_tagged());
    assert_eq!(h.as_bytes(), &write[..14]);
    assert_eq!(t.buffer_len(), 4 + 2 + 14);
    let mut buf = vec![0u8; t.buffer_len()];
    t.emit(&mut buf);
    assert_eq!(TerminateRepr::parse(&buf), Ok(t));
}

#[test]
fn copied_header_from_ulpdu() {
    assert_eq!(CopiedDdpHeader::from_ulpdu(&[]), None);
    assert_eq!(CopiedDdpHeader::from_ulpdu(&[0x41; 17]), None);
    assert_eq!(CopiedDdpHeader::from_ulpdu(&[0xc1; 13]), None);
    assert_eq!(
        CopiedDdpHeader::from_ulpdu(&[0xc1; 14]).map(|h| h.len()),
        Some(14)
    );
    assert_eq!(
        CopiedDdpHeader::from_ulpdu(&[0x41; 30]).map(|h| h.len()),
        Some(18)
    );
    let z = CopiedDdpHeader::zeroed();
    assert_eq!(z.as_bytes(), &[0u8; 18]);
    assert!(!z.is_empty());
    assert_eq!(
        format!("{:?}", CopiedDdpHeader::from_ulpdu(&[0xc1; 14]).unwrap()),
        "CopiedDdpHeader(c1 c1 c1 c1 c1 c1 c1 c1 c1 c1 c1 c1 c1 c1)"
    );
}

#[test]
fn never_panics_on_prefixes_and_flag_mutations() {
    for fpdu in [MPA_CRC_FPDU, DDP_FPDU, RDMAP_FPDU] {
        let mut b = term_header(fpdu);
        b.resize(80, 0x5a);
        for hdrct in [0x00, 0x20, 0x40, 0x60, 0x80, 0xa0, 0xc0, 0xe0, 0xff] {
            for ctrl in [0x00, 0x41, 0x80, 0xc1] {
                let mut m = b.clone();
                m[2] = hdrct;
                m[6] = ctrl;
                for len in 0..=80 {
                    let _ = TerminateRepr::parse(&m[..len]);
                    if let Ok(p) = TerminatePacket::new_checked(&m[..len]) {
                        let _ = (p.code(), p.ddp_seg_len(), p.ddp_header(), p.rdma_header());
                        let _ = TerminateRepr::parse_packet(&p);
                    }
                }
            }
        }
    }
}

fn any_copied_header() -> impl Strategy<Value = CopiedDdpHeader> {
    any::<[u8; 18]>().prop_map(|b| CopiedDdpHeader::from_ulpdu(&b).unwrap())
}

fn any_repr() -> impl Strategy<Value = TerminateRepr> {
    (
        any::<[u8; 2]>(),
        proptest::option::of(any::<u16>()),
        proptest::option::of(any_copied_header()),
        proptest::option::of(any::<[u8; 28]>()),
    )
        .prop_map(
            |(code, ddp_seg_len, ddp_header, rdma_header)| TerminateRepr {
                code: TermCode::from_wire(code),
                ddp_seg_len,
                ddp_header,
                rdma_header,
            },
        )
}

proptest! {
    #[test]
    fn round_trip(repr in any_repr()) {
        let mut buf = vec![0u8; repr.buffer_len()];
        repr.emit(&mut buf);
        prop_assert_eq!(TerminateRepr::parse(&buf), Ok(repr));
        prop_assert_eq!(TerminatePacket::new_checked(&buf[..]).unwrap().header_len(), Ok(buf.len()));
    }

    #[test]
    fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..80)) {
        let _ = TerminateRepr::parse(&bytes);
        if let Ok(p) = TerminatePacket::new_checked(&bytes[..]) {
            let _ = (p.code(), p.ddp_seg_len(), p.ddp_header(), p.rdma_header(), p.header_len());
        }
    }
}
