//! Byte-literal tests for the Atomic Request and Response headers (wire-format.md §5.4).

use super::*;
use crate::wire::test_util::{hex, ulpdu};
use proptest::prelude::*;

/// §5.4 Atomic Request FetchAdd FPDU.
const FETCH_ADD_FPDU: &str = "0000: 00 46 41 4a 00 00 00 00 00 00 00 01 00 00 00 01
    0010: 00 00 00 00 00 00 00 00 00 00 00 01 aa bb cc dd
    0020: 00 00 00 00 00 00 00 40 00 00 00 00 00 00 00 01
    0030: 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00
    0040: ff ff ff ff ff ff ff ff 07 89 aa 26";

/// §5.4 Atomic Request CmpSwap FPDU.
const CMP_SWAP_FPDU: &str = "0000: 00 46 41 4a 00 00 00 00 00 00 00 01 00 00 00 02
    0010: 00 00 00 00 00 00 00 02 00 00 00 02 aa bb cc dd
    0020: 00 00 00 00 00 00 00 48 11 11 11 11 11 11 11 11
    0030: ff ff ff ff ff ff ff ff 22 22 22 22 22 22 22 22
    0040: ff ff ff ff ff ff ff ff fb ee b2 75";

/// §5.4 Atomic Response FPDU.
const RESPONSE_FPDU: &str = "0000: 00 1e 41 4b 00 00 00 00 00 00 00 03 00 00 00 01
    0010: 00 00 00 00 00 00 00 01 00 00 00 00 00 00 00 05
    0020: e5 b2 0f b6";

/// The RDMAP header of an FPDU: strip MPA length, DDP untagged header, pad and CRC.
fn rdmap_header(fpdu: &str) -> Vec<u8> {
    let f = hex(fpdu);
    ulpdu(&f)[18..].to_vec()
}

const STAG: u32 = 0xaabb_ccdd;

fn fetch_add_repr() -> AtomicRequestRepr {
    AtomicRequestRepr::fetch_add(1, STag::from_u32(STAG), 0x40, 1)
}

fn cmp_swap_repr() -> AtomicRequestRepr {
    AtomicRequestRepr::cmp_swap(
        2,
        STag::from_u32(STAG),
        0x48,
        0x2222_2222_2222_2222,
        0x1111_1111_1111_1111,
    )
}

#[test]
fn vector_lengths() {
    assert_eq!(rdmap_header(FETCH_ADD_FPDU).len(), ATOMIC_REQUEST_LEN);
    assert_eq!(rdmap_header(CMP_SWAP_FPDU).len(), ATOMIC_REQUEST_LEN);
    assert_eq!(rdmap_header(RESPONSE_FPDU).len(), ATOMIC_RESPONSE_LEN);
}

#[test]
fn request_deconstruct() {
    let bytes = rdmap_header(CMP_SWAP_FPDU);
    let p = AtomicRequestPacket::new_checked(&bytes[..]).unwrap();
    assert_eq!(p.op(), AtomicOp::CmpSwap);
    assert_eq!(p.req_id(), 2);
    assert_eq!(p.stag(), STag::from_u32(STAG));
    assert_eq!(p.to(), 0x48);
    assert_eq!(p.add_or_swap(), 0x1111_1111_1111_1111);
    assert_eq!(p.add_or_swap_mask(), u64::MAX);
    assert_eq!(p.compare(), 0x2222_2222_2222_2222);
    assert_eq!(p.compare_mask(), u64::MAX);

    let bytes = rdmap_header(FETCH_ADD_FPDU);
    let p = AtomicRequestPacket::new_checked(&bytes[..]).unwrap();
    assert_eq!(p.op(), AtomicOp::FetchAdd);
    assert_eq!(p.req_id(), 1);
    assert_eq!(p.to(), 0x40);
    assert_eq!(p.add_or_swap(), 1);
    assert_eq!(p.add_or_swap_mask(), 0);
    assert_eq!(p.compare(), 0);
    assert_eq!(p.compare_mask(), u64::MAX);
}

#[test]
fn request_construct() {
    let mut buf = [0xa5u8; ATOMIC_REQUEST_LEN];
    let mut p = AtomicRequestPacket::new_unchecked(&mut buf[..]);
    p.set_op(AtomicOp::CmpSwap);
    p.set_req_id(2);
    p.set_stag(STag::from_u32(STAG));
    p.set_to(0x48);
    p.set_add_or_swap(0x1111_1111_1111_1111);
    p.set_add_or_swap_mask(u64::MAX);
    p.set_compare(0x2222_2222_2222_2222);
    p.set_compare_mask(u64::MAX);
    assert_eq!(&buf[..], &rdmap_header(CMP_SWAP_FPDU)[..]);
}

#[test]
fn request_parse() {
    assert_eq!(
        AtomicRequestRepr::parse(&rdmap_header(FETCH_ADD_FPDU)),
        Ok(fetch_add_repr())
    );
    assert_eq!(
        AtomicRequestRepr::parse(&rdmap_header(CMP_SWAP_FPDU)),
        Ok(cmp_swap_repr())
    );
}

