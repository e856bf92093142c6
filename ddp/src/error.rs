//! DDP errors and their Terminate codes (RFC 5041 §7.2, RFC 6580 §3.2).

use core::fmt;

/// A DDP-layer error, each variant mapping to the Terminate Error Type and Error Code
/// of RFC 5041 §7.2 (Terminate Layer [`DdpError::LAYER`] = 1).
///
/// [`DdpError::Truncated`] is not an RFC code: a ULPDU shorter than its own DDP header
/// cannot be placed at all, so it is reported as Local Catastrophic (EType 0, Code 0).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum DdpError {
    /// Local catastrophic error (EType 0, Code 0).
    LocalCatastrophic,
    /// Tagged: invalid STag (EType 1, Code 0).
    InvalidStag,
    /// Tagged: base or bounds violation (EType 1, Code 1).
    BaseBounds,
    /// Tagged: STag not associated with this DDP stream (EType 1, Code 2).
    StagNotAssociated,
    /// Tagged: TO + segment length wraps 2^64 (EType 1, Code 3).
    ToWrap,
    /// Tagged: invalid DDP version (EType 1, Code 4).
    TaggedVersion,
    /// Untagged: invalid QN (EType 2, Code 1).
    InvalidQn,
    /// Untagged: invalid MSN, no buffer available (EType 2, Code 2).
    NoBuffer,
    /// Untagged: invalid MSN, MSN range not valid (EType 2, Code 3).
    MsnRange,
    /// Untagged: invalid MO (EType 2, Code 4).
    InvalidMo,
    /// Untagged: DDP message too long for the available buffer (EType 2, Code 5).
    TooLong,
    /// Untagged: invalid DDP version (EType 2, Code 6).
    UntaggedVersion,
    /// The ULPDU is shorter than the DDP header its T bit announces (or empty).
    /// Reported on the wire as Local Catastrophic (EType 0, Code 0).
    Truncated,
}

impl DdpError {
    /// The Terminate Layer value of every DDP error.
    pub const LAYER: u8 = 1;

    /// Terminate Error Type: 0 local catastrophic, 1 tagged buffer, 2 untagged buffer.
    pub const fn etype(self) -> u8 {
        self.codes().0
    }

    /// Terminate Error Code within [`DdpError::etype`].
    pub const fn code(self) -> u8 {
        self.codes().1
    }

    /// The error for a received Terminate (Layer 1) EType/Code pair, if it is one that
    /// RFC 5041 defines. (0, 0) maps to [`DdpError::LocalCatastrophic`].
    pub const fn from_etype_code(etype: u8, code: u8) -> Option<Self> {
        Some(match (etype, code) {
            (0, 0) => Self::LocalCatastrophic,
            (1, 0) => Self::InvalidStag,
            (1, 1) => Self::BaseBounds,
            (1, 2) => Self::StagNotAssociated,
            (1, 3) => Self::ToWrap,
            (1, 4) => Self::TaggedVersion,
            (2, 1) => Self::InvalidQn,
            (2, 2) => Self::NoBuffer,
            (2, 3) => Self::MsnRange,
            (2, 4) => Self::InvalidMo,
            (2, 5) => Self::TooLong,
            (2, 6) => Self::UntaggedVersion,
            _ => return None,
        })
    }

