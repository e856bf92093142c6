//! The §1.9, §3.6 and §4.3 tables, row by row.

use super::*;

/// (constant, expected Terminate Control octets 0 and 1) for every row of the tables.
const ROWS: &[(TermCode, [u8; 2])] = &[
    // §4.3 RDMAP
    (TermCode::RDMAP_LOCAL_CATASTROPHIC, [0x00, 0x00]),
    (TermCode::INVALID_STAG, [0x01, 0x00]),
    (TermCode::BASE_BOUNDS, [0x01, 0x01]),
    (TermCode::ACCESS_RIGHTS, [0x01, 0x02]),
    (TermCode::STAG_NOT_ASSOCIATED, [0x01, 0x03]),
    (TermCode::TO_WRAP, [0x01, 0x04]),
    (TermCode::PROT_CANNOT_INVALIDATE, [0x01, 0x09]),
    (TermCode::PROT_UNSPECIFIED, [0x01, 0xff]),
    (TermCode::INVALID_RDMAP_VERSION, [0x02, 0x05]),
    (TermCode::UNEXPECTED_OPCODE, [0x02, 0x06]),
    (TermCode::CATASTROPHIC_STREAM, [0x02, 0x07]),
    (TermCode::CATASTROPHIC_GLOBAL, [0x02, 0x08]),
    (TermCode::OP_CANNOT_INVALIDATE, [0x02, 0x09]),
    (TermCode::OP_UNSPECIFIED, [0x02, 0xff]),
    // §3.6 DDP
    (TermCode::DDP_LOCAL_CATASTROPHIC, [0x10, 0x00]),
    (TermCode::DDP_INVALID_STAG, [0x11, 0x00]),
    (TermCode::DDP_BASE_BOUNDS, [0x11, 0x01]),
    (TermCode::DDP_STAG_NOT_ASSOCIATED, [0x11, 0x02]),
    (TermCode::DDP_TO_WRAP, [0x11, 0x03]),
    (TermCode::DDP_TAGGED_INVALID_VERSION, [0x11, 0x04]),
    (TermCode::DDP_INVALID_QN, [0x12, 0x01]),
    (TermCode::DDP_NO_BUFFER, [0x12, 0x02]),
    (TermCode::DDP_MSN_RANGE, [0x12, 0x03]),
    (TermCode::DDP_INVALID_MO, [0x12, 0x04]),
    (TermCode::DDP_TOO_LONG, [0x12, 0x05]),
    (TermCode::DDP_UNTAGGED_INVALID_VERSION, [0x12, 0x06]),
    // §1.9 MPA
    (TermCode::MPA_TCP_LOST, [0x20, 0x01]),
    (TermCode::MPA_CRC, [0x20, 0x02]),
    (TermCode::MPA_MARKER, [0x20, 0x03]),
    (TermCode::MPA_INVALID_FRAME, [0x20, 0x04]),
    (TermCode::MPA_LOCAL_CATASTROPHIC, [0x20, 0x05]),
    (TermCode::MPA_INSUFFICIENT_IRD, [0x20, 0x06]),
    (TermCode::MPA_NO_MATCHING_RTR, [0x20, 0x07]),
];

#[test]
fn every_row_to_wire() {
    for (code, wire) in ROWS {
        assert_eq!(code.to_wire(), *wire, "{code:?}");
        assert_eq!(TermCode::from_wire(*wire), *code, "{code:?}");
    }
}

#[test]
fn table_is_exactly_the_rows() {
    assert_eq!(TermCode::ALL.len(), ROWS.len());
    for (code, _) in ROWS {
        assert!(TermCode::ALL.contains(code), "{code:?}");
        assert!(code.name().is_some(), "{code:?}");
    }
    // No two named constants share a wire value.
    for (i, a) in TermCode::ALL.iter().enumerate() {
        for b in &TermCode::ALL[i + 1..] {
            assert_ne!(a.to_wire(), b.to_wire(), "{a:?} / {b:?}");
        }
    }
}

#[test]
fn section_5_7_octets() {
    assert_eq!(TermCode::MPA_CRC.to_wire(), [0x20, 0x02]);
    assert_eq!(TermCode::llp(7).to_wire(), [0x20, 0x07]);
    assert_eq!(TermCode::llp(6), TermCode::MPA_INSUFFICIENT_IRD);
    assert_eq!(
        TermCode::from_ddp(DdpError::NoBuffer).to_wire(),
        [0x12, 0x02]
    );
    assert_eq!(
        TermCode::from_ddp(DdpError::InvalidQn).to_wire(),
        [0x12, 0x01]
    );
    assert_eq!(
        TermCode::from_ddp(DdpError::TaggedVersion).to_wire(),
        [0x11, 0x04]
    );
    assert_eq!(TermCode::INVALID_STAG.to_wire(), [0x01, 0x00]);
    assert_eq!(TermCode::INVALID_RDMAP_VERSION.to_wire(), [0x02, 0x05]);
    assert_eq!(TermCode::UNEXPECTED_OPCODE.to_wire(), [0x02, 0x06]);
}

