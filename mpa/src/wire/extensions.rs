//! The extension block of an MPA Reply (this stack's negotiation, version 1; see
//! [`Extensions`] for the rules).
//!
//! ```text
//! offset size field
//! 0      3    magic "iWX" (69 57 58)
//! 3      1    version (1)
//! 4      4    agreed extensions, big-endian (bit 0 Send with Immediate, bit 1 Read V2)
//! ```
//! It is the first thing in the Reply's private data after the RFC 6581 block, and present
//! only when the Reply sets an extension bit of the flags octet.

use crate::Extensions;

/// Length of the block in octets.
pub const LEN: usize = 8;
/// The first three octets.
pub const MAGIC: [u8; 3] = *b"iWX";
/// The version this stack writes.
pub const VERSION: u8 = 1;

/// A parsed extension block.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct ExtensionBlock {
    /// The writer's negotiation version (at least 1).
    pub version: u8,
    /// The extensions the Responder agreed to.
    pub agreed: Extensions,
}

impl ExtensionBlock {
    /// Reads the block at the start of `pd`; `None` if `pd` does not start with one (too
    /// short, another magic, or version 0). Unknown extension bits are dropped.
    pub fn parse(pd: &[u8]) -> Option<Self> {
        let b: &[u8; LEN] = pd.get(..LEN)?.try_into().ok()?;
        let [m0, m1, m2, version, a0, a1, a2, a3] = *b;
        if [m0, m1, m2] != MAGIC || version == 0 {
            return None;
        }
        Some(Self {
            version,
            agreed: Extensions::from_bits_truncate(u32::from_be_bytes([a0, a1, a2, a3])),
        })
    }

    /// The 8 octets of the block.
    pub fn emit(&self) -> [u8; LEN] {
        let mut b = [0u8; LEN];
        b[..3].copy_from_slice(&MAGIC);
        b[3] = self.version;
        b[4..].copy_from_slice(&self.agreed.bits().to_be_bytes());
        b
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn literal_octets() {
        let block = ExtensionBlock {
            version: VERSION,
            agreed: Extensions::ALL,
        };
        let b = block.emit();
        assert_eq!(b, [0x69, 0x57, 0x58, 0x01, 0, 0, 0, 0x03]);
        assert_eq!(ExtensionBlock::parse(&b), Some(block));
        // A later version with bits this one does not know: read, unknown bits dropped.
        let later = [0x69, 0x57, 0x58, 0x02, 0x80, 0, 0, 0x01, 0xaa];
        assert_eq!(
            ExtensionBlock::parse(&later),
            Some(ExtensionBlock {
                version: 2,
                agreed: Extensions::SEND_IMMEDIATE
            })
        );
        // Not a block: short, another magic, version 0.
        assert_eq!(ExtensionBlock::parse(&b[..7]), None);
        assert_eq!(ExtensionBlock::parse(b"hello wo"), None);
        assert_eq!(
            ExtensionBlock::parse(&[0x69, 0x57, 0x58, 0, 0, 0, 0, 1]),
            None
        );
    }
}
