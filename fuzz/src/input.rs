//! An input read front to back by the structure-aware targets: octets past its end read
//! as 0, so every input is a valid program.

/// The octets not read yet.
#[derive(Debug)]
pub(crate) struct Input<'a>(pub(crate) &'a [u8]);

impl Input<'_> {
    pub(crate) fn u8(&mut self) -> u8 {
        let (b, rest) = crate::take_byte(self.0);
        self.0 = rest;
        b
    }

    pub(crate) fn u16(&mut self) -> u16 {
        u16::from_le_bytes([self.u8(), self.u8()])
    }

    pub(crate) fn u32(&mut self) -> u32 {
        u32::from_le_bytes([self.u8(), self.u8(), self.u8(), self.u8()])
    }

    /// Up to `n` octets, zero-padded to `N`.
    pub(crate) fn entry<const N: usize>(&mut self, n: usize) -> [u8; N] {
        let mut e = [0u8; N];
        let k = n.min(N).min(self.0.len());
        e[..k].copy_from_slice(&self.0[..k]);
        self.0 = &self.0[k..];
        e
    }

    /// A new value for a ring index or state word now `base`, from one octet: `base`
    /// moved by -64..=63 (indices wrap), the top of the range, or four octets of its own.
    pub(crate) fn index(&mut self, base: u32) -> u32 {
        match self.u8() {
            b @ 0..=0x7f => base
                .wrapping_add(u32::from(b & 0x3f))
                .wrapping_sub(u32::from(b >> 6) * 0x40),
            b @ 0x80..=0xbf => u32::MAX - u32::from(b & 0x3f),
            _ => self.u32(),
        }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}