#[test]
fn every_ddp_error_has_a_named_constant() {
    let errors = [
        (
            DdpError::LocalCatastrophic,
            TermCode::DDP_LOCAL_CATASTROPHIC,
        ),
        (DdpError::InvalidStag, TermCode::DDP_INVALID_STAG),
        (DdpError::BaseBounds, TermCode::DDP_BASE_BOUNDS),
        (
            DdpError::StagNotAssociated,
            TermCode::DDP_STAG_NOT_ASSOCIATED,
        ),
        (DdpError::ToWrap, TermCode::DDP_TO_WRAP),
        (
            DdpError::TaggedVersion,
            TermCode::DDP_TAGGED_INVALID_VERSION,
        ),
        (DdpError::InvalidQn, TermCode::DDP_INVALID_QN),
        (DdpError::NoBuffer, TermCode::DDP_NO_BUFFER),
        (DdpError::MsnRange, TermCode::DDP_MSN_RANGE),
        (DdpError::InvalidMo, TermCode::DDP_INVALID_MO),
        (DdpError::TooLong, TermCode::DDP_TOO_LONG),
        (
            DdpError::UntaggedVersion,
            TermCode::DDP_UNTAGGED_INVALID_VERSION,
        ),
        (DdpError::Truncated, TermCode::DDP_LOCAL_CATASTROPHIC),
    ];
    for (e, code) in errors {
        assert_eq!(TermCode::from_ddp(e), code, "{e:?}");
        assert_eq!(TermCode::from(e), code, "{e:?}");
        assert_eq!(code.layer(), Layer::Ddp);
    }
}

#[test]
fn from_wire_is_total_and_canonical() {
    for hi in 0..=u8::MAX {
        for lo in [0x00, 0x02, 0x09, 0xff] {
            let c = TermCode::from_wire([hi, lo]);
            assert_eq!(c.to_wire(), [hi, lo]);
            assert_eq!(u8::from(c.layer()), hi >> 4);
            assert_eq!(c.etype(), hi & 0x0f);
            assert_eq!(c.code(), lo);
            // Every code has some description and a Debug form.
            assert!(!c.description().is_empty());
            assert!(format!("{c:?}").starts_with("TermCode("));
        }
    }
}

#[test]
fn new_is_canonical() {
    assert_eq!(
        TermCode::new(Layer::Unknown(1), 0x12, 2),
        TermCode::DDP_NO_BUFFER
    );
    assert_eq!(
        TermCode::new(Layer::Unknown(0x12), 0, 4),
        TermCode::MPA_INVALID_FRAME
    );
    assert_eq!(Layer::from(0x21), Layer::Ddp);
    assert_eq!(Layer::from(5), Layer::Unknown(5));
    assert_eq!(u8::from(Layer::Llp), 2);
}

#[test]
fn descriptions() {
    assert_eq!(
        TermCode::DDP_INVALID_STAG.description(),
        "DDP tagged: invalid STag"
    );
    assert_eq!(
        TermCode::DDP_NO_BUFFER.description(),
        "DDP untagged: invalid MSN - no buffer available"
    );
    assert_eq!(TermCode::MPA_CRC.description(), "MPA: CRC error");
    assert_eq!(
        TermCode::INVALID_STAG.description(),
        "RDMAP remote protection: invalid STag"
    );
    assert_eq!(
        TermCode::UNEXPECTED_OPCODE.description(),
        "RDMAP remote operation: unexpected OpCode"
    );
    // Local catastrophic has no codes: any code octet is the same error.
    let siw = TermCode::from_wire([0x00, 0xff]);
    assert_eq!(siw.description(), "RDMAP: local catastrophic error");
    assert_eq!(siw.name(), Some("RDMAP_LOCAL_CATASTROPHIC"));
    // Unknown combinations get a generic text.
    assert_eq!(
        TermCode::from_wire([0x01, 0x42]).description(),
        "RDMAP remote protection: unknown error code"
    );
    assert_eq!(TermCode::from_wire([0x12, 0x00]).name(), None);
    assert_eq!(
        TermCode::from_wire([0x12, 0x00]).description(),
        "DDP untagged: unknown error code"
    );
    assert_eq!(
        TermCode::from_wire([0x20, 0x08]).description(),
        "MPA: unknown error code"
    );
    assert_eq!(
        TermCode::from_wire([0x50, 0x01]).description(),
        "unknown Terminate layer"
    );
}

#[test]
fn debug_and_display() {
    assert_eq!(
        format!("{:?}", TermCode::DDP_NO_BUFFER),
        "TermCode(DDP/untagged/0x02: invalid MSN - no buffer available)"
    );
    assert_eq!(
        format!("{:?}", TermCode::MPA_CRC),
        "TermCode(LLP/MPA/0x02: CRC error)"
    );
    assert_eq!(
        format!("{:?}", TermCode::from_wire([0x73, 0x11])),
        "TermCode(layer 0x7/etype 0x3/0x11: unknown code)"
    );
    assert_eq!(
        TermCode::INVALID_STAG.to_string(),
        "RDMAP remote protection: invalid STag [01 00]"
    );
}

#[test]
fn which_headers_are_copied() {
    // RFC 5040 Fig. 10.
    let cases = [
        (TermCode::RDMAP_LOCAL_CATASTROPHIC, false, false),
        (TermCode::INVALID_STAG, true, true),
        (TermCode::PROT_CANNOT_INVALIDATE, true, true),
        (TermCode::UNEXPECTED_OPCODE, true, false),
        (TermCode::CATASTROPHIC_STREAM, true, false),
        (TermCode::DDP_LOCAL_CATASTROPHIC, true, false),
        (TermCode::DDP_INVALID_STAG, true, false),
        (TermCode::DDP_NO_BUFFER, true, false),
        (TermCode::MPA_CRC, false, false),
        (TermCode::MPA_NO_MATCHING_RTR, false, false),
        (TermCode::from_wire([0x03, 0x00]), false, false),
        (TermCode::from_wire([0x90, 0x00]), false, false),
    ];
    for (code, ddp, rdma) in cases {
        assert_eq!(code.copies_ddp_header(), ddp, "{code:?}");
        assert_eq!(code.copies_rdma_header(), rdma, "{code:?}");
    }
}
