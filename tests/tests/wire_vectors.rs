//! Every FPDU of wire-format.md §5.4 and §5.5, built from typed `Repr`s of all three
//! protocol crates (DDP header, RDMAP header, MPA framing with CRC), compared octet for
//! octet with the reference, and parsed back.

use bytes::BytesMut;
use ddp::{STag, SegmentRepr, TaggedRepr, UntaggedRepr};
use mpa::{Deframer, Framer};
use rdmap::TermCode;
use rdmap::wire::{
    AtomicRequestRepr, AtomicResponseRepr, CopiedDdpHeader, Opcode, RdmapControl, ReadRequestRepr,
    TerminateRepr,
};

fn ctrl(op: Opcode) -> u8 {
    RdmapControl::new(op).emit()
}

fn untagged(op: Opcode, qn: u32, msn: u32, inv: u32) -> SegmentRepr {
    SegmentRepr::Untagged(UntaggedRepr {
        last: true,
        rsvd_ulp: ctrl(op),
        rsvd_ulp_ext: inv,
        qn,
        msn,
        mo: 0,
    })
}

fn tagged(op: Opcode, last: bool, stag: u32, to: u64) -> SegmentRepr {
    SegmentRepr::Tagged(TaggedRepr {
        last,
        rsvd_ulp: ctrl(op),
        stag: STag::from_u32(stag),
        to,
    })
}

/// Hex dump text (offset prefixes allowed) to octets.
fn hex(s: &str) -> Vec<u8> {
    s.lines()
        .flat_map(|l| {
            l.split_once(':')
                .map_or(l, |(_, rest)| rest)
                .split_whitespace()
        })
        .map(|b| u8::from_str_radix(b, 16).expect("hex"))
        .collect()
}

/// Frames `header ++ rdma ++ payload` with CRC on and markers off, checks it against
/// `want`, then deframes it and checks the DDP header and the rest come back.
fn check(name: &str, header: SegmentRepr, rdma: &[u8], payload: &[u8], want: &str) {
    let want = hex(want);
    let mut h = vec![0u8; header.header_len()];
    header.emit(&mut h);
    h.extend_from_slice(rdma);
    let mut out = BytesMut::new();
    Framer::new(false, true).encode(&h, payload, &mut out);
    assert_eq!(&out[..], &want[..], "{name}: emitted FPDU");

    // Under every single cut point of the stream, deframing gives the same ULPDU.
    for cut in 0..=want.len() {
        let mut de = Deframer::new(false, true);
        let mut src = BytesMut::from(&want[..cut]);
        let first = de.decode(&mut src).expect("no error");
        src.extend_from_slice(&want[cut..]);
        let ulpdu = match first {
            Some(u) => u,
            None => de.decode(&mut src).expect("no error").expect("one ULPDU"),
        };
        assert!(src.is_empty(), "{name}: all octets consumed");
        let (parsed, rest) = SegmentRepr::parse(&ulpdu).expect("DDP header");
        assert_eq!(parsed, header, "{name}: DDP header");
        assert_eq!(&rest[..rdma.len()], rdma, "{name}: RDMAP header");
        assert_eq!(&rest[rdma.len()..], payload, "{name}: payload");
    }
}

#[test]
fn send_fpdus() {
    check(
        "Send ABCD",
        untagged(Opcode::Send, 0, 1, 0),
        &[],
        b"ABCD",
        "0000: 00 16 41 43 00 00 00 00 00 00 00 00 00 00 00 01
         0010: 00 00 00 00 41 42 43 44 32 e6 1a fb",
    );
    check(
        "Send pad 3",
        untagged(Opcode::Send, 0, 2, 0),
        &[],
        &[0x5a],
        "0000: 00 13 41 43 00 00 00 00 00 00 00 00 00 00 00 02
         0010: 00 00 00 00 5a 00 00 00 3a c1 dc fd",
    );
    check(
        "Send with SE and Invalidate",
        untagged(Opcode::SendSeInvalidate, 0, 3, 0x1234),
        &[],
        &[0xbe, 0xef],
        "0000: 00 14 41 46 00 00 12 34 00 00 00 00 00 00 00 03
         0010: 00 00 00 00 be ef 00 00 25 30 51 6b",
    );
    check(
        "zero-length Send RTR",
        untagged(Opcode::Send, 0, 1, 0),
        &[],
        &[],
        "0000: 00 12 41 43 00 00 00 00 00 00 00 00 00 00 00 01
         0010: 00 00 00 00 58 7b e8 c4",
    );
}

