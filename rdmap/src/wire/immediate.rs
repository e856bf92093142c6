//! Immediate Data (RFC 7306 §6.2; wire-format.md §4.2).
//!
//! Opcodes 0x8 (Immediate Data) and 0x9 (Immediate Data with SE) carry, after the 18-octet
//! untagged DDP header (QN 0), exactly 8 opaque octets and nothing else.

use core::fmt;

use super::WireError;

/// Length of the Immediate Data in octets.
pub const IMMEDIATE_LEN: usize = 8;

/// Length of the immediate value of a Send with Immediate Data (this stack's extension,
/// opcodes 0xC–0xF, seed 003 §3.6): 4 octets, big-endian, right after the untagged DDP
/// header of every segment of the message, before that segment's payload. 32 bits because
/// that is what a verbs `imm_data` holds; the payload's MO does not count them.
pub const SEND_IMM_LEN: usize = 4;

mod field {
    use crate::wire::Field;

    pub(super) const DATA: Field = 0..8;
}

fixed_len_packet!(
    /// A view of a buffer as Immediate Data.
    ImmediatePacket,
    IMMEDIATE_LEN
);

impl<T: AsRef<[u8]>> ImmediatePacket<T> {
    /// The 8 octets of Immediate Data.
    pub fn data(&self) -> [u8; IMMEDIATE_LEN] {
        let mut out = [0u8; IMMEDIATE_LEN];
        out.copy_from_slice(&self.buffer.as_ref()[field::DATA]);
        out
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> ImmediatePacket<T> {
    /// Sets the 8 octets of Immediate Data.
    pub fn set_data(&mut self, value: [u8; IMMEDIATE_LEN]) {
        self.buffer.as_mut()[field::DATA].copy_from_slice(&value);
    }
}

/// Parsed Immediate Data: 8 opaque octets handed to the consumer's completion.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct ImmediateRepr {
    /// The data, in wire order.
    pub data: [u8; IMMEDIATE_LEN],
}

impl ImmediateRepr {
    /// Parses the whole RDMAP payload of an Immediate Data message. RFC 7306 §6.2 requires
    /// exactly 8 octets: fewer gives [`WireError::Truncated`], more [`WireError::Malformed`]
    /// (the stream answers either with RDMAP / Remote Operation / Unspecified).
    pub fn parse(buf: &[u8]) -> Result<Self, WireError> {
        if buf.len() > IMMEDIATE_LEN {
            return Err(WireError::Malformed);
        }
        Self::parse_packet(&ImmediatePacket::new_checked(buf)?)
    }

    /// Parses a packet view (smoltcp style); octets after the first 8 are not examined.
    pub fn parse_packet<T: AsRef<[u8]>>(packet: &ImmediatePacket<T>) -> Result<Self, WireError> {
        packet.check_len()?;
        Ok(Self {
            data: packet.data(),
        })
    }

    /// The data length, always [`IMMEDIATE_LEN`].
    pub const fn buffer_len() -> usize {
        IMMEDIATE_LEN
    }

    /// Writes the data into the first [`IMMEDIATE_LEN`] octets of `buf`.
    ///
    /// # Panics
    /// If `buf` is shorter than [`IMMEDIATE_LEN`].
    pub fn emit(&self, buf: &mut [u8]) {
        self.emit_packet(&mut ImmediatePacket::new_unchecked(buf));
    }

    /// Writes the data through a packet view (smoltcp style).
    ///
    /// # Panics
    /// If the view's buffer is shorter than [`IMMEDIATE_LEN`].
    pub fn emit_packet<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut ImmediatePacket<T>) {
        packet.set_data(self.data);
    }
}

impl fmt::Display for ImmediateRepr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Immediate Data {:#018x}", u64::from_be_bytes(self.data))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::test_util::{hex, ulpdu};
    use proptest::prelude::*;

    /// §5.4 Immediate Data FPDU (opcode 8, data 0x0102030405060708).
    const FPDU: &str = "0000: 00 1a 41 48 00 00 00 00 00 00 00 00 00 00 00 01
                        0010: 00 00 00 00 01 02 03 04 05 06 07 08 06 c2 28 05";

    static BYTES: [u8; 8] = [0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08];

    #[test]
    fn vector_is_the_fpdu_tail() {
        let f = hex(FPDU);
        assert_eq!(ulpdu(&f).get(18..), Some(&BYTES[..]));
    }

    #[test]
    fn deconstruct() {
        let p = ImmediatePacket::new_checked(&BYTES[..]).unwrap();
        assert_eq!(u64::from_be_bytes(p.data()), 0x0102_0304_0506_0708);
    }

    #[test]
    fn construct() {
        let mut buf = [0xa5u8; 8];
        ImmediatePacket::new_unchecked(&mut buf[..])
            .set_data(0x0102_0304_0506_0708u64.to_be_bytes());
        assert_eq!(buf, BYTES);
    }

    #[test]
    fn parse_and_emit() {
        let repr = ImmediateRepr { data: BYTES };
        assert_eq!(ImmediateRepr::parse(&ulpdu(&hex(FPDU))[18..]), Ok(repr));
        let mut buf = [0xa5u8; 8];
        repr.emit(&mut buf);
        assert_eq!(buf, BYTES);
        assert_eq!(ImmediateRepr::buffer_len(), 8);
    }

    #[test]
    fn impossible_len() {
        for len in 0..IMMEDIATE_LEN {
            assert_eq!(
                ImmediatePacket::new_checked(&BYTES[..len]).err(),
                Some(WireError::Truncated)
            );
            assert_eq!(
                ImmediateRepr::parse(&BYTES[..len]),
                Err(WireError::Truncated)
            );
        }
        // §5.7: a 9-octet payload is an error too.
        assert_eq!(ImmediateRepr::parse(&[0u8; 9]), Err(WireError::Malformed));
    }

    proptest! {
        #[test]
        fn round_trip(data: [u8; 8]) {
            let r = ImmediateRepr { data };
            let mut buf = [0u8; IMMEDIATE_LEN];
            r.emit(&mut buf);
            prop_assert_eq!(ImmediateRepr::parse(&buf), Ok(r));
        }
    }
}
