//! The DDP control octet: octet 0 of every DDP header (RFC 5041 §4.2, §4.3).
//!
//! ```text
//!  0x80  0x40  0x3C      0x03
//! +----+----+---------+------+
//! | T  | L  | Rsvd(4) | DV(2)|
//! +----+----+---------+------+
//! ```

use core::fmt;

use crate::{DDP_VERSION, DdpError, TAGGED_HEADER_LEN, UNTAGGED_HEADER_LEN};

/// T bit: set on tagged segments.
pub const TAGGED_BIT: u8 = 0x80;
/// L bit: set only on the last segment of a message.
pub const LAST_BIT: u8 = 0x40;
/// Reserved bits: sent as zero, ignored on receive.
pub const RSVD_MASK: u8 = 0x3C;
/// DV field: the DDP version.
pub const DV_MASK: u8 = 0x03;

/// Control octet of a non-last untagged segment.
pub const UNTAGGED_MIDDLE: u8 = 0x01;
/// Control octet of a last untagged segment.
pub const UNTAGGED_LAST: u8 = 0x41;
/// Control octet of a non-last tagged segment.
pub const TAGGED_MIDDLE: u8 = 0x81;
/// Control octet of a last tagged segment.
pub const TAGGED_LAST: u8 = 0xC1;

/// A typed view of one control octet. Any `u8` is a valid `Control`; the reserved bits
/// are kept as received but never interpreted.
#[derive(Copy, Clone, PartialEq, Eq, Hash)]
pub struct Control(u8);

impl Control {
    /// The control octet we send: the given T and L bits, reserved bits zero, DV =
    /// [`DDP_VERSION`].
    pub const fn new(tagged: bool, last: bool) -> Self {
        let mut octet = DDP_VERSION & DV_MASK;
        if tagged {
            octet |= TAGGED_BIT;
        }
        if last {
            octet |= LAST_BIT;
        }
        Self(octet)
    }

    /// Wraps a received octet.
    pub const fn from_u8(octet: u8) -> Self {
        Self(octet)
    }

    /// The raw octet.
    pub const fn to_u8(self) -> u8 {
        self.0
    }

    /// The T bit.
    pub const fn tagged(self) -> bool {
        self.0 & TAGGED_BIT != 0
    }

    /// The L bit.
    pub const fn last(self) -> bool {
        self.0 & LAST_BIT != 0
    }

    /// The DV field (0..=3).
    pub const fn version(self) -> u8 {
        self.0 & DV_MASK
    }

    /// Length of the header this octet starts: 14 if tagged, else 18.
    pub const fn header_len(self) -> usize {
        if self.tagged() {
            TAGGED_HEADER_LEN
        } else {
            UNTAGGED_HEADER_LEN
        }
    }

    /// Checks DV == [`DDP_VERSION`]. The error depends on the T bit:
    /// [`DdpError::TaggedVersion`] or [`DdpError::UntaggedVersion`].
    pub const fn check_version(self) -> Result<(), DdpError> {
        if self.version() == DDP_VERSION {
            Ok(())
        } else if self.tagged() {
            Err(DdpError::TaggedVersion)
        } else {
            Err(DdpError::UntaggedVersion)
        }
    }
}

impl From<u8> for Control {
    fn from(octet: u8) -> Self {
        Self::from_u8(octet)
    }
}

impl From<Control> for u8 {
    fn from(c: Control) -> Self {
        c.to_u8()
    }
}

impl fmt::Debug for Control {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "Control({:#04x} T={} L={} DV={})",
            self.0,
            u8::from(self.tagged()),
            u8::from(self.last()),
            self.version()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn common_octets() {
        assert_eq!(Control::new(false, false).to_u8(), UNTAGGED_MIDDLE);
        assert_eq!(Control::new(false, true).to_u8(), UNTAGGED_LAST);
        assert_eq!(Control::new(true, false).to_u8(), TAGGED_MIDDLE);
        assert_eq!(Control::new(true, true).to_u8(), TAGGED_LAST);
    }

    #[test]
    fn getters() {
        let c = Control::from_u8(0xC1);
        assert!(c.tagged() && c.last());
        assert_eq!(c.version(), 1);
        assert_eq!(c.header_len(), TAGGED_HEADER_LEN);
        let c = Control::from(0x01);
        assert!(!c.tagged() && !c.last());
        assert_eq!(c.header_len(), UNTAGGED_HEADER_LEN);
        assert_eq!(u8::from(c), 0x01);
    }

    #[test]
    fn reserved_bits_ignored() {
        let c = Control::from_u8(0xC1 | RSVD_MASK);
        assert!(c.tagged() && c.last());
        assert_eq!(c.version(), 1);
        assert_eq!(c.check_version(), Ok(()));
    }

    #[test]
    fn version_errors_follow_t_bit() {
        for dv in [0u8, 2, 3] {
            assert_eq!(
                Control::from_u8(0x80 | dv).check_version(),
                Err(DdpError::TaggedVersion)
            );
            assert_eq!(
                Control::from_u8(0x40 | dv).check_version(),
                Err(DdpError::UntaggedVersion)
            );
        }
    }

    #[test]
    fn debug() {
        assert_eq!(
            format!("{:?}", Control::from_u8(0x81)),
            "Control(0x81 T=1 L=0 DV=1)"
        );
    }
}
