//! The untagged DDP header (T=0), 18 octets (RFC 5041 §4.3).
//!
//! | off | size | field |
//! |---|---|---|
//! | 0 | 1 | control (T=0, L, DV) |
//! | 1 | 1 | RsvdULP octet 0 (RDMAP control octet) |
//! | 2 | 4 | RsvdULP octets 1..5 (RDMAP: Invalidate STag, or 0) |
//! | 6 | 4 | QN (queue number) |
//! | 10 | 4 | MSN (message sequence number) |
//! | 14 | 4 | MO (message offset) |
//! | 18 | … | payload |

use core::fmt;

use super::control::Control;
use super::{read_u32, write_u32};
use crate::{DdpError, UNTAGGED_HEADER_LEN};

mod field {
    use crate::wire::Field;

    pub(super) const CONTROL: usize = 0;
    pub(super) const RSVD_ULP: usize = 1;
    pub(super) const RSVD_ULP_EXT: Field = 2..6;
    pub(super) const QN: Field = 6..10;
    pub(super) const MSN: Field = 10..14;
    pub(super) const MO: Field = 14..18;
    pub(super) const PAYLOAD: usize = 18;
}

/// A read/write view of an untagged DDP segment (header and payload) in a buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UntaggedPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> UntaggedPacket<T> {
    /// Wraps a buffer without checking its length. Accessors panic if it is shorter
    /// than [`UNTAGGED_HEADER_LEN`]; use [`UntaggedPacket::new_checked`] for peer input.
    pub const fn new_unchecked(buffer: T) -> Self {
        Self { buffer }
    }

    /// Wraps a buffer after [`UntaggedPacket::check_len`].
    pub fn new_checked(buffer: T) -> Result<Self, DdpError> {
        let packet = Self::new_unchecked(buffer);
        packet.check_len()?;
        Ok(packet)
    }

    /// Fails with [`DdpError::Truncated`] if the buffer is shorter than the untagged
    /// header. After success no accessor can panic.
    pub fn check_len(&self) -> Result<(), DdpError> {
        if self.buffer.as_ref().len() < UNTAGGED_HEADER_LEN {
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

    /// The T bit (0 for a well-formed untagged segment).
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

    /// Octet 1, the first octet of RsvdULP (RDMAP's control octet).
    #[inline]
    pub fn rsvd_ulp(&self) -> u8 {
        self.buffer.as_ref()[field::RSVD_ULP]
    }

    /// Octets 2..6, the remaining 32 bits of RsvdULP (RDMAP: the Invalidate STag).
    #[inline]
    pub fn rsvd_ulp_ext(&self) -> u32 {
        read_u32(self.buffer.as_ref(), field::RSVD_ULP_EXT)
    }

    /// The queue number.
    #[inline]
    pub fn qn(&self) -> u32 {
        read_u32(self.buffer.as_ref(), field::QN)
    }

    /// The message sequence number.
    #[inline]
    pub fn msn(&self) -> u32 {
        read_u32(self.buffer.as_ref(), field::MSN)
    }

    /// The message offset of the first payload octet.
    #[inline]
    pub fn mo(&self) -> u32 {
        read_u32(self.buffer.as_ref(), field::MO)
    }
}

impl<'a, T: AsRef<[u8]> + ?Sized> UntaggedPacket<&'a T> {
    /// The payload: everything after the header, borrowed for the buffer's lifetime.
    #[inline]
    pub fn payload(&self) -> &'a [u8] {
        &self.buffer.as_ref()[field::PAYLOAD..]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> UntaggedPacket<T> {
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

    /// Sets octet 1 (RsvdULP octet 0).
    #[inline]
    pub fn set_rsvd_ulp(&mut self, value: u8) {
        self.buffer.as_mut()[field::RSVD_ULP] = value;
    }

    /// Sets octets 2..6 (RsvdULP octets 1..5).
    #[inline]
    pub fn set_rsvd_ulp_ext(&mut self, value: u32) {
        write_u32(self.buffer.as_mut(), field::RSVD_ULP_EXT, value);
    }

    /// Sets the queue number.
    #[inline]
    pub fn set_qn(&mut self, qn: u32) {
        write_u32(self.buffer.as_mut(), field::QN, qn);
    }

    /// Sets the message sequence number.
    #[inline]
    pub fn set_msn(&mut self, msn: u32) {
        write_u32(self.buffer.as_mut(), field::MSN, msn);
    }

    /// Sets the message offset.
    #[inline]
    pub fn set_mo(&mut self, mo: u32) {
        write_u32(self.buffer.as_mut(), field::MO, mo);
    }

    /// The payload, mutably.
    #[inline]
    pub fn payload_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[field::PAYLOAD..]
    }
}

impl<T: AsRef<[u8]>> fmt::Display for UntaggedPacket<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match UntaggedRepr::parse(self) {
            Ok(repr) => write!(
                f,
                "{repr} len={}",
                self.buffer.as_ref().len() - UNTAGGED_HEADER_LEN
            ),
            Err(err) => write!(f, "DDP untagged ({err})"),
        }
    }
}

