//! The RDMA Read Request header (RFC 5040 §4.4; wire-format.md §4.2).
//!
//! It follows the 18-octet untagged DDP header (QN 1) and is 28 octets long:
//!
//! | off | size | field |
//! |---|---|---|
//! | 0 | 4 | Data Sink STag (SinkSTag) |
//! | 4 | 8 | Data Sink Tagged Offset (SinkTO) |
//! | 12 | 4 | RDMA Read Message Size (RDMARDSZ) |
//! | 16 | 4 | Data Source STag (SrcSTag) |
//! | 20 | 8 | Data Source Tagged Offset (SrcTO) |

use core::fmt;

use ddp::STag;

use super::{WireError, read_u32, read_u64, write_u32, write_u64};

/// Length of the Read Request header in octets.
pub const READ_REQUEST_LEN: usize = 28;

mod field {
    use crate::wire::Field;

    pub(super) const SINK_STAG: Field = 0..4;
    pub(super) const SINK_TO: Field = 4..12;
    pub(super) const SIZE: Field = 12..16;
    pub(super) const SRC_STAG: Field = 16..20;
    pub(super) const SRC_TO: Field = 20..28;
}

fixed_len_packet!(
    /// A view of a buffer as an RDMA Read Request header.
    ReadRequestPacket,
    READ_REQUEST_LEN
);

impl<T: AsRef<[u8]>> ReadRequestPacket<T> {
    /// The Data Sink STag, copied unchanged into the Read Response.
    pub fn sink_stag(&self) -> STag {
        STag::from_u32(read_u32(self.buffer.as_ref(), field::SINK_STAG))
    }

    /// The Data Sink Tagged Offset.
    pub fn sink_to(&self) -> u64 {
        read_u64(self.buffer.as_ref(), field::SINK_TO)
    }

    /// RDMARDSZ, the number of octets to read.
    pub fn size(&self) -> u32 {
        read_u32(self.buffer.as_ref(), field::SIZE)
    }

    /// The Data Source STag.
    pub fn src_stag(&self) -> STag {
        STag::from_u32(read_u32(self.buffer.as_ref(), field::SRC_STAG))
    }

    /// The Data Source Tagged Offset.
    pub fn src_to(&self) -> u64 {
        read_u64(self.buffer.as_ref(), field::SRC_TO)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> ReadRequestPacket<T> {
    /// Sets the Data Sink STag.
    pub fn set_sink_stag(&mut self, value: STag) {
        write_u32(self.buffer.as_mut(), field::SINK_STAG, value.to_u32());
    }

    /// Sets the Data Sink Tagged Offset.
    pub fn set_sink_to(&mut self, value: u64) {
        write_u64(self.buffer.as_mut(), field::SINK_TO, value);
    }

    /// Sets RDMARDSZ.
    pub fn set_size(&mut self, value: u32) {
        write_u32(self.buffer.as_mut(), field::SIZE, value);
    }

    /// Sets the Data Source STag.
    pub fn set_src_stag(&mut self, value: STag) {
        write_u32(self.buffer.as_mut(), field::SRC_STAG, value.to_u32());
    }

    /// Sets the Data Source Tagged Offset.
    pub fn set_src_to(&mut self, value: u64) {
        write_u64(self.buffer.as_mut(), field::SRC_TO, value);
    }
}

/// A parsed RDMA Read Request header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct ReadRequestRepr {
    /// Data Sink STag: where the Read Response lands at the requester.
    pub sink_stag: STag,
    /// Data Sink Tagged Offset.
    pub sink_to: u64,
    /// RDMARDSZ: octets to read, 0 … 2^32−1.
    pub size: u32,
    /// Data Source STag: the responder's buffer.
    pub src_stag: STag,
    /// Data Source Tagged Offset.
    pub src_to: u64,
}

impl ReadRequestRepr {
    /// Parses the first [`READ_REQUEST_LEN`] octets of `buf`. Octets after them are not
    /// examined (DDP gives the message length). Never panics.
    pub fn parse(buf: &[u8]) -> Result<Self, WireError> {
        Self::parse_packet(&ReadRequestPacket::new_checked(buf)?)
    }

