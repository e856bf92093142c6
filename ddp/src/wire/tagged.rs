//! The tagged DDP header (T=1), 14 octets (RFC 5041 §4.2).
//!
//! | off | size | field |
//! |---|---|---|
//! | 0 | 1 | control (T=1, L, DV) |
//! | 1 | 1 | RsvdULP (RDMAP control octet) |
//! | 2 | 4 | STag |
//! | 6 | 8 | TO (tagged offset) |
//! | 14 | … | payload |

use core::fmt;

use super::control::Control;
use super::{read_u32, read_u64, write_u32, write_u64};
use crate::{DdpError, STag, TAGGED_HEADER_LEN};

mod field {
    use crate::wire::Field;

    pub(super) const CONTROL: usize = 0;
    pub(super) const RSVD_ULP: usize = 1;
    pub(super) const STAG: Field = 2..6;
    pub(super) const TO: Field = 6..14;
    pub(super) const PAYLOAD: usize = 14;
}

/// A read/write view of a tagged DDP segment (header and payload) in a buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TaggedPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> TaggedPacket<T> {
    /// Wraps a buffer without checking its length. Accessors panic if it is shorter
    /// than [`TAGGED_HEADER_LEN`]; use [`TaggedPacket::new_checked`] for peer input.
    pub const fn new_unchecked(buffer: T) -> Self {
        Self { buffer }
    }

    /// Wraps a buffer after [`TaggedPacket::check_len`].
    pub fn new_checked(buffer: T) -> Result<Self, DdpError> {
        let packet = Self::new_unchecked(buffer);
        packet.check_len()?;
        Ok(packet)
    }

    /// Fails with [`DdpError::Truncated`] if the buffer is shorter than the tagged
    /// header. After success no accessor can panic.
    pub fn check_len(&self) -> Result<(), DdpError> {
        if self.buffer.as_ref().len() < TAGGED_HEADER_LEN {
            Err(DdpError::Truncated)
        } else {
            Ok(())
        }
    }

    /// Gives the buffer back.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// The control octet.
    #[inline]
    pub fn control(&self) -> Control {
        Control::from_u8(self.buffer.as_ref()[field::CONTROL])
    }

    /// The T bit (1 for a well-formed tagged segment).
    #[inline]
    pub fn tagged(&self) -> bool {
        self.control().tagged()
    }

    /// The L bit.
    #[inline]
    pub fn last(&self) -> bool {
        self.control().last()
    }

    /// The DV field.
    #[inline]
    pub fn version(&self) -> u8 {
        self.control().version()
    }

    /// The 8-bit RsvdULP field (octet 1; RDMAP's control octet).
    #[inline]
    pub fn rsvd_ulp(&self) -> u8 {
        self.buffer.as_ref()[field::RSVD_ULP]
    }

    /// The Data Sink's steering tag.
    #[inline]
    pub fn stag(&self) -> STag {
        STag::from_u32(read_u32(self.buffer.as_ref(), field::STAG))
    }

    /// The tagged offset of the first payload octet.
    #[inline]
    pub fn to(&self) -> u64 {
        read_u64(self.buffer.as_ref(), field::TO)
    }
}

impl<'a, T: AsRef<[u8]> + ?Sized> TaggedPacket<&'a T> {
    /// The payload: everything after the header, borrowed for the buffer's lifetime.
    #[inline]
    pub fn payload(&self) -> &'a [u8] {
        &self.buffer.as_ref()[field::PAYLOAD..]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> TaggedPacket<T> {
    /// Sets the whole control octet.
    #[inline]
    pub fn set_control(&mut self, control: Control) {
        self.buffer.as_mut()[field::CONTROL] = control.to_u8();
    }

    /// Sets or clears the L bit, leaving the rest of the control octet alone.
    #[inline]
    pub fn set_last(&mut self, last: bool) {
        let octet = &mut self.buffer.as_mut()[field::CONTROL];
        if last {
            *octet |= super::control::LAST_BIT;
        } else {
            *octet &= !super::control::LAST_BIT;
        }
    }

    /// Sets the RsvdULP octet.
    #[inline]
    pub fn set_rsvd_ulp(&mut self, value: u8) {
        self.buffer.as_mut()[field::RSVD_ULP] = value;
    }

    /// Sets the STag.
    #[inline]
    pub fn set_stag(&mut self, stag: STag) {
        write_u32(self.buffer.as_mut(), field::STAG, stag.to_u32());
    }

    /// Sets the tagged offset.
    #[inline]
    pub fn set_to(&mut self, to: u64) {
        write_u64(self.buffer.as_mut(), field::TO, to);
    }

    /// The payload, mutably.
    #[inline]
    pub fn payload_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[field::PAYLOAD..]
    }
}

impl<T: AsRef<[u8]>> fmt::Display for TaggedPacket<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match TaggedRepr::parse(self) {
            Ok(repr) => write!(
                f,
                "{repr} len={}",
                self.buffer.as_ref().len() - TAGGED_HEADER_LEN
            ),
            Err(err) => write!(f, "DDP tagged ({err})"),
        }
    }
}