/// A parsed untagged DDP header.
#[derive(Copy, Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct UntaggedRepr {
    /// The L bit: last segment of the message.
    pub last: bool,
    /// Header octet 1 (RDMAP's control octet).
    pub rsvd_ulp: u8,
    /// Header octets 2..6 (RDMAP: the Invalidate STag, or 0).
    pub rsvd_ulp_ext: u32,
    /// Queue number.
    pub qn: u32,
    /// Message sequence number.
    pub msn: u32,
    /// Message offset of the first payload octet.
    pub mo: u32,
}

impl UntaggedRepr {
    /// Parses the header of a (possibly unchecked) packet. Never panics.
    ///
    /// Errors, in order: [`DdpError::Truncated`] if shorter than 18 octets; a version
    /// error by the T bit if DV != 1; [`DdpError::LocalCatastrophic`] if the T bit is
    /// set (a tagged segment was handed to the untagged parser: dispatch with
    /// [`crate::SegmentRepr::parse`]). Reserved bits are ignored.
    pub fn parse<T: AsRef<[u8]>>(packet: &UntaggedPacket<T>) -> Result<Self, DdpError> {
        packet.check_len()?;
        let control = packet.control();
        control.check_version()?;
        if control.tagged() {
            return Err(DdpError::LocalCatastrophic);
        }
        Ok(Self {
            last: control.last(),
            rsvd_ulp: packet.rsvd_ulp(),
            rsvd_ulp_ext: packet.rsvd_ulp_ext(),
            qn: packet.qn(),
            msn: packet.msn(),
            mo: packet.mo(),
        })
    }

    /// Header length: always [`UNTAGGED_HEADER_LEN`].
    pub const fn header_len(&self) -> usize {
        UNTAGGED_HEADER_LEN
    }

    /// Octets [`UntaggedRepr::emit`] writes: always [`UNTAGGED_HEADER_LEN`].
    pub const fn buffer_len(&self) -> usize {
        UNTAGGED_HEADER_LEN
    }

    /// Writes the 18 header octets (T=0, reserved bits zero, DV=1). The payload is
    /// left untouched. Panics if the buffer is shorter than the header (our own
    /// buffer, never peer input).
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut UntaggedPacket<T>) {
        packet.set_control(Control::new(false, self.last));
        packet.set_rsvd_ulp(self.rsvd_ulp);
        packet.set_rsvd_ulp_ext(self.rsvd_ulp_ext);
        packet.set_qn(self.qn);
        packet.set_msn(self.msn);
        packet.set_mo(self.mo);
    }
}

