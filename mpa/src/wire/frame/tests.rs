//! smoltcp-style tests of the Request/Reply frame against wire-format.md §5.3.

use super::*;
use crate::{Extensions, RtrFlags};

// V1 Request, M=0 C=1 Rev=1, Private Data "hello".
static V1_REQ_HELLO: [u8; 25] = [
    0x4d, 0x50, 0x41, 0x20, 0x49, 0x44, 0x20, 0x52, 0x65, 0x71, 0x20, 0x46, 0x72, 0x61, 0x6d, 0x65,
    0x40, 0x01, 0x00, 0x05, 0x68, 0x65, 0x6c, 0x6c, 0x6f,
];
// V1 Request, M=1 C=1, no Private Data.
static V1_REQ_MARKERS: [u8; 20] = [
    0x4d, 0x50, 0x41, 0x20, 0x49, 0x44, 0x20, 0x52, 0x65, 0x71, 0x20, 0x46, 0x72, 0x61, 0x6d, 0x65,
    0xc0, 0x01, 0x00, 0x00,
];
// V1 Reply rejecting (R=1, C=1).
static V1_REP_REJECT: [u8; 20] = [
    0x4d, 0x50, 0x41, 0x20, 0x49, 0x44, 0x20, 0x52, 0x65, 0x70, 0x20, 0x46, 0x72, 0x61, 0x6d, 0x65,
    0x60, 0x01, 0x00, 0x00,
];
// V2 Request C=1 S=1, block 80 10 c0 10, "hello".
static V2_REQ: [u8; 29] = [
    0x4d, 0x50, 0x41, 0x20, 0x49, 0x44, 0x20, 0x52, 0x65, 0x71, 0x20, 0x46, 0x72, 0x61, 0x6d, 0x65,
    0x50, 0x02, 0x00, 0x09, 0x80, 0x10, 0xc0, 0x10, 0x68, 0x65, 0x6c, 0x6c, 0x6f,
];
// V2 Reply accepting, Write RTR, IRD=ORD=16.
static V2_REP: [u8; 24] = [
    0x4d, 0x50, 0x41, 0x20, 0x49, 0x44, 0x20, 0x52, 0x65, 0x70, 0x20, 0x46, 0x72, 0x61, 0x6d, 0x65,
    0x50, 0x02, 0x00, 0x04, 0x80, 0x10, 0x80, 0x10,
];
// V2 Requests, client-server IRD=ORD=4, and IRD=ORD=0x3FFF.
static V2_REQ_CS: [u8; 24] = [
    0x4d, 0x50, 0x41, 0x20, 0x49, 0x44, 0x20, 0x52, 0x65, 0x71, 0x20, 0x46, 0x72, 0x61, 0x6d, 0x65,
    0x50, 0x02, 0x00, 0x04, 0x00, 0x04, 0x00, 0x04,
];
static V2_REQ_NONEG: [u8; 24] = [
    0x4d, 0x50, 0x41, 0x20, 0x49, 0x44, 0x20, 0x52, 0x65, 0x71, 0x20, 0x46, 0x72, 0x61, 0x6d, 0x65,
    0x50, 0x02, 0x00, 0x04, 0x3f, 0xff, 0x3f, 0xff,
];
// V2 Reply C=1 S=1 with siw's large-FPDU bit (flags 0x58, siw's 0x5802 word), IRD=ORD=16.
static V2_REP_LARGE: [u8; 24] = [
    0x4d, 0x50, 0x41, 0x20, 0x49, 0x44, 0x20, 0x52, 0x65, 0x70, 0x20, 0x46, 0x72, 0x61, 0x6d, 0x65,
    0x58, 0x02, 0x00, 0x04, 0x00, 0x10, 0x00, 0x10,
];

fn v1(kind: FrameKind, markers: bool, reject: bool, pd: &[u8]) -> FrameRepr<'_> {
    FrameRepr {
        kind,
        markers,
        crc: true,
        reject,
        large_fpdus: false,
        rev: 1,
        enhanced: None,
        extensions: Extensions::NONE,
        private_data: pd,
    }
}

