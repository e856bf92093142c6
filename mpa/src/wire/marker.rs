//! The MPA marker (RFC 5044 §4.2): `RESERVED (u16) | FPDUPTR (u16, big-endian)`.
//!
//! FPDUPTR is the distance back from the marker's first octet to the ULPDU_Length of the
//! FPDU it sits in, or 0 when the marker falls between two FPDUs (it then belongs to the
//! next one). The two low bits are 0 on send and treated as 0 on receive; the reserved
//! half is sent as 0 and ignored on receive (but it is covered by the CRC).

use crate::MpaError;

/// Length of a marker in octets.
pub const LEN: usize = 4;
/// Markers start every 512 octets of the stream, counted from SeqStart.
pub const PERIOD: u64 = 512;
/// Bits of FPDUPTR a receiver honours (the low two bits are treated as 0).
pub const FPDUPTR_MASK: u16 = !0x3;

mod field {
    use crate::wire::Field;
    pub(crate) const RESERVED: Field = 0..2;
    pub(crate) const FPDUPTR: Field = 2..4;
}

/// A view over a 4-octet marker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// Wraps a buffer without checking its length.
    pub const fn new_unchecked(buffer: T) -> Self {
        Self { buffer }
    }

    /// Wraps a buffer and checks that it holds at least 4 octets.
    pub fn new_checked(buffer: T) -> Result<Self, MpaError> {
        let packet = Self::new_unchecked(buffer);
        packet.check_len()?;
        Ok(packet)
    }

    /// Fails if the buffer is shorter than 4 octets.
    pub fn check_len(&self) -> Result<(), MpaError> {
        if self.buffer.as_ref().len() < LEN {
            Err(MpaError::InvalidFrame("marker truncated"))
        } else {
            Ok(())
        }
    }

    /// Returns the wrapped buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// The reserved half (sent as 0, ignored on receive).
    pub fn reserved(&self) -> u16 {
        let d = &self.buffer.as_ref()[field::RESERVED];
        u16::from_be_bytes([d[0], d[1]])
    }

    /// FPDUPTR exactly as on the wire (low bits included).
    pub fn fpduptr(&self) -> u16 {
        let d = &self.buffer.as_ref()[field::FPDUPTR];
        u16::from_be_bytes([d[0], d[1]])
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Sets the reserved half.
    pub fn set_reserved(&mut self, value: u16) {
        self.buffer.as_mut()[field::RESERVED].copy_from_slice(&value.to_be_bytes());
    }

    /// Sets FPDUPTR.
    pub fn set_fpduptr(&mut self, value: u16) {
        self.buffer.as_mut()[field::FPDUPTR].copy_from_slice(&value.to_be_bytes());
    }
}

/// A parsed marker.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct MarkerRepr {
    /// FPDUPTR with the two low bits cleared.
    pub fpduptr: u16,
}

impl MarkerRepr {
    /// Parses a view; the reserved half is ignored and the low two FPDUPTR bits cleared.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(packet: &Packet<&T>) -> Result<Self, MpaError> {
        packet.check_len()?;
        Ok(Self {
            fpduptr: packet.fpduptr() & FPDUPTR_MASK,
        })
    }

    /// Always 4.
    pub const fn buffer_len(&self) -> usize {
        LEN
    }

    /// Writes the marker (reserved = 0).
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Packet<T>) {
        packet.set_reserved(0);
        packet.set_fpduptr(self.fpduptr);
    }

    /// The 4 wire octets of the marker.
    pub const fn to_bytes(self) -> [u8; LEN] {
        let p = self.fpduptr.to_be_bytes();
        [0, 0, p[0], p[1]]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // RFC 5044 Figure 6 / wire-format.md §5.2: the marker at 0x200 with FPDUPTR 0x14.
    static MARKER: [u8; 4] = [0x00, 0x00, 0x00, 0x14];

    #[test]
    fn deconstruct() {
        let p = Packet::new_unchecked(&MARKER[..]);
        assert_eq!(p.reserved(), 0);
        assert_eq!(p.fpduptr(), 0x14);
    }

    #[test]
    fn construct() {
        let mut buf = [0xa5u8; 4];
        let mut p = Packet::new_unchecked(&mut buf[..]);
        p.set_reserved(0);
        p.set_fpduptr(0x14);
        assert_eq!(buf, MARKER);
    }

    #[test]
    fn parse() {
        let r = MarkerRepr::parse(&Packet::new_unchecked(&MARKER[..])).unwrap();
        assert_eq!(r, MarkerRepr { fpduptr: 0x14 });
        // Reserved ignored, low two bits treated as zero.
        let odd = [0xde, 0xad, 0x01, 0xcf];
        let r = MarkerRepr::parse(&Packet::new_unchecked(&odd[..])).unwrap();
        assert_eq!(r, MarkerRepr { fpduptr: 0x01cc });
    }

    #[test]
    fn emit() {
        let repr = MarkerRepr { fpduptr: 0x14 };
        let mut buf = [0xa5u8; 4];
        repr.emit(&mut Packet::new_unchecked(&mut buf[..]));
        assert_eq!(buf, MARKER);
        assert_eq!(repr.to_bytes(), MARKER);
        assert_eq!(repr.buffer_len(), 4);
    }

    #[test]
    fn impossible_len() {
        assert!(Packet::new_checked(&MARKER[..3]).is_err());
        assert!(MarkerRepr::parse(&Packet::new_unchecked(&MARKER[..0])).is_err());
    }
}