#[test]
fn tagged_fpdus() {
    check(
        "RDMA Write",
        tagged(Opcode::RdmaWrite, true, 0x1234_5678, 0x1000),
        &[],
        &[0, 1, 2, 3, 4, 5, 6, 7],
        "0000: 00 16 c1 40 12 34 56 78 00 00 00 00 00 00 10 00
         0010: 00 01 02 03 04 05 06 07 ea ef b4 f7",
    );
    check(
        "RDMA Write, not last",
        tagged(Opcode::RdmaWrite, false, 0x1234_5678, 0x1000),
        &[],
        b"abc",
        "0000: 00 11 81 40 12 34 56 78 00 00 00 00 00 00 10 00
         0010: 61 62 63 00 64 0b f4 be",
    );
    check(
        "Read Response",
        tagged(Opcode::ReadResponse, true, 0x1122_3344, 0x2000),
        &[],
        &[0xde, 0xad, 0xbe, 0xef],
        "0000: 00 12 c1 42 11 22 33 44 00 00 00 00 00 00 20 00
         0010: de ad be ef ba c4 08 15",
    );
    check(
        "zero-length Write RTR",
        tagged(Opcode::RdmaWrite, true, 1, 0),
        &[],
        &[],
        "0000: 00 0e c1 40 00 00 00 01 00 00 00 00 00 00 00 00
         0010: eb d3 4c 5f",
    );
}

#[test]
fn read_request_fpdus() {
    let mut rr = [0u8; 28];
    ReadRequestRepr {
        sink_stag: STag::from_u32(0x1122_3344),
        sink_to: 0x2000,
        size: 0x100,
        src_stag: STag::from_u32(0x5566_7788),
        src_to: 0x3000,
    }
    .emit(&mut rr);
    check(
        "Read Request",
        untagged(Opcode::ReadRequest, 1, 1, 0),
        &rr,
        &[],
        "0000: 00 2e 41 41 00 00 00 00 00 00 00 01 00 00 00 01
         0010: 00 00 00 00 11 22 33 44 00 00 00 00 00 00 20 00
         0020: 00 00 01 00 55 66 77 88 00 00 00 00 00 00 30 00
         0030: 05 ca 54 df",
    );
    let mut rtr = [0u8; 28];
    ReadRequestRepr {
        sink_stag: STag::from_u32(0),
        sink_to: 0,
        size: 0,
        src_stag: STag::from_u32(1),
        src_to: 0,
    }
    .emit(&mut rtr);
    check(
        "zero-length Read RTR",
        untagged(Opcode::ReadRequest, 1, 1, 0),
        &rtr,
        &[],
        "0000: 00 2e 41 41 00 00 00 00 00 00 00 01 00 00 00 01
         0010: 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00
         0020: 00 00 00 00 00 00 00 01 00 00 00 00 00 00 00 00
         0030: ba 10 e3 c9",
    );
}