#[test]
fn request_parse_ignores_reserved_bits() {
    let mut bytes = rdmap_header(CMP_SWAP_FPDU);
    bytes[0] = 0xff;
    bytes[3] = 0xf2;
    assert_eq!(AtomicRequestRepr::parse(&bytes), Ok(cmp_swap_repr()));
}

#[test]
fn request_unknown_ops_are_kept() {
    // urdma's CmpSwap (1) is reserved in RFC 7306.
    let mut bytes = rdmap_header(CMP_SWAP_FPDU);
    bytes[3] = 0x01;
    let r = AtomicRequestRepr::parse(&bytes).unwrap();
    assert_eq!(r.op, AtomicOp::Unknown(1));
}

#[test]
fn request_emit() {
    for (repr, fpdu) in [
        (fetch_add_repr(), FETCH_ADD_FPDU),
        (cmp_swap_repr(), CMP_SWAP_FPDU),
    ] {
        let mut buf = [0xa5u8; ATOMIC_REQUEST_LEN];
        repr.emit(&mut buf);
        assert_eq!(&buf[..], &rdmap_header(fpdu)[..]);
    }
    assert_eq!(AtomicRequestRepr::buffer_len(), 52);
}

#[test]
fn request_impossible_len() {
    let bytes = rdmap_header(FETCH_ADD_FPDU);
    for len in 0..ATOMIC_REQUEST_LEN {
        assert_eq!(
            AtomicRequestPacket::new_checked(&bytes[..len]).err(),
            Some(WireError::Truncated)
        );
        assert_eq!(
            AtomicRequestRepr::parse(&bytes[..len]),
            Err(WireError::Truncated)
        );
    }
}

#[test]
fn response_deconstruct() {
    let bytes = rdmap_header(RESPONSE_FPDU);
    let p = AtomicResponsePacket::new_checked(&bytes[..]).unwrap();
    assert_eq!(p.req_id(), 1);
    assert_eq!(p.orig(), 5);
}

#[test]
fn response_construct() {
    let mut buf = [0xa5u8; ATOMIC_RESPONSE_LEN];
    let mut p = AtomicResponsePacket::new_unchecked(&mut buf[..]);
    p.set_req_id(1);
    p.set_orig(5);
    assert_eq!(&buf[..], &rdmap_header(RESPONSE_FPDU)[..]);
}

#[test]
fn response_parse_and_emit() {
    let repr = AtomicResponseRepr { req_id: 1, orig: 5 };
    let bytes = rdmap_header(RESPONSE_FPDU);
    assert_eq!(AtomicResponseRepr::parse(&bytes), Ok(repr));
    let mut buf = [0xa5u8; ATOMIC_RESPONSE_LEN];
    repr.emit(&mut buf);
    assert_eq!(&buf[..], &bytes[..]);
    assert_eq!(AtomicResponseRepr::buffer_len(), 12);
}

#[test]
fn response_impossible_len() {
    let bytes = rdmap_header(RESPONSE_FPDU);
    for len in 0..ATOMIC_RESPONSE_LEN {
        assert_eq!(
            AtomicResponsePacket::new_checked(&bytes[..len]).err(),
            Some(WireError::Truncated)
        );
        assert_eq!(
            AtomicResponseRepr::parse(&bytes[..len]),
            Err(WireError::Truncated)
        );
    }
}

#[test]
fn atomic_op_round_trip() {
    for v in 0..=u8::MAX {
        assert_eq!(u8::from(AtomicOp::from(v)), v);
    }
    assert_eq!(AtomicOp::from(0), AtomicOp::FetchAdd);
    assert_eq!(AtomicOp::from(2), AtomicOp::CmpSwap);
    assert_eq!(AtomicOp::from(1), AtomicOp::Unknown(1));
}

fn any_op() -> impl Strategy<Value = AtomicOp> {
    // Only the low 4 bits travel; From<u8> is canonical for them.
    (0u8..16).prop_map(AtomicOp::from)
}

proptest! {
    #[test]
    fn request_round_trip(
        op in any_op(), req_id: u32, stag: u32, to: u64,
        a: u64, b: u64, c: u64, d: u64,
    ) {
        let r = AtomicRequestRepr {
            op, req_id, stag: STag::from_u32(stag), to,
            add_or_swap: a, add_or_swap_mask: b, compare: c, compare_mask: d,
        };
        let mut buf = [0u8; ATOMIC_REQUEST_LEN];
        r.emit(&mut buf);
        prop_assert_eq!(AtomicRequestRepr::parse(&buf), Ok(r));
    }

    #[test]
    fn response_round_trip(req_id: u32, orig: u64) {
        let r = AtomicResponseRepr { req_id, orig };
        let mut buf = [0u8; ATOMIC_RESPONSE_LEN];
        r.emit(&mut buf);
        prop_assert_eq!(AtomicResponseRepr::parse(&buf), Ok(r));
    }

    #[test]
    fn parse_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..80)) {
        let _ = AtomicRequestRepr::parse(&bytes);
        let _ = AtomicResponseRepr::parse(&bytes);
    }
}
