//! Any DDP header at the start of a ULPDU, dispatched on the T bit.

use core::fmt;

use crate::wire::control::Control;
use crate::{DdpError, TaggedPacket, TaggedRepr, UntaggedPacket, UntaggedRepr};

/// A parsed DDP header of either kind.
#[derive(Copy, Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum SegmentRepr {
    /// A tagged segment (T=1).
    Tagged(TaggedRepr),
    /// An untagged segment (T=0).
    Untagged(UntaggedRepr),
}

impl SegmentRepr {
    /// Parses the DDP header at the start of a ULPDU (the octet after MPA's 2-octet
    /// ULPDU_Length). Returns the header and the payload, which is the rest of `ulpdu`.
    ///
    /// Checks: the ULPDU is at least as long as the header its T bit announces (else
    /// [`DdpError::Truncated`], also for an empty ULPDU); DV == 1 (else
    /// [`DdpError::TaggedVersion`] or [`DdpError::UntaggedVersion`] by the T bit).
    /// Reserved bits are ignored. Never panics.
    pub fn parse(ulpdu: &[u8]) -> Result<(Self, &[u8]), DdpError> {
        let control = Control::from_u8(*ulpdu.first().ok_or(DdpError::Truncated)?);
        if control.tagged() {
            let packet = TaggedPacket::new_checked(ulpdu)?;
            Ok((Self::Tagged(TaggedRepr::parse(&packet)?), packet.payload()))
        } else {
            let packet = UntaggedPacket::new_checked(ulpdu)?;
            Ok((
                Self::Untagged(UntaggedRepr::parse(&packet)?),
                packet.payload(),
            ))
        }
    }

    /// Header length: 14 for tagged, 18 for untagged.
    pub fn header_len(&self) -> usize {
        match self {
            Self::Tagged(t) => t.header_len(),
            Self::Untagged(u) => u.header_len(),
        }
    }

    /// The L bit.
    pub fn last(&self) -> bool {
        match self {
            Self::Tagged(t) => t.last,
            Self::Untagged(u) => u.last,
        }
    }

    /// Header octet 1 (RDMAP's control octet).
    pub fn rsvd_ulp(&self) -> u8 {
        match self {
            Self::Tagged(t) => t.rsvd_ulp,
            Self::Untagged(u) => u.rsvd_ulp,
        }
    }

    /// True for a tagged segment.
    pub fn is_tagged(&self) -> bool {
        matches!(self, Self::Tagged(_))
    }

    /// Writes exactly [`SegmentRepr::header_len`] octets into `buf[..header_len()]`.
    ///
    /// # Panics
    ///
    /// If `buf` is shorter than the header. This is the emit side: `buf` is our own
    /// buffer, never peer input.
    pub fn emit(&self, buf: &mut [u8]) {
        let header = &mut buf[..self.header_len()];
        match self {
            Self::Tagged(t) => t.emit(&mut TaggedPacket::new_unchecked(header)),
            Self::Untagged(u) => u.emit(&mut UntaggedPacket::new_unchecked(header)),
        }
    }
}

impl From<TaggedRepr> for SegmentRepr {
    fn from(repr: TaggedRepr) -> Self {
        Self::Tagged(repr)
    }
}

impl From<UntaggedRepr> for SegmentRepr {
    fn from(repr: UntaggedRepr) -> Self {
        Self::Untagged(repr)
    }
}

