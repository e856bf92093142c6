//! FPDU layout (RFC 5044 §4.1): `ULPDU_Length (u16 BE) | ULPDU | PAD 0..3 | CRC (LE)`.
//!
//! Markers, when enabled, are inserted into this octet stream every 512 octets counted from
//! SeqStart (see [`wire_len`] and the [`Framer`](crate::Framer)); the [`Packet`] view and
//! [`FpduRepr`] here describe an FPDU **without** markers, the common case.

use crate::{MpaError, pad_len};

pub use super::marker::{LEN as MARKER_LEN, PERIOD as MARKER_PERIOD};

/// Length of the ULPDU_Length field.
pub const LENGTH_LEN: usize = 2;
/// Length of the CRC field.
pub const CRC_LEN: usize = 4;

mod field {
    use crate::wire::Field;
    pub(crate) const ULPDU_LENGTH: Field = 0..2;
    pub(crate) const ULPDU: usize = 2;
}

/// Octets an FPDU with a ULPDU of `ulpdu_len` octets takes on the wire when its first octet
/// is at stream position `pos` (octets since SeqStart), markers included when `markers`.
///
/// Implements the sender algorithm of RFC 5044 §4.3: a marker at `pos` when
/// `pos % 512 == 0` (it belongs to this FPDU), then one marker at every multiple of 512
/// inside the body, including the slot between PAD and CRC. `pos` is a multiple of 4 in
/// every valid stream (every FPDU and every marker is a multiple of 4 octets).
pub fn wire_len(pos: u64, ulpdu_len: usize, markers: bool) -> usize {
    let body = LENGTH_LEN + ulpdu_len + pad_len(ulpdu_len);
    if !markers {
        return body + CRC_LEN;
    }
    let mut p = pos;
    if p.is_multiple_of(MARKER_PERIOD) {
        p += MARKER_LEN as u64;
    }
    let mut end = p + body as u64;
    let mut next = (p / MARKER_PERIOD + 1) * MARKER_PERIOD;
    while next <= end {
        end += MARKER_LEN as u64;
        next += MARKER_PERIOD;
    }
    (end + CRC_LEN as u64 - pos) as usize
}

/// A view over one FPDU without markers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// Wraps a buffer without checking its length.
    pub const fn new_unchecked(buffer: T) -> Self {
        Self { buffer }
    }

    /// Wraps a buffer and checks its length ([`check_len`](Self::check_len)).
    pub fn new_checked(buffer: T) -> Result<Self, MpaError> {
        let packet = Self::new_unchecked(buffer);
        packet.check_len()?;
        Ok(packet)
    }

    /// Fails unless the buffer holds the whole FPDU given by its ULPDU_Length.
    pub fn check_len(&self) -> Result<(), MpaError> {
        let len = self.buffer.as_ref().len();
        if len < LENGTH_LEN || len < self.total_len() {
            Err(MpaError::TrailingBytes)
        } else {
            Ok(())
        }
    }

    /// Returns the wrapped buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// ULPDU_Length.
    pub fn ulpdu_length(&self) -> u16 {
        let d = &self.buffer.as_ref()[field::ULPDU_LENGTH];
        u16::from_be_bytes([d[0], d[1]])
    }

    /// PAD length, from ULPDU_Length.
    pub fn pad_len(&self) -> usize {
        pad_len(usize::from(self.ulpdu_length()))
    }

    /// Octets covered by the CRC: length field, ULPDU and PAD.
    pub fn covered_len(&self) -> usize {
        LENGTH_LEN + usize::from(self.ulpdu_length()) + self.pad_len()
    }

    /// Octets of the whole FPDU (covered part plus CRC).
    pub fn total_len(&self) -> usize {
        self.covered_len() + CRC_LEN
    }

    /// The ULPDU.
    pub fn ulpdu(&self) -> &[u8] {
        &self.buffer.as_ref()[field::ULPDU..field::ULPDU + usize::from(self.ulpdu_length())]
    }

    /// The PAD octets (the receiver ignores their value, but they are covered by the CRC).
    pub fn pad(&self) -> &[u8] {
        let start = field::ULPDU + usize::from(self.ulpdu_length());
        &self.buffer.as_ref()[start..self.covered_len()]
    }

    /// The CRC field as a value (`u32::from_le_bytes` of the wire octets).
    pub fn crc(&self) -> u32 {
        let at = self.covered_len();
        let d = &self.buffer.as_ref()[at..at + CRC_LEN];
        u32::from_le_bytes([d[0], d[1], d[2], d[3]])
    }

    /// The CRC-32C of the covered octets.
    pub fn compute_crc(&self) -> u32 {
        crate::crc32c(&self.buffer.as_ref()[..self.covered_len()])
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Sets ULPDU_Length.
    pub fn set_ulpdu_length(&mut self, len: u16) {
        self.buffer.as_mut()[field::ULPDU_LENGTH].copy_from_slice(&len.to_be_bytes());
    }

    /// The ULPDU, for writing.
    pub fn ulpdu_mut(&mut self) -> &mut [u8] {
        let end = field::ULPDU + usize::from(self.ulpdu_length());
        &mut self.buffer.as_mut()[field::ULPDU..end]
    }

    /// Writes zeros into the PAD.
    pub fn clear_pad(&mut self) {
        let start = field::ULPDU + usize::from(self.ulpdu_length());
        let end = self.covered_len();
        self.buffer.as_mut()[start..end].fill(0);
    }

    /// Sets the CRC field (written least significant octet first).
    pub fn set_crc(&mut self, crc: u32) {
        let at = self.covered_len();
        self.buffer.as_mut()[at..at + CRC_LEN].copy_from_slice(&crc.to_le_bytes());
    }

    /// Computes the CRC and writes it.
    pub fn fill_crc(&mut self) {
        let crc = self.compute_crc();
        self.set_crc(crc);
    }
}

