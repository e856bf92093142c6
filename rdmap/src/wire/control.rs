//! The RDMAP control octet (RFC 5040 §4.1; wire-format.md §4.1).
//!
//! It occupies DDP header octet 1 (the first RsvdULP octet) of every segment:
//!
//! ```text
//!  0xC0     0x30     0x0F
//! +-------+--------+--------+
//! | RV(2) | Rsv(2) | Opcode |
//! +-------+--------+--------+
//! ```

use core::fmt;

use super::Opcode;

/// The RDMAP version this stack speaks (RV = `01b`; 0 is the pre-IETF RDMAC version).
pub const RDMAP_VERSION: u8 = 1;

const VERSION_SHIFT: u8 = 6;
const OPCODE_MASK: u8 = 0x0F;

/// A parsed RDMAP control octet.
///
/// Parsing never fails: the receiver checks `version` itself (RDMAP / Remote Operation /
/// 0x05 if it is not 1) and the opcode (0x06 if it is [`Opcode::Unknown`]). The two
/// reserved bits are ignored on receive and sent as 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RdmapControl {
    /// RV, the 2-bit RDMAP version.
    pub version: u8,
    /// The opcode (only the low 4 bits go on the wire).
    pub opcode: Opcode,
}

impl RdmapControl {
    /// A control octet for `opcode` with the current [`RDMAP_VERSION`].
    pub const fn new(opcode: Opcode) -> Self {
        Self {
            version: RDMAP_VERSION,
            opcode,
        }
    }

    /// Splits an octet into RV and opcode. Never fails; the reserved bits are dropped.
    pub fn parse(octet: u8) -> Self {
        Self {
            version: octet >> VERSION_SHIFT,
            opcode: Opcode::from(octet & OPCODE_MASK),
        }
    }

    /// The wire octet: `version << 6 | opcode`, i.e. `0x40 | opcode` for version 1.
    /// Out-of-range values are truncated to their 2 and 4 bits.
    pub fn emit(&self) -> u8 {
        ((self.version & 0x03) << VERSION_SHIFT) | (u8::from(self.opcode) & OPCODE_MASK)
    }

    /// Whether RV is the version this stack speaks.
    pub fn is_valid_version(&self) -> bool {
        self.version == RDMAP_VERSION
    }
}

impl fmt::Display for RdmapControl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "RV={} {}", self.version, self.opcode)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn emit_known_octets() {
        // wire-format.md §4.1 table: 0x40 | opcode.
        for op in 0..=0xBu8 {
            assert_eq!(RdmapControl::new(Opcode::from(op)).emit(), 0x40 | op);
        }
    }

    #[test]
    fn parse_vectors() {
        // Octet 1 of the §5.4 ULPDUs.
        assert_eq!(RdmapControl::parse(0x43), RdmapControl::new(Opcode::Send));
        assert_eq!(
            RdmapControl::parse(0x46),
            RdmapControl::new(Opcode::SendSeInvalidate)
        );
        assert_eq!(
            RdmapControl::parse(0x4a),
            RdmapControl::new(Opcode::AtomicRequest)
        );
        // Reserved bits are ignored; RV 2 and RV 0 are reported, not rejected.
        let c = RdmapControl::parse(0xb7);
        assert_eq!(c.version, 2);
        assert_eq!(c.opcode, Opcode::Terminate);
        assert!(!c.is_valid_version());
        let c = RdmapControl::parse(0x0c);
        assert_eq!(c.version, 0);
        assert_eq!(c.opcode, Opcode::SendImm);
    }

    #[test]
    fn round_trip_every_octet_without_reserved_bits() {
        for octet in 0..=u8::MAX {
            let c = RdmapControl::parse(octet);
            assert_eq!(c.emit(), octet & !0x30);
        }
    }
}