    /// A short human-readable description (the RFC 6580 registry name).
    pub fn description(self) -> &'static str {
        match self {
            Self::LocalCatastrophic => "local catastrophic error",
            Self::InvalidStag => "invalid STag",
            Self::BaseBounds => "base or bounds violation",
            Self::StagNotAssociated => "STag not associated with DDP stream",
            Self::ToWrap => "TO wrap",
            Self::TaggedVersion => "invalid DDP version (tagged)",
            Self::InvalidQn => "invalid QN",
            Self::NoBuffer => "invalid MSN - no buffer available",
            Self::MsnRange => "invalid MSN - MSN range not valid",
            Self::InvalidMo => "invalid MO",
            Self::TooLong => "DDP message too long for available buffer",
            Self::UntaggedVersion => "invalid DDP version (untagged)",
            Self::Truncated => "DDP segment shorter than its header",
        }
    }

    const fn codes(self) -> (u8, u8) {
        match self {
            Self::LocalCatastrophic | Self::Truncated => (0, 0),
            Self::InvalidStag => (1, 0),
            Self::BaseBounds => (1, 1),
            Self::StagNotAssociated => (1, 2),
            Self::ToWrap => (1, 3),
            Self::TaggedVersion => (1, 4),
            Self::InvalidQn => (2, 1),
            Self::NoBuffer => (2, 2),
            Self::MsnRange => (2, 3),
            Self::InvalidMo => (2, 4),
            Self::TooLong => (2, 5),
            Self::UntaggedVersion => (2, 6),
        }
    }
}

impl fmt::Display for DdpError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} (DDP etype {:#x}, code {:#04x})",
            self.description(),
            self.etype(),
            self.code()
        )
    }
}

impl std::error::Error for DdpError {}

#[cfg(test)]
mod tests {
    use super::*;

    const ALL: [(DdpError, u8, u8); 13] = [
        (DdpError::LocalCatastrophic, 0, 0),
        (DdpError::InvalidStag, 1, 0),
        (DdpError::BaseBounds, 1, 1),
        (DdpError::StagNotAssociated, 1, 2),
        (DdpError::ToWrap, 1, 3),
        (DdpError::TaggedVersion, 1, 4),
        (DdpError::InvalidQn, 2, 1),
        (DdpError::NoBuffer, 2, 2),
        (DdpError::MsnRange, 2, 3),
        (DdpError::InvalidMo, 2, 4),
        (DdpError::TooLong, 2, 5),
        (DdpError::UntaggedVersion, 2, 6),
        (DdpError::Truncated, 0, 0),
    ];

    #[test]
    fn codes_match_rfc_table() {
        for (err, etype, code) in ALL {
            assert_eq!((err.etype(), err.code()), (etype, code), "{err:?}");
        }
    }

    #[test]
    fn from_etype_code_round_trips() {
        for (err, etype, code) in ALL {
            let back = DdpError::from_etype_code(etype, code).unwrap();
            let expect = if err == DdpError::Truncated {
                DdpError::LocalCatastrophic
            } else {
                err
            };
            assert_eq!(back, expect);
        }
        assert_eq!(DdpError::from_etype_code(2, 0), None);
        assert_eq!(DdpError::from_etype_code(1, 5), None);
        assert_eq!(DdpError::from_etype_code(3, 0), None);
    }

    #[test]
    fn terminate_octets_of_section_5_7() {
        // Layer in the high nibble, EType in the low nibble, then the code octet.
        let octets = |e: DdpError| [(DdpError::LAYER << 4) | e.etype(), e.code()];
        assert_eq!(octets(DdpError::InvalidQn), [0x12, 0x01]);
        assert_eq!(octets(DdpError::MsnRange), [0x12, 0x03]);
        assert_eq!(octets(DdpError::NoBuffer), [0x12, 0x02]);
        assert_eq!(octets(DdpError::TooLong), [0x12, 0x05]);
        assert_eq!(octets(DdpError::InvalidMo), [0x12, 0x04]);
        assert_eq!(octets(DdpError::TaggedVersion), [0x11, 0x04]);
        assert_eq!(octets(DdpError::UntaggedVersion), [0x12, 0x06]);
        assert_eq!(octets(DdpError::InvalidStag), [0x11, 0x00]);
        assert_eq!(octets(DdpError::BaseBounds), [0x11, 0x01]);
        assert_eq!(octets(DdpError::ToWrap), [0x11, 0x03]);
    }

    #[test]
    fn display() {
        assert_eq!(
            DdpError::TooLong.to_string(),
            "DDP message too long for available buffer (DDP etype 0x2, code 0x05)"
        );
        let e: Box<dyn std::error::Error> = Box::new(DdpError::Truncated);
        assert!(e.to_string().starts_with("DDP segment shorter"));
    }
}