/// A parsed FPDU without markers.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct FpduRepr<'a> {
    /// The ULPDU (a DDP segment).
    pub ulpdu: &'a [u8],
}

impl<'a> FpduRepr<'a> {
    /// Parses a view; with `check_crc` a CRC mismatch is [`MpaError::Crc`].
    pub fn parse<T: AsRef<[u8]> + ?Sized>(
        packet: &Packet<&'a T>,
        check_crc: bool,
    ) -> Result<Self, MpaError> {
        packet.check_len()?;
        if check_crc {
            let (expected, received) = (packet.compute_crc(), packet.crc());
            if expected != received {
                return Err(MpaError::Crc { expected, received });
            }
        }
        let len = usize::from(packet.ulpdu_length());
        let buf: &'a [u8] = packet.buffer.as_ref();
        Ok(Self {
            ulpdu: &buf[field::ULPDU..field::ULPDU + len],
        })
    }

    /// Octets of the FPDU: `2 + len + pad + 4`.
    pub fn buffer_len(&self) -> usize {
        LENGTH_LEN + self.ulpdu.len() + pad_len(self.ulpdu.len()) + CRC_LEN
    }

    /// Writes the FPDU; with `crc` false the CRC field is written as 0.
    /// The ULPDU must not exceed `u16::MAX` octets.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Packet<T>, crc: bool) {
        debug_assert!(self.ulpdu.len() <= usize::from(u16::MAX));
        packet.set_ulpdu_length(self.ulpdu.len() as u16);
        packet.ulpdu_mut().copy_from_slice(self.ulpdu);
        packet.clear_pad();
        if crc {
            packet.fill_crc();
        } else {
            packet.set_crc(0);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // wire-format.md §5.4: Send, MSN 2, payload 5a (ULPDU 19, PAD 3), CRC 0xFDDCC13A.
    static SEND_PAD3: [u8; 28] = [
        0x00, 0x13, 0x41, 0x43, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x02, 0x00, 0x00, 0x00, 0x00, 0x5a, 0x00, 0x00, 0x00, 0x3a, 0xc1, 0xdc, 0xfd,
    ];

    #[test]
    fn deconstruct() {
        let p = Packet::new_unchecked(&SEND_PAD3[..]);
        assert_eq!(p.ulpdu_length(), 19);
        assert_eq!(p.pad_len(), 3);
        assert_eq!(p.pad(), &[0, 0, 0]);
        assert_eq!(p.ulpdu(), &SEND_PAD3[2..21]);
        assert_eq!(p.crc(), 0xFDDC_C13A);
        assert_eq!(p.compute_crc(), 0xFDDC_C13A);
        assert_eq!(p.total_len(), 28);
    }

    #[test]
    fn construct() {
        let mut buf = [0xa5u8; 28];
        let mut p = Packet::new_unchecked(&mut buf[..]);
        p.set_ulpdu_length(19);
        p.ulpdu_mut().copy_from_slice(&SEND_PAD3[2..21]);
        p.clear_pad();
        p.fill_crc();
        assert_eq!(buf, SEND_PAD3);
    }

    #[test]
    fn parse() {
        let r = FpduRepr::parse(&Packet::new_unchecked(&SEND_PAD3[..]), true).unwrap();
        assert_eq!(r.ulpdu, &SEND_PAD3[2..21]);
        let mut bad = SEND_PAD3;
        bad[20] ^= 1;
        let err = FpduRepr::parse(&Packet::new_unchecked(&bad[..]), true).unwrap_err();
        assert!(
            matches!(
                err,
                MpaError::Crc {
                    received: 0xFDDC_C13A,
                    ..
                }
            ),
            "{err:?}"
        );
        assert!(FpduRepr::parse(&Packet::new_unchecked(&bad[..]), false).is_ok());
    }

    #[test]
    fn emit() {
        let repr = FpduRepr {
            ulpdu: &SEND_PAD3[2..21],
        };
        assert_eq!(repr.buffer_len(), 28);
        let mut buf = [0xa5u8; 28];
        repr.emit(&mut Packet::new_unchecked(&mut buf[..]), true);
        assert_eq!(buf, SEND_PAD3);
        repr.emit(&mut Packet::new_unchecked(&mut buf[..]), false);
        assert_eq!(&buf[24..], &[0, 0, 0, 0]);
    }

    #[test]
    fn impossible_len() {
        assert!(Packet::new_checked(&SEND_PAD3[..1]).is_err());
        assert!(Packet::new_checked(&SEND_PAD3[..27]).is_err());
        assert!(FpduRepr::parse(&Packet::new_unchecked(&SEND_PAD3[..27]), false).is_err());
        assert!(Packet::new_checked(&SEND_PAD3[..]).is_ok());
    }

    #[test]
    fn wire_len_rules() {
        // No markers: 2 + len + pad + 4.
        assert_eq!(wire_len(0, 19, false), 28);
        assert_eq!(wire_len(0, 0, false), 8);
        // wire-format.md §5.6 table (markers on, positions relative to SeqStart).
        for (pos, len, total) in [
            (0, 42, 52),
            (52, 494, 504),
            (556, 462, 468),
            (1024, 506, 520),
            (1544, 1442, 1456),
            (3000, 22, 28),
        ] {
            assert_eq!(wire_len(pos, len, true), total, "FPDU at {pos}");
        }
        // A marker exactly at the end of the FPDU belongs to the next one.
        assert_eq!(wire_len(504, 2, true), 8);
    }
}