#[test]
fn rfc7306_fpdus() {
    check(
        "Immediate Data",
        untagged(Opcode::ImmediateData, 0, 1, 0),
        &0x0102_0304_0506_0708u64.to_be_bytes(),
        &[],
        "0000: 00 1a 41 48 00 00 00 00 00 00 00 00 00 00 00 01
         0010: 00 00 00 00 01 02 03 04 05 06 07 08 06 c2 28 05",
    );
    let mut fa = [0u8; 52];
    AtomicRequestRepr::fetch_add(1, STag::from_u32(0xaabb_ccdd), 0x40, 1).emit(&mut fa);
    check(
        "Atomic FetchAdd",
        untagged(Opcode::AtomicRequest, 1, 1, 0),
        &fa,
        &[],
        "0000: 00 46 41 4a 00 00 00 00 00 00 00 01 00 00 00 01
         0010: 00 00 00 00 00 00 00 00 00 00 00 01 aa bb cc dd
         0020: 00 00 00 00 00 00 00 40 00 00 00 00 00 00 00 01
         0030: 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00
         0040: ff ff ff ff ff ff ff ff 07 89 aa 26",
    );
    let mut cs = [0u8; 52];
    let mut req = AtomicRequestRepr::cmp_swap(
        2,
        STag::from_u32(0xaabb_ccdd),
        0x48,
        0x2222_2222_2222_2222,
        0x1111_1111_1111_1111,
    );
    req.add_or_swap_mask = u64::MAX;
    req.emit(&mut cs);
    check(
        "Atomic CmpSwap",
        untagged(Opcode::AtomicRequest, 1, 2, 0),
        &cs,
        &[],
        "0000: 00 46 41 4a 00 00 00 00 00 00 00 01 00 00 00 02
         0010: 00 00 00 00 00 00 00 02 00 00 00 02 aa bb cc dd
         0020: 00 00 00 00 00 00 00 48 11 11 11 11 11 11 11 11
         0030: ff ff ff ff ff ff ff ff 22 22 22 22 22 22 22 22
         0040: ff ff ff ff ff ff ff ff fb ee b2 75",
    );
    let mut ar = [0u8; 12];
    AtomicResponseRepr { req_id: 1, orig: 5 }.emit(&mut ar);
    check(
        "Atomic Response",
        untagged(Opcode::AtomicResponse, 3, 1, 0),
        &ar,
        &[],
        "0000: 00 1e 41 4b 00 00 00 00 00 00 00 03 00 00 00 01
         0010: 00 00 00 00 00 00 00 01 00 00 00 00 00 00 00 05
         0020: e5 b2 0f b6",
    );
}

fn terminate(t: &TerminateRepr) -> Vec<u8> {
    let mut b = vec![0u8; t.buffer_len()];
    t.emit(&mut b);
    b
}

#[test]
fn terminate_fpdus() {
    let term = untagged(Opcode::Terminate, 2, 1, 0);
    let plain = |code| TerminateRepr {
        code,
        ddp_seg_len: None,
        ddp_header: None,
        rdma_header: None,
    };
    check(
        "MPA CRC error",
        term,
        &terminate(&plain(TermCode::llp(2))),
        &[],
        "0000: 00 16 41 47 00 00 00 00 00 00 00 02 00 00 00 01
         0010: 00 00 00 00 20 02 00 00 7f e4 25 85",
    );
    check(
        "insufficient IRD",
        term,
        &terminate(&plain(TermCode::llp(6))),
        &[],
        "0000: 00 16 41 47 00 00 00 00 00 00 00 02 00 00 00 01
         0010: 00 00 00 00 20 06 00 00 65 40 fb 1b",
    );
    let offending = hex("41 43 00 00 00 00 00 00 00 00 00 00 00 05 00 00 00 00");
    check(
        "DDP no buffer",
        term,
        &terminate(&TerminateRepr {
            code: TermCode::from_ddp(ddp::DdpError::NoBuffer),
            ddp_seg_len: Some(0x64),
            ddp_header: CopiedDdpHeader::from_ulpdu(&offending),
            rdma_header: None,
        }),
        &[],
        "0000: 00 2a 41 47 00 00 00 00 00 00 00 02 00 00 00 01
         0010: 00 00 00 00 12 02 c0 00 00 64 41 43 00 00 00 00
         0020: 00 00 00 00 00 00 00 05 00 00 00 00 71 0d 5e 50",
    );
    let read_req = hex("41 41 00 00 00 00 00 00 00 01 00 00 00 01 00 00 00 00
         11 22 33 44 00 00 00 00 00 00 20 00 00 00 01 00
         de ad be ef 00 00 00 00 00 00 30 00");
    let mut rdma = [0u8; 28];
    rdma.copy_from_slice(&read_req[18..]);
    check(
        "RDMAP invalid STag",
        term,
        &terminate(&TerminateRepr {
            code: TermCode::INVALID_STAG,
            ddp_seg_len: Some(0x2e),
            ddp_header: CopiedDdpHeader::from_ulpdu(&read_req),
            rdma_header: Some(rdma),
        }),
        &[],
        "0000: 00 46 41 47 00 00 00 00 00 00 00 02 00 00 00 01
         0010: 00 00 00 00 01 00 e0 00 00 2e 41 41 00 00 00 00
         0020: 00 00 00 01 00 00 00 01 00 00 00 00 11 22 33 44
         0030: 00 00 00 00 00 00 20 00 00 00 01 00 de ad be ef
         0040: 00 00 00 00 00 00 30 00 f0 a0 fd 60",
    );
}