impl fmt::Display for UntaggedRepr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "DDP untagged L={} ulp={:#04x} ext={:#010x} qn={} msn={} mo={}",
            u8::from(self.last),
            self.rsvd_ulp,
            self.rsvd_ulp_ext,
            self.qn,
            self.msn,
            self.mo
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// §5.4 Send, L=1, QN 0, MSN 1, MO 0, payload "ABCD" (ULPDU only).
    static SEND: [u8; 22] = [
        0x41, 0x43, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, //
        0x00, 0x00, 0x00, 0x00, b'A', b'B', b'C', b'D',
    ];

    /// §5.4 Send with SE and Invalidate, Invalidate STag 0x1234, MSN 3, payload be ef.
    static SEND_SE_INV: [u8; 20] = [
        0x41, 0x46, 0x00, 0x00, 0x12, 0x34, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x03, //
        0x00, 0x00, 0x00, 0x00, 0xbe, 0xef,
    ];

    /// §5.4 RDMA Read Request header (QN 1, MSN 1) with its 28-octet RDMAP header.
    static READ_REQUEST: [u8; 46] = [
        0x41, 0x41, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x01, //
        0x00, 0x00, 0x00, 0x00, 0x11, 0x22, 0x33, 0x44, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, //
        0x20, 0x00, 0x00, 0x00, 0x01, 0x00, 0x55, 0x66, 0x77, 0x88, 0x00, 0x00, 0x00, 0x00, //
        0x00, 0x00, 0x30, 0x00,
    ];

    /// §5.5 Terminate (QN 2, MSN 1), MPA CRC error, Terminate header 20 02 00 00.
    static TERMINATE: [u8; 22] = [
        0x41, 0x47, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x02, 0x00, 0x00, 0x00, 0x01, //
        0x00, 0x00, 0x00, 0x00, 0x20, 0x02, 0x00, 0x00,
    ];

    fn send_repr() -> UntaggedRepr {
        UntaggedRepr {
            last: true,
            rsvd_ulp: 0x43,
            rsvd_ulp_ext: 0,
            qn: 0,
            msn: 1,
            mo: 0,
        }
    }

    fn send_se_inv_repr() -> UntaggedRepr {
        UntaggedRepr {
            last: true,
            rsvd_ulp: 0x46,
            rsvd_ulp_ext: 0x1234,
            qn: 0,
            msn: 3,
            mo: 0,
        }
    }

    #[test]
    fn deconstruct() {
        let p = UntaggedPacket::new_checked(&SEND[..]).unwrap();
        assert!(!p.tagged());
        assert!(p.last());
        assert_eq!(p.version(), 1);
        assert_eq!(p.rsvd_ulp(), 0x43);
        assert_eq!(p.rsvd_ulp_ext(), 0);
        assert_eq!(p.qn(), 0);
        assert_eq!(p.msn(), 1);
        assert_eq!(p.mo(), 0);
        assert_eq!(p.payload(), b"ABCD");

        let p = UntaggedPacket::new_checked(&SEND_SE_INV[..]).unwrap();
        assert_eq!(p.rsvd_ulp(), 0x46);
        assert_eq!(p.rsvd_ulp_ext(), 0x1234);
        assert_eq!(p.msn(), 3);
        assert_eq!(p.payload(), &[0xbe, 0xef]);

        let p = UntaggedPacket::new_checked(&READ_REQUEST[..]).unwrap();
        assert_eq!(p.rsvd_ulp(), 0x41);
        assert_eq!(p.qn(), 1);
        assert_eq!(p.msn(), 1);
        assert_eq!(p.payload().len(), 28);
        assert_eq!(&p.payload()[..4], &[0x11, 0x22, 0x33, 0x44]);

        let p = UntaggedPacket::new_checked(&TERMINATE[..]).unwrap();
        assert_eq!(p.rsvd_ulp(), 0x47);
        assert_eq!(p.qn(), 2);
        assert_eq!(p.payload(), &[0x20, 0x02, 0x00, 0x00]);
    }

    #[test]
    fn construct() {
        let mut bytes = [0xa5u8; 22];
        let mut p = UntaggedPacket::new_unchecked(&mut bytes[..]);
        p.set_control(Control::new(false, false));
        p.set_last(true);
        p.set_rsvd_ulp(0x43);
        p.set_rsvd_ulp_ext(0);
        p.set_qn(0);
        p.set_msn(1);
        p.set_mo(0);
        p.payload_mut().copy_from_slice(b"ABCD");
        assert_eq!(bytes, SEND);

        let mut bytes = [0xa5u8; 20];
        let mut p = UntaggedPacket::new_unchecked(&mut bytes[..]);
        p.set_control(Control::from_u8(0x41));
        p.set_rsvd_ulp(0x46);
        p.set_rsvd_ulp_ext(0x1234);
        p.set_qn(0);
        p.set_msn(3);
        p.set_mo(0);
        p.payload_mut().copy_from_slice(&[0xbe, 0xef]);
        assert_eq!(bytes, SEND_SE_INV);
    }

    #[test]
    fn set_last_clears() {
        let mut bytes = SEND;
        let mut p = UntaggedPacket::new_unchecked(&mut bytes[..]);
        p.set_last(false);
        assert_eq!(p.control().to_u8(), 0x01);
        assert!(!p.last());
    }

    #[test]
    fn parse() {
        let p = UntaggedPacket::new_unchecked(&SEND[..]);
        assert_eq!(UntaggedRepr::parse(&p), Ok(send_repr()));
        let p = UntaggedPacket::new_unchecked(&SEND_SE_INV[..]);
        assert_eq!(UntaggedRepr::parse(&p), Ok(send_se_inv_repr()));
        let p = UntaggedPacket::new_unchecked(&READ_REQUEST[..]);
        assert_eq!(
            UntaggedRepr::parse(&p),
            Ok(UntaggedRepr {
                last: true,
                rsvd_ulp: 0x41,
                rsvd_ulp_ext: 0,
                qn: 1,
                msn: 1,
                mo: 0,
            })
        );
    }

    #[test]
    fn emit() {
        for (repr, literal) in [
            (send_repr(), &SEND[..]),
            (send_se_inv_repr(), &SEND_SE_INV[..]),
        ] {
            let mut bytes = vec![0xa5u8; literal.len()];
            let mut p = UntaggedPacket::new_unchecked(&mut bytes[..]);
            repr.emit(&mut p);
            p.payload_mut()
                .copy_from_slice(&literal[UNTAGGED_HEADER_LEN..]);
            assert_eq!(bytes, literal);
            assert_eq!(repr.buffer_len(), UNTAGGED_HEADER_LEN);
        }
    }

    #[test]
    fn impossible_len() {
        for len in 0..UNTAGGED_HEADER_LEN {
            let bytes = &SEND[..len];
            assert_eq!(UntaggedPacket::new_checked(bytes), Err(DdpError::Truncated));
            let p = UntaggedPacket::new_unchecked(bytes);
            assert_eq!(p.check_len(), Err(DdpError::Truncated));
            assert_eq!(UntaggedRepr::parse(&p), Err(DdpError::Truncated));
        }
        assert!(UntaggedPacket::new_checked(&SEND[..UNTAGGED_HEADER_LEN]).is_ok());
    }

    #[test]
    fn bad_version_and_reserved_bits() {
        let mut bytes = SEND;
        bytes[0] = 0x42; // DV = 2
        let p = UntaggedPacket::new_unchecked(&bytes);
        assert_eq!(UntaggedRepr::parse(&p), Err(DdpError::UntaggedVersion));
        bytes[0] = 0x40; // DV = 0
        let p = UntaggedPacket::new_unchecked(&bytes);
        assert_eq!(UntaggedRepr::parse(&p), Err(DdpError::UntaggedVersion));
        bytes[0] = 0x41 | 0x3c;
        let p = UntaggedPacket::new_unchecked(&bytes);
        assert_eq!(UntaggedRepr::parse(&p), Ok(send_repr()));
    }

    #[test]
    fn tagged_octet_rejected() {
        let mut bytes = SEND;
        bytes[0] = 0xc1;
        let p = UntaggedPacket::new_unchecked(&bytes);
        assert_eq!(UntaggedRepr::parse(&p), Err(DdpError::LocalCatastrophic));
    }

    #[test]
    fn display() {
        let p = UntaggedPacket::new_unchecked(&SEND_SE_INV[..]);
        assert_eq!(
            p.to_string(),
            "DDP untagged L=1 ulp=0x46 ext=0x00001234 qn=0 msn=3 mo=0 len=2"
        );
    }
}