    /// Parses a checked packet view (smoltcp style).
    pub fn parse_packet<T: AsRef<[u8]>>(packet: &ReadRequestPacket<T>) -> Result<Self, WireError> {
        packet.check_len()?;
        Ok(Self {
            sink_stag: packet.sink_stag(),
            sink_to: packet.sink_to(),
            size: packet.size(),
            src_stag: packet.src_stag(),
            src_to: packet.src_to(),
        })
    }

    /// The header length, always [`READ_REQUEST_LEN`].
    pub const fn buffer_len() -> usize {
        READ_REQUEST_LEN
    }

    /// Writes the header into the first [`READ_REQUEST_LEN`] octets of `buf`.
    ///
    /// # Panics
    /// If `buf` is shorter than [`READ_REQUEST_LEN`].
    pub fn emit(&self, buf: &mut [u8]) {
        self.emit_packet(&mut ReadRequestPacket::new_unchecked(buf));
    }

    /// Writes the header through a packet view (smoltcp style).
    ///
    /// # Panics
    /// If the view's buffer is shorter than [`READ_REQUEST_LEN`].
    pub fn emit_packet<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut ReadRequestPacket<T>) {
        packet.set_sink_stag(self.sink_stag);
        packet.set_sink_to(self.sink_to);
        packet.set_size(self.size);
        packet.set_src_stag(self.src_stag);
        packet.set_src_to(self.src_to);
    }

    /// The header as a byte array, e.g. for the copied RDMA header of a Terminate.
    pub fn to_bytes(&self) -> [u8; READ_REQUEST_LEN] {
        let mut out = [0u8; READ_REQUEST_LEN];
        self.emit(&mut out);
        out
    }

    /// The header as it must be copied into a Terminate after `sent` octets of the Read
    /// Response already went out (RFC 5040 §4.8): SinkTO and SrcTO advance by `sent`
    /// (wrapping), RDMARDSZ shrinks by `sent` (saturating at 0), the STags stay.
    pub fn advanced(&self, sent: u32) -> Self {
        Self {
            sink_to: self.sink_to.wrapping_add(u64::from(sent)),
            size: self.size.saturating_sub(sent),
            src_to: self.src_to.wrapping_add(u64::from(sent)),
            ..*self
        }
    }
}