fn v2(kind: FrameKind, block: EnhancedRepr, pd: &[u8]) -> FrameRepr<'_> {
    FrameRepr {
        kind,
        markers: false,
        crc: true,
        reject: false,
        large_fpdus: false,
        rev: 2,
        enhanced: Some(block),
        extensions: Extensions::NONE,
        private_data: pd,
    }
}

fn all_vectors() -> Vec<(&'static [u8], FrameRepr<'static>)> {
    let wr = RtrFlags::WRITE | RtrFlags::READ;
    vec![
        (
            &V1_REQ_HELLO[..],
            v1(FrameKind::Request, false, false, b"hello"),
        ),
        (
            &V1_REQ_MARKERS[..],
            v1(FrameKind::Request, true, false, b""),
        ),
        (&V1_REP_REJECT[..], v1(FrameKind::Reply, false, true, b"")),
        (
            &V2_REQ[..],
            v2(
                FrameKind::Request,
                EnhancedRepr {
                    p2p: true,
                    rtr: wr,
                    ird: 16,
                    ord: 16,
                },
                b"hello",
            ),
        ),
        (
            &V2_REP[..],
            v2(
                FrameKind::Reply,
                EnhancedRepr {
                    p2p: true,
                    rtr: RtrFlags::WRITE,
                    ird: 16,
                    ord: 16,
                },
                b"",
            ),
        ),
        (
            &V2_REQ_CS[..],
            v2(
                FrameKind::Request,
                EnhancedRepr {
                    p2p: false,
                    rtr: RtrFlags::NONE,
                    ird: 4,
                    ord: 4,
                },
                b"",
            ),
        ),
        (
            &V2_REQ_NONEG[..],
            v2(
                FrameKind::Request,
                EnhancedRepr {
                    p2p: false,
                    rtr: RtrFlags::NONE,
                    ird: 0x3fff,
                    ord: 0x3fff,
                },
                b"",
            ),
        ),
        (
            &V2_REP_LARGE[..],
            FrameRepr {
                large_fpdus: true,
                ..v2(
                    FrameKind::Reply,
                    EnhancedRepr {
                        p2p: false,
                        rtr: RtrFlags::NONE,
                        ird: 16,
                        ord: 16,
                    },
                    b"",
                )
            },
        ),
    ]
}

#[test]
fn deconstruct() {
    let p = Packet::new_unchecked(&V2_REQ[..]);
    assert_eq!(p.key(), b"MPA ID Req Frame");
    assert_eq!(p.kind(), Some(FrameKind::Request));
    assert!(!p.markers());
    assert!(p.crc());
    assert!(!p.reject());
    assert!(p.enhanced());
    assert!(p.has_enhanced_block());
    assert_eq!(p.res(), 0);
    assert!(!p.large_fpdus());
    assert_eq!(p.rev(), 2);
    assert_eq!(p.pd_length(), 9);
    assert_eq!(p.private_data(), &V2_REQ[20..]);

    let p = Packet::new_unchecked(&V1_REP_REJECT[..]);
    assert_eq!(p.kind(), Some(FrameKind::Reply));
    assert!(p.reject() && p.crc() && !p.markers() && !p.enhanced());
    assert_eq!((p.rev(), p.pd_length()), (1, 0));
    assert!(Packet::new_unchecked(&V1_REQ_MARKERS[..]).markers());
    let p = Packet::new_unchecked(&V2_REP_LARGE[..]);
    assert!(p.large_fpdus() && p.crc() && p.enhanced() && !p.reject());
    assert_eq!(p.res(), 0x08);
}

#[test]
fn construct() {
    let mut buf = [0xa5u8; 29];
    let mut p = Packet::new_unchecked(&mut buf[..]);
    p.set_kind(FrameKind::Request);
    p.set_markers(false);
    p.set_crc(true);
    p.set_reject(false);
    p.set_enhanced(true);
    p.set_res(0);
    p.set_rev(2);
    p.set_pd_length(9);
    p.private_data_mut().copy_from_slice(&V2_REQ[20..]);
    assert_eq!(buf, V2_REQ);

    let mut buf = [0xa5u8; 20];
    let mut p = Packet::new_unchecked(&mut buf[..]);
    p.set_kind(FrameKind::Reply);
    p.set_flags(0);
    p.set_crc(true);
    p.set_reject(true);
    p.set_rev(1);
    p.set_pd_length(0);
    assert_eq!(buf, V1_REP_REJECT);
}

