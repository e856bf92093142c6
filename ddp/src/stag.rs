//! The steering tag (STag) that names a tagged buffer.

use core::fmt;

/// Steering tag: a 24-bit tag index (the TPT slot) in the upper bits, and an 8-bit
/// tag instance (a key, bumped each time the slot is reused) in the low octet.
///
/// `raw = index << 8 | instance`, the layout used by siw, irdma and cxgb4. On the wire
/// it is a big-endian `u32` (tagged header octets 2..6).
#[derive(
    Copy, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Default, serde::Serialize, serde::Deserialize,
)]
pub struct STag(u32);

impl STag {
    /// Largest tag index that fits in an STag.
    pub const MAX_INDEX: u32 = 0x00FF_FFFF;

    /// Builds an STag from a tag index and a tag instance.
    ///
    /// Only the low 24 bits of `index` are used; higher bits are silently masked off.
    pub const fn new(index: u32, instance: u8) -> Self {
        Self(((index & Self::MAX_INDEX) << 8) | instance as u32)
    }

    /// Wraps a raw 32-bit STag as seen on the wire.
    pub const fn from_u32(raw: u32) -> Self {
        Self(raw)
    }

    /// The raw 32-bit value as sent on the wire.
    pub const fn to_u32(self) -> u32 {
        self.0
    }

    /// The 24-bit tag index (TPT slot).
    pub const fn index(self) -> u32 {
        self.0 >> 8
    }

    /// The 8-bit tag instance (key).
    pub const fn instance(self) -> u8 {
        (self.0 & 0xFF) as u8
    }

    /// The same tag index with a different instance.
    pub const fn with_instance(self, instance: u8) -> Self {
        Self((self.0 & !0xFF) | instance as u32)
    }
}

impl From<u32> for STag {
    fn from(raw: u32) -> Self {
        Self::from_u32(raw)
    }
}

impl From<STag> for u32 {
    fn from(stag: STag) -> Self {
        stag.to_u32()
    }
}

impl fmt::Display for STag {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:#010x}", self.0)
    }
}

impl fmt::Debug for STag {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "STag({:#010x} index={:#08x} instance={:#04x})",
            self.0,
            self.index(),
            self.instance()
        )
    }
}

impl fmt::LowerHex for STag {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::LowerHex::fmt(&self.0, f)
    }
}

impl fmt::UpperHex for STag {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::UpperHex::fmt(&self.0, f)
    }
}

/// How the tagged offsets of a region are formed (RFC 5040 section 2.3: a tagged
/// buffer is addressed from its virtual address or from zero).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum Base {
    /// Virtual-address based: the first octet has tagged offset `va`, the region covers
    /// `[va, va + len)`. `va + len` must fit in a `u64` (at most 2^64 - 1).
    Va(u64),
    /// Zero based: the region covers tagged offsets `[0, len)`.
    ZeroBased,
}

impl Base {
    /// The tagged offset of the first octet.
    pub const fn start(self) -> u64 {
        match self {
            Self::Va(va) => va,
            Self::ZeroBased => 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packing() {
        let s = STag::from_u32(0x1234_5678);
        assert_eq!(s.index(), 0x12_3456);
        assert_eq!(s.instance(), 0x78);
        assert_eq!(STag::new(0x12_3456, 0x78), s);
        assert_eq!(s.to_u32(), 0x1234_5678);
        assert_eq!(u32::from(s), 0x1234_5678);
        assert_eq!(STag::from(0x1234_5678), s);
    }

    #[test]
    fn index_is_masked_to_24_bits() {
        let s = STag::new(0xAB12_3456, 0x01);
        assert_eq!(s.index(), 0x12_3456);
        assert_eq!(s.instance(), 0x01);
        assert_eq!(s.to_u32(), 0x1234_5601);
    }

    #[test]
    fn with_instance_keeps_index() {
        let s = STag::new(0xFF_FFFF, 0x00).with_instance(0xFE);
        assert_eq!(s.to_u32(), 0xFFFF_FFFE);
        assert_eq!(s.index(), 0xFF_FFFF);
        assert_eq!(s.instance(), 0xFE);
    }

    #[test]
    fn formatting() {
        let s = STag::from_u32(0x1234);
        assert_eq!(s.to_string(), "0x00001234");
        assert_eq!(
            format!("{s:?}"),
            "STag(0x00001234 index=0x000012 instance=0x34)"
        );
        assert_eq!(format!("{s:x}"), "1234");
        assert_eq!(format!("{s:X}"), "1234");
    }

    #[test]
    fn ordering_follows_raw_value() {
        assert!(STag::new(1, 0) > STag::new(0, 0xFF));
        assert_eq!(STag::default().to_u32(), 0);
    }
}