impl fmt::Display for ReadRequestRepr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "Read Request sink={:#010x}@{:#x} src={:#010x}@{:#x} size={}",
            self.sink_stag.to_u32(),
            self.sink_to,
            self.src_stag.to_u32(),
            self.src_to,
            self.size
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::test_util::{hex, ulpdu};
    use proptest::prelude::*;

    /// The §5.4 Read Request FPDU.
    const FPDU: &str = "0000: 00 2e 41 41 00 00 00 00 00 00 00 01 00 00 00 01
                        0010: 00 00 00 00 11 22 33 44 00 00 00 00 00 00 20 00
                        0020: 00 00 01 00 55 66 77 88 00 00 00 00 00 00 30 00
                        0030: 05 ca 54 df";

    static BYTES: [u8; 28] = [
        0x11, 0x22, 0x33, 0x44, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x20, 0x00, 0x00, 0x00, 0x01,
        0x00, 0x55, 0x66, 0x77, 0x88, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x30, 0x00,
    ];

    fn repr() -> ReadRequestRepr {
        ReadRequestRepr {
            sink_stag: STag::from_u32(0x1122_3344),
            sink_to: 0x2000,
            size: 0x100,
            src_stag: STag::from_u32(0x5566_7788),
            src_to: 0x3000,
        }
    }

    #[test]
    fn vector_is_the_fpdu_tail() {
        let fpdu = hex(FPDU);
        let u = ulpdu(&fpdu);
        assert_eq!(u.len(), 46);
        assert_eq!(u.get(18..), Some(&BYTES[..]));
    }

    #[test]
    fn deconstruct() {
        let p = ReadRequestPacket::new_checked(&BYTES[..]).unwrap();
        assert_eq!(p.sink_stag(), STag::from_u32(0x1122_3344));
        assert_eq!(p.sink_to(), 0x2000);
        assert_eq!(p.size(), 0x100);
        assert_eq!(p.src_stag(), STag::from_u32(0x5566_7788));
        assert_eq!(p.src_to(), 0x3000);
    }

    #[test]
    fn construct() {
        let mut buf = [0xa5u8; 28];
        let mut p = ReadRequestPacket::new_unchecked(&mut buf[..]);
        p.set_sink_stag(STag::from_u32(0x1122_3344));
        p.set_sink_to(0x2000);
        p.set_size(0x100);
        p.set_src_stag(STag::from_u32(0x5566_7788));
        p.set_src_to(0x3000);
        assert_eq!(buf, BYTES);
    }

    #[test]
    fn parse() {
        assert_eq!(ReadRequestRepr::parse(&BYTES), Ok(repr()));
        let p = ReadRequestPacket::new_checked(&BYTES[..]).unwrap();
        assert_eq!(ReadRequestRepr::parse_packet(&p), Ok(repr()));
    }

    #[test]
    fn emit() {
        let mut buf = [0xa5u8; 28];
        repr().emit(&mut buf);
        assert_eq!(buf, BYTES);
        assert_eq!(repr().to_bytes(), BYTES);
        assert_eq!(ReadRequestRepr::buffer_len(), 28);
    }

    #[test]
    fn impossible_len() {
        for len in 0..READ_REQUEST_LEN {
            assert_eq!(
                ReadRequestPacket::new_checked(&BYTES[..len]).err(),
                Some(WireError::Truncated)
            );
            assert_eq!(
                ReadRequestRepr::parse(&BYTES[..len]),
                Err(WireError::Truncated)
            );
        }
    }

    #[test]
    fn rtr_zero_length_read() {
        // §5.4 RTR Read Request: size 0, SrcSTag 1, everything else 0.
        let fpdu = hex("0000: 00 2e 41 41 00 00 00 00 00 00 00 01 00 00 00 01
                        0010: 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00
                        0020: 00 00 00 00 00 00 00 01 00 00 00 00 00 00 00 00
                        0030: ba 10 e3 c9");
        let r = ReadRequestRepr::parse(&ulpdu(&fpdu)[18..]).unwrap();
        assert_eq!(r.size, 0);
        assert_eq!(r.src_stag, STag::from_u32(1));
        assert_eq!(r.sink_stag, STag::from_u32(0));
        assert_eq!((r.sink_to, r.src_to), (0, 0));
    }

    #[test]
    fn advanced_updates_progress() {
        let a = repr().advanced(0x40);
        assert_eq!(a.sink_to, 0x2040);
        assert_eq!(a.src_to, 0x3040);
        assert_eq!(a.size, 0xc0);
        assert_eq!(
            (a.sink_stag, a.src_stag),
            (repr().sink_stag, repr().src_stag)
        );
        assert_eq!(repr().advanced(0x1000).size, 0);
    }

    proptest! {
        #[test]
        fn round_trip(a: u32, b: u64, c: u32, d: u32, e: u64) {
            let r = ReadRequestRepr {
                sink_stag: STag::from_u32(a), sink_to: b, size: c,
                src_stag: STag::from_u32(d), src_to: e,
            };
            let mut buf = [0u8; READ_REQUEST_LEN];
            r.emit(&mut buf);
            prop_assert_eq!(ReadRequestRepr::parse(&buf), Ok(r));
        }

        #[test]
        fn parse_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
            let _ = ReadRequestRepr::parse(&bytes);
        }
    }
}