impl fmt::Display for SegmentRepr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Tagged(t) => t.fmt(f),
            Self::Untagged(u) => u.fmt(f),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{STag, TAGGED_HEADER_LEN, UNTAGGED_HEADER_LEN};
    use proptest::prelude::*;

    /// §5.4 RDMA Write header + payload 00..07.
    const WRITE: [u8; 22] = [
        0xc1, 0x40, 0x12, 0x34, 0x56, 0x78, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x10, 0x00, //
        0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07,
    ];

    /// §5.4 Send header + payload "ABCD".
    const SEND: [u8; 22] = [
        0x41, 0x43, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, //
        0x00, 0x00, 0x00, 0x00, b'A', b'B', b'C', b'D',
    ];

    /// §5.5 Terminate "DDP untagged no buffer": the DDP header of the Terminate.
    const TERMINATE_HDR: [u8; 18] = [
        0x41, 0x47, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x02, 0x00, 0x00, 0x00, 0x01, //
        0x00, 0x00, 0x00, 0x00,
    ];

    #[test]
    fn parse_dispatches_on_t_bit() {
        let (repr, payload) = SegmentRepr::parse(&WRITE).unwrap();
        assert_eq!(
            repr,
            SegmentRepr::Tagged(TaggedRepr {
                last: true,
                rsvd_ulp: 0x40,
                stag: STag::from_u32(0x1234_5678),
                to: 0x1000,
            })
        );
        assert!(repr.is_tagged());
        assert_eq!(repr.header_len(), TAGGED_HEADER_LEN);
        assert_eq!(repr.rsvd_ulp(), 0x40);
        assert!(repr.last());
        assert_eq!(payload, &[0, 1, 2, 3, 4, 5, 6, 7]);

        let (repr, payload) = SegmentRepr::parse(&SEND).unwrap();
        assert_eq!(
            repr,
            SegmentRepr::Untagged(UntaggedRepr {
                last: true,
                rsvd_ulp: 0x43,
                rsvd_ulp_ext: 0,
                qn: 0,
                msn: 1,
                mo: 0,
            })
        );
        assert!(!repr.is_tagged());
        assert_eq!(repr.header_len(), UNTAGGED_HEADER_LEN);
        assert_eq!(payload, b"ABCD");

        let (repr, payload) = SegmentRepr::parse(&TERMINATE_HDR).unwrap();
        assert_eq!(repr.rsvd_ulp(), 0x47);
        assert!(payload.is_empty());
    }

    #[test]
    fn emit_writes_exactly_the_header() {
        for literal in [&WRITE[..], &SEND[..]] {
            let (repr, payload) = SegmentRepr::parse(literal).unwrap();
            let mut buf = vec![0xa5u8; literal.len()];
            repr.emit(&mut buf);
            let hl = repr.header_len();
            assert_eq!(&buf[..hl], &literal[..hl]);
            assert!(buf[hl..].iter().all(|&b| b == 0xa5));
            buf[hl..].copy_from_slice(payload);
            assert_eq!(buf, literal);
        }
    }

    #[test]
    fn version_two_gives_version_error_by_t_bit() {
        let mut w = WRITE;
        w[0] = 0xc2;
        assert_eq!(SegmentRepr::parse(&w), Err(DdpError::TaggedVersion));
        w[0] = 0x82;
        assert_eq!(SegmentRepr::parse(&w), Err(DdpError::TaggedVersion));
        let mut s = SEND;
        s[0] = 0x42;
        assert_eq!(SegmentRepr::parse(&s), Err(DdpError::UntaggedVersion));
        s[0] = 0x02;
        assert_eq!(SegmentRepr::parse(&s), Err(DdpError::UntaggedVersion));
    }

    #[test]
    fn truncated_ulpdus_never_panic() {
        for len in 0..=UNTAGGED_HEADER_LEN {
            let tagged = SegmentRepr::parse(&WRITE[..len]);
            if len < TAGGED_HEADER_LEN {
                assert_eq!(tagged, Err(DdpError::Truncated), "tagged len {len}");
            } else {
                assert!(tagged.is_ok(), "tagged len {len}");
            }
            let untagged = SegmentRepr::parse(&SEND[..len]);
            if len < UNTAGGED_HEADER_LEN {
                assert_eq!(untagged, Err(DdpError::Truncated), "untagged len {len}");
            } else {
                assert!(untagged.is_ok(), "untagged len {len}");
            }
        }
        // An untagged control octet on a 14..17-octet ULPDU is still too short.
        assert_eq!(SegmentRepr::parse(&SEND[..14]), Err(DdpError::Truncated));
    }

    #[test]
    #[should_panic]
    fn emit_into_short_buffer_panics() {
        let (repr, _) = SegmentRepr::parse(&SEND).unwrap();
        repr.emit(&mut [0u8; 17]);
    }

    fn any_repr() -> impl Strategy<Value = SegmentRepr> {
        let tagged = (any::<bool>(), any::<u8>(), any::<u32>(), any::<u64>()).prop_map(
            |(last, rsvd_ulp, stag, to)| {
                SegmentRepr::Tagged(TaggedRepr {
                    last,
                    rsvd_ulp,
                    stag: STag::from_u32(stag),
                    to,
                })
            },
        );
        let untagged = (
            any::<bool>(),
            any::<u8>(),
            any::<u32>(),
            any::<u32>(),
            any::<u32>(),
            any::<u32>(),
        )
            .prop_map(|(last, rsvd_ulp, rsvd_ulp_ext, qn, msn, mo)| {
                SegmentRepr::Untagged(UntaggedRepr {
                    last,
                    rsvd_ulp,
                    rsvd_ulp_ext,
                    qn,
                    msn,
                    mo,
                })
            });
        prop_oneof![tagged, untagged]
    }

    proptest! {
        #[test]
        fn parse_emit_round_trip(
            repr in any_repr(),
            payload in proptest::collection::vec(any::<u8>(), 0..64),
        ) {
            let mut buf = vec![0xa5u8; repr.header_len()];
            repr.emit(&mut buf);
            buf.extend_from_slice(&payload);
            let (parsed, rest) = SegmentRepr::parse(&buf).unwrap();
            prop_assert_eq!(parsed, repr);
            prop_assert_eq!(rest, &payload[..]);
        }

        #[test]
        fn parse_arbitrary_bytes_never_panics(
            bytes in proptest::collection::vec(any::<u8>(), 0..40),
        ) {
            match SegmentRepr::parse(&bytes) {
                Ok((repr, payload)) => {
                    prop_assert_eq!(repr.header_len() + payload.len(), bytes.len());
                    prop_assert_eq!(bytes[0] & 0x03, 1);
                }
                Err(e) => prop_assert!(matches!(
                    e,
                    DdpError::Truncated | DdpError::TaggedVersion | DdpError::UntaggedVersion
                )),
            }
        }
    }
}