#[test]
fn parse() {
    for (bytes, repr) in all_vectors() {
        let parsed = FrameRepr::parse(&Packet::new_unchecked(bytes)).unwrap();
        assert_eq!(parsed, repr, "{bytes:02x?}");
    }
}

#[test]
fn emit() {
    for (bytes, repr) in all_vectors() {
        assert_eq!(repr.buffer_len(), bytes.len());
        let mut buf = vec![0xa5u8; repr.buffer_len()];
        repr.emit(&mut Packet::new_unchecked(&mut buf[..]));
        assert_eq!(buf, bytes);
    }
}

#[test]
fn impossible_len() {
    assert!(Packet::new_checked(&V2_REQ[..19]).is_err());
    // Header complete but private data cut short.
    assert!(Packet::new_checked(&V2_REQ[..28]).is_err());
    assert!(FrameRepr::parse(&Packet::new_unchecked(&V2_REQ[..28])).is_err());
    assert!(Packet::new_checked(&V2_REQ[..]).is_ok());
    // check_header only needs the 20-octet header.
    assert_eq!(
        Packet::new_unchecked(&V2_REQ[..20]).check_header(),
        Ok(FrameKind::Request)
    );
    assert!(Packet::new_unchecked(&V2_REQ[..19]).check_header().is_err());
}

fn with(base: &[u8], f: impl FnOnce(&mut Packet<&mut [u8]>)) -> Vec<u8> {
    let mut v = base.to_vec();
    f(&mut Packet::new_unchecked(&mut v[..]));
    v
}

#[test]
fn rejects_bad_rev_key_and_pd_length() {
    let rev0 = with(&V1_REQ_HELLO, |p| p.set_rev(0));
    let rev3 = with(&V1_REQ_HELLO, |p| p.set_rev(3));
    let mut key = V1_REQ_HELLO.to_vec();
    key[9] = b'x';
    let mut pd513 = with(&V1_REQ_MARKERS, |p| p.set_pd_length(513));
    pd513.resize(20 + 513, 0);
    for bad in [rev0, rev3, key, pd513] {
        let err = FrameRepr::parse(&Packet::new_unchecked(&bad[..])).unwrap_err();
        assert!(matches!(err, MpaError::InvalidFrame(_)), "{err:?}");
        assert_eq!(err.code(), 4);
    }
    // PD_Length 512 is fine.
    let mut pd512 = with(&V1_REQ_MARKERS, |p| p.set_pd_length(512));
    pd512.resize(20 + 512, 7);
    let r = FrameRepr::parse(&Packet::new_unchecked(&pd512[..])).unwrap();
    assert_eq!(r.private_data.len(), 512);
}

#[test]
fn enhanced_bit_rules() {
    // Rev 2, S=1, PD_Length 3: malformed.
    let mut short = with(&V2_REP, |p| p.set_pd_length(3));
    short.truncate(23);
    assert!(FrameRepr::parse(&Packet::new_unchecked(&short[..])).is_err());
    // Rev 2, S=0: no block, the whole PD is ULP data.
    let plain = with(&V2_REP, |p| p.set_enhanced(false));
    let r = FrameRepr::parse(&Packet::new_unchecked(&plain[..])).unwrap();
    assert_eq!((r.enhanced, r.private_data), (None, &V2_REP[20..]));
    // Rev 1 with the S position set: it is a reserved bit there, ignored.
    let v1s = with(&V1_REQ_HELLO, |p| p.set_enhanced(true));
    let r = FrameRepr::parse(&Packet::new_unchecked(&v1s[..])).unwrap();
    assert_eq!((r.enhanced, r.private_data), (None, &b"hello"[..]));
}