/// A parsed tagged DDP header.
#[derive(Copy, Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct TaggedRepr {
    /// The L bit: last segment of the message.
    pub last: bool,
    /// Header octet 1 (RDMAP's control octet).
    pub rsvd_ulp: u8,
    /// The Data Sink's steering tag.
    pub stag: STag,
    /// Tagged offset of the first payload octet.
    pub to: u64,
}

impl TaggedRepr {
    /// Parses the header of a (possibly unchecked) packet. Never panics.
    ///
    /// Errors, in order: [`DdpError::Truncated`] if shorter than 14 octets; a version
    /// error by the T bit if DV != 1; [`DdpError::LocalCatastrophic`] if the T bit is
    /// clear (an untagged segment was handed to the tagged parser: dispatch with
    /// [`crate::SegmentRepr::parse`]). Reserved bits are ignored.
    pub fn parse<T: AsRef<[u8]>>(packet: &TaggedPacket<T>) -> Result<Self, DdpError> {
        packet.check_len()?;
        let control = packet.control();
        control.check_version()?;
        if !control.tagged() {
            return Err(DdpError::LocalCatastrophic);
        }
        Ok(Self {
            last: control.last(),
            rsvd_ulp: packet.rsvd_ulp(),
            stag: packet.stag(),
            to: packet.to(),
        })
    }

    /// Header length: always [`TAGGED_HEADER_LEN`].
    pub const fn header_len(&self) -> usize {
        TAGGED_HEADER_LEN
    }

    /// Octets [`TaggedRepr::emit`] writes: always [`TAGGED_HEADER_LEN`].
    pub const fn buffer_len(&self) -> usize {
        TAGGED_HEADER_LEN
    }

    /// Writes the 14 header octets (T=1, reserved bits zero, DV=1). The payload is
    /// left untouched. Panics if the buffer is shorter than the header (our own
    /// buffer, never peer input).
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut TaggedPacket<T>) {
        packet.set_control(Control::new(true, self.last));
        packet.set_rsvd_ulp(self.rsvd_ulp);
        packet.set_stag(self.stag);
        packet.set_to(self.to);
    }
}

