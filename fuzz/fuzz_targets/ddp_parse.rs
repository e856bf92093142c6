//! `ddp::SegmentRepr::parse` on arbitrary ULPDUs.
//!
//! On success the header is emitted again and must equal the input header octets, except
//! the four reserved bits of the control octet (0x3C), which parse ignores and emit writes
//! as zero; the payload must be exactly the octets after the header, and re-parsing the
//! emitted header must give the same `SegmentRepr`. On failure the error must be one that
//! `parse` documents.
#![no_main]

use ddp::wire::control::RSVD_MASK;
use ddp::{DdpError, SegmentRepr, TAGGED_HEADER_LEN, UNTAGGED_HEADER_LEN};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    match SegmentRepr::parse(data) {
        Ok((repr, payload)) => {
            let hl = repr.header_len();
            let expected_hl = if data[0] & 0x80 != 0 {
                TAGGED_HEADER_LEN
            } else {
                UNTAGGED_HEADER_LEN
            };
            assert_eq!(hl, expected_hl);
            assert_eq!(repr.is_tagged(), data[0] & 0x80 != 0);
            assert_eq!(payload, &data[hl..], "payload");

            let mut buf = vec![0xa5u8; hl];
            repr.emit(&mut buf);
            let mut want = data[..hl].to_vec();
            want[0] &= !RSVD_MASK;
            assert_eq!(buf, want, "emitted header differs from the input");

            let (again, rest) = SegmentRepr::parse(&buf).expect("re-parse of our own header");
            assert_eq!(again, repr);
            assert!(rest.is_empty());
        }
        Err(e) => {
            assert!(
                matches!(
                    e,
                    DdpError::Truncated | DdpError::TaggedVersion | DdpError::UntaggedVersion
                ),
                "undocumented parse error {e:?}"
            );
            match data.first() {
                None => assert_eq!(e, DdpError::Truncated),
                Some(&c) => {
                    let hl = if c & 0x80 != 0 {
                        TAGGED_HEADER_LEN
                    } else {
                        UNTAGGED_HEADER_LEN
                    };
                    assert_eq!(e == DdpError::Truncated, data.len() < hl, "{e:?}");
                }
            }
        }
    }
});