#[test]
fn reserved_bits_ignored() {
    // siw sets 0x08 in octet 16: read as the large-FPDU offer, nothing else changes.
    let gso = with(&V2_REQ, |p| p.set_res(0x08));
    assert_eq!(gso[16], 0x58);
    let r = FrameRepr::parse(&Packet::new_unchecked(&gso[..])).unwrap();
    assert_eq!(
        r,
        FrameRepr {
            large_fpdus: true,
            ..all_vectors()[3].1
        }
    );
    // 0x04 and 0x02 offer this stack's extensions; 0x01 means nothing.
    let res = with(&V2_REQ, |p| p.set_res(0x07));
    let r = FrameRepr::parse(&Packet::new_unchecked(&res[..])).unwrap();
    assert_eq!(
        r,
        FrameRepr {
            extensions: Extensions::ALL,
            ..all_vectors()[3].1
        }
    );
    let res = with(&V2_REQ, |p| p.set_res(0x01));
    let r = FrameRepr::parse(&Packet::new_unchecked(&res[..])).unwrap();
    assert_eq!(r, all_vectors()[3].1);
    let all = with(&V1_REQ_HELLO, |p| p.set_res(0x0f));
    assert!(FrameRepr::parse(&Packet::new_unchecked(&all[..])).is_ok());
}

// A Reply that agrees to both extensions: flags 0x56 (C, S, 0x04, 0x02), PD_Length 4 + 8
// + 2, the enhanced block, the extension block, then the application's "ok".
static V2_REP_EXT: [u8; 34] = [
    0x4d, 0x50, 0x41, 0x20, 0x49, 0x44, 0x20, 0x52, 0x65, 0x70, 0x20, 0x46, 0x72, 0x61, 0x6d, 0x65,
    0x56, 0x02, 0x00, 0x0e, 0x00, 0x10, 0x00, 0x10, 0x69, 0x57, 0x58, 0x01, 0x00, 0x00, 0x00, 0x03,
    0x6f, 0x6b,
];

#[test]
fn extension_block_in_a_reply() {
    let repr = FrameRepr {
        kind: FrameKind::Reply,
        markers: false,
        crc: true,
        reject: false,
        large_fpdus: false,
        rev: 2,
        enhanced: Some(EnhancedRepr {
            p2p: false,
            rtr: RtrFlags::NONE,
            ird: 16,
            ord: 16,
        }),
        extensions: Extensions::ALL,
        private_data: b"ok",
    };
    assert_eq!(repr.buffer_len(), V2_REP_EXT.len());
    let mut buf = vec![0u8; repr.buffer_len()];
    repr.emit(&mut Packet::new_unchecked(&mut buf[..]));
    assert_eq!(buf, V2_REP_EXT);
    let parsed = FrameRepr::parse(&Packet::new_unchecked(&V2_REP_EXT[..])).unwrap();
    assert_eq!(parsed, repr);
    // One flag bit with a block that says both: only what both say is agreed.
    let one = with(&V2_REP_EXT, |p| p.set_extension_flags(Extensions::READ_V2));
    let parsed = FrameRepr::parse(&Packet::new_unchecked(&one[..])).unwrap();
    assert_eq!(
        (parsed.extensions, parsed.private_data),
        (Extensions::READ_V2, &b"ok"[..])
    );
    // The bits without our block (someone else's experiment): nothing agreed, and the
    // private data is left whole.
    let mut foreign = V2_REP_EXT;
    foreign[24] = b'x';
    let parsed = FrameRepr::parse(&Packet::new_unchecked(&foreign[..])).unwrap();
    assert_eq!(parsed.extensions, Extensions::NONE);
    assert_eq!(parsed.private_data, &foreign[24..]);
    // A Request never carries the block: its private data is the application's.
    let mut req = V2_REP_EXT;
    req[..16].copy_from_slice(&KEY_REQUEST);
    let parsed = FrameRepr::parse(&Packet::new_unchecked(&req[..])).unwrap();
    assert_eq!(parsed.extensions, Extensions::ALL);
    assert_eq!(parsed.private_data, &req[24..]);
}