impl fmt::Display for TaggedRepr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "DDP tagged L={} ulp={:#04x} stag={} to={:#x}",
            u8::from(self.last),
            self.rsvd_ulp,
            self.stag,
            self.to
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// §5.4 RDMA Write, L=1, STag 0x12345678, TO 0x1000, payload 00..07 (ULPDU only).
    static WRITE_LAST: [u8; 22] = [
        0xc1, 0x40, 0x12, 0x34, 0x56, 0x78, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x10, 0x00, //
        0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07,
    ];

    /// §5.4 RDMA Write, non-last segment, same STag/TO, payload "abc".
    static WRITE_MIDDLE: [u8; 17] = [
        0x81, 0x40, 0x12, 0x34, 0x56, 0x78, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x10, 0x00, //
        b'a', b'b', b'c',
    ];

    /// §5.4 RDMA Read Response, L=1, STag 0x11223344, TO 0x2000, payload de ad be ef.
    static READ_RESPONSE: [u8; 18] = [
        0xc1, 0x42, 0x11, 0x22, 0x33, 0x44, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x20, 0x00, //
        0xde, 0xad, 0xbe, 0xef,
    ];

    /// §5.4 RTR: zero-length RDMA Write, STag 1, TO 0.
    static RTR_WRITE: [u8; 14] = [
        0xc1, 0x40, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    ];

    fn write_repr(last: bool) -> TaggedRepr {
        TaggedRepr {
            last,
            rsvd_ulp: 0x40,
            stag: STag::from_u32(0x1234_5678),
            to: 0x1000,
        }
    }

    #[test]
    fn deconstruct() {
        let p = TaggedPacket::new_checked(&WRITE_LAST[..]).unwrap();
        assert!(p.tagged());
        assert!(p.last());
        assert_eq!(p.version(), 1);
        assert_eq!(p.control().to_u8(), 0xc1);
        assert_eq!(p.rsvd_ulp(), 0x40);
        assert_eq!(p.stag(), STag::from_u32(0x1234_5678));
        assert_eq!(p.to(), 0x1000);
        assert_eq!(p.payload(), &[0, 1, 2, 3, 4, 5, 6, 7]);

        let p = TaggedPacket::new_checked(&WRITE_MIDDLE[..]).unwrap();
        assert!(p.tagged());
        assert!(!p.last());
        assert_eq!(p.payload(), b"abc");

        let p = TaggedPacket::new_checked(&READ_RESPONSE[..]).unwrap();
        assert_eq!(p.rsvd_ulp(), 0x42);
        assert_eq!(p.stag().to_u32(), 0x1122_3344);
        assert_eq!(p.to(), 0x2000);
        assert_eq!(p.payload(), &[0xde, 0xad, 0xbe, 0xef]);

        let p = TaggedPacket::new_checked(&RTR_WRITE[..]).unwrap();
        assert_eq!(p.stag().to_u32(), 1);
        assert_eq!(p.to(), 0);
        assert!(p.payload().is_empty());
    }

    #[test]
    fn construct() {
        let mut bytes = [0xa5u8; 22];
        let mut p = TaggedPacket::new_unchecked(&mut bytes[..]);
        p.set_control(Control::new(true, false));
        p.set_last(true);
        p.set_rsvd_ulp(0x40);
        p.set_stag(STag::new(0x12_3456, 0x78));
        p.set_to(0x1000);
        p.payload_mut().copy_from_slice(&[0, 1, 2, 3, 4, 5, 6, 7]);
        assert_eq!(bytes, WRITE_LAST);

        let mut bytes = [0xa5u8; 17];
        let mut p = TaggedPacket::new_unchecked(&mut bytes[..]);
        p.set_control(Control::from_u8(0xc1));
        p.set_last(false);
        p.set_rsvd_ulp(0x40);
        p.set_stag(STag::from_u32(0x1234_5678));
        p.set_to(0x1000);
        p.payload_mut().copy_from_slice(b"abc");
        assert_eq!(bytes, WRITE_MIDDLE);
    }

    #[test]
    fn parse() {
        let p = TaggedPacket::new_unchecked(&WRITE_LAST[..]);
        assert_eq!(TaggedRepr::parse(&p), Ok(write_repr(true)));
        let p = TaggedPacket::new_unchecked(&WRITE_MIDDLE[..]);
        assert_eq!(TaggedRepr::parse(&p), Ok(write_repr(false)));
        let p = TaggedPacket::new_unchecked(&READ_RESPONSE[..]);
        assert_eq!(
            TaggedRepr::parse(&p),
            Ok(TaggedRepr {
                last: true,
                rsvd_ulp: 0x42,
                stag: STag::from_u32(0x1122_3344),
                to: 0x2000,
            })
        );
    }

    #[test]
    fn emit() {
        for (repr, literal) in [
            (write_repr(true), &WRITE_LAST[..]),
            (write_repr(false), &WRITE_MIDDLE[..]),
        ] {
            let mut bytes = vec![0xa5u8; literal.len()];
            let mut p = TaggedPacket::new_unchecked(&mut bytes[..]);
            repr.emit(&mut p);
            p.payload_mut()
                .copy_from_slice(&literal[TAGGED_HEADER_LEN..]);
            assert_eq!(bytes, literal);
            assert_eq!(repr.buffer_len(), TAGGED_HEADER_LEN);
        }
        let rtr = TaggedRepr {
            last: true,
            rsvd_ulp: 0x40,
            stag: STag::from_u32(1),
            to: 0,
        };
        let mut bytes = [0xa5u8; 14];
        rtr.emit(&mut TaggedPacket::new_unchecked(&mut bytes));
        assert_eq!(bytes, RTR_WRITE);
    }

    #[test]
    fn impossible_len() {
        for len in 0..TAGGED_HEADER_LEN {
            let bytes = &WRITE_LAST[..len];
            assert_eq!(TaggedPacket::new_checked(bytes), Err(DdpError::Truncated));
            let p = TaggedPacket::new_unchecked(bytes);
            assert_eq!(p.check_len(), Err(DdpError::Truncated));
            assert_eq!(TaggedRepr::parse(&p), Err(DdpError::Truncated));
        }
        assert!(TaggedPacket::new_checked(&WRITE_LAST[..TAGGED_HEADER_LEN]).is_ok());
    }

    #[test]
    fn bad_version_and_reserved_bits() {
        let mut bytes = WRITE_LAST;
        bytes[0] = 0xc2; // DV = 2
        let p = TaggedPacket::new_unchecked(&bytes);
        assert_eq!(TaggedRepr::parse(&p), Err(DdpError::TaggedVersion));
        bytes[0] = 0xc0; // DV = 0 (RDMAC)
        let p = TaggedPacket::new_unchecked(&bytes);
        assert_eq!(TaggedRepr::parse(&p), Err(DdpError::TaggedVersion));
        bytes[0] = 0xc1 | 0x3c; // reserved bits set: ignored
        let p = TaggedPacket::new_unchecked(&bytes);
        assert_eq!(TaggedRepr::parse(&p), Ok(write_repr(true)));
    }

    #[test]
    fn untagged_octet_rejected() {
        let mut bytes = WRITE_LAST;
        bytes[0] = 0x41;
        let p = TaggedPacket::new_unchecked(&bytes);
        assert_eq!(TaggedRepr::parse(&p), Err(DdpError::LocalCatastrophic));
    }

    #[test]
    fn display() {
        let p = TaggedPacket::new_unchecked(&WRITE_LAST[..]);
        assert_eq!(
            p.to_string(),
            "DDP tagged L=1 ulp=0x40 stag=0x12345678 to=0x1000 len=8"
        );
        let p = TaggedPacket::new_unchecked(&WRITE_LAST[..3]);
        assert!(p.to_string().contains("shorter"));
    }
}
