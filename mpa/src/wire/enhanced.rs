//! The RFC 6581 "Enhanced RDMA Connection Establishment Data" word (4 octets, big-endian).
//!
//! ```text
//! u16 #1 = A<<15 | B<<14 | IRD      u16 #2 = C<<15 | D<<14 | ORD
//! ```
//! A = peer-to-peer, B = zero-length Send RTR, C = zero-length RDMA Write RTR,
//! D = zero-length RDMA Read RTR. IRD/ORD are 14 bits; 0x3FFF means "no negotiation".

use crate::{MpaError, RtrFlags};

/// Length of the block in octets.
pub const LEN: usize = 4;
/// IRD/ORD value meaning "no automatic negotiation; the ULP handles it".
pub const NO_NEGOTIATION: u16 = 0x3FFF;
/// Mask of the 14-bit IRD and ORD values.
pub const IRD_ORD_MASK: u16 = 0x3FFF;
/// A bit (peer-to-peer), in the IRD word.
pub const FLAG_P2P: u16 = 0x8000;
/// B bit (zero-length Send RTR), in the IRD word.
pub const FLAG_SEND_RTR: u16 = 0x4000;
/// C bit (zero-length RDMA Write RTR), in the ORD word.
pub const FLAG_WRITE_RTR: u16 = 0x8000;
/// D bit (zero-length RDMA Read RTR), in the ORD word.
pub const FLAG_READ_RTR: u16 = 0x4000;

mod field {
    use crate::wire::Field;
    pub(crate) const IRD: Field = 0..2;
    pub(crate) const ORD: Field = 2..4;
}

/// A view over the 4-octet enhanced block.
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
            Err(MpaError::InvalidFrame("enhanced block truncated"))
        } else {
            Ok(())
        }
    }

    /// Returns the wrapped buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    fn word(&self, f: super::Field) -> u16 {
        let d = &self.buffer.as_ref()[f];
        u16::from_be_bytes([d[0], d[1]])
    }

    /// The raw first word (A, B, IRD).
    pub fn ird_word(&self) -> u16 {
        self.word(field::IRD)
    }

    /// The raw second word (C, D, ORD).
    pub fn ord_word(&self) -> u16 {
        self.word(field::ORD)
    }

    /// A: peer-to-peer model.
    pub fn peer_to_peer(&self) -> bool {
        self.ird_word() & FLAG_P2P != 0
    }

    /// B: zero-length Send RTR.
    pub fn send_rtr(&self) -> bool {
        self.ird_word() & FLAG_SEND_RTR != 0
    }

    /// C: zero-length RDMA Write RTR.
    pub fn write_rtr(&self) -> bool {
        self.ord_word() & FLAG_WRITE_RTR != 0
    }

    /// D: zero-length RDMA Read RTR.
    pub fn read_rtr(&self) -> bool {
        self.ord_word() & FLAG_READ_RTR != 0
    }

    /// The B/C/D flags as a set.
    pub fn rtr(&self) -> RtrFlags {
        let mut flags = RtrFlags::NONE;
        if self.send_rtr() {
            flags |= RtrFlags::SEND;
        }
        if self.write_rtr() {
            flags |= RtrFlags::WRITE;
        }
        if self.read_rtr() {
            flags |= RtrFlags::READ;
        }
        flags
    }

    /// IRD (14 bits).
    pub fn ird(&self) -> u16 {
        self.ird_word() & IRD_ORD_MASK
    }

    /// ORD (14 bits).
    pub fn ord(&self) -> u16 {
        self.ord_word() & IRD_ORD_MASK
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    fn set_word(&mut self, f: super::Field, value: u16) {
        self.buffer.as_mut()[f].copy_from_slice(&value.to_be_bytes());
    }

    fn update(&mut self, f: super::Field, mask: u16, value: u16) {
        let old = self.word(f.clone());
        self.set_word(f, (old & !mask) | (value & mask));
    }

    fn set_bit(&mut self, f: super::Field, bit: u16, on: bool) {
        self.update(f, bit, if on { bit } else { 0 });
    }

    /// Sets A.
    pub fn set_peer_to_peer(&mut self, on: bool) {
        self.set_bit(field::IRD, FLAG_P2P, on);
    }

    /// Sets B.
    pub fn set_send_rtr(&mut self, on: bool) {
        self.set_bit(field::IRD, FLAG_SEND_RTR, on);
    }

    /// Sets C.
    pub fn set_write_rtr(&mut self, on: bool) {
        self.set_bit(field::ORD, FLAG_WRITE_RTR, on);
    }

    /// Sets D.
    pub fn set_read_rtr(&mut self, on: bool) {
        self.set_bit(field::ORD, FLAG_READ_RTR, on);
    }

    /// Sets B, C and D from a set.
    pub fn set_rtr(&mut self, rtr: RtrFlags) {
        self.set_send_rtr(rtr.contains(RtrFlags::SEND));
        self.set_write_rtr(rtr.contains(RtrFlags::WRITE));
        self.set_read_rtr(rtr.contains(RtrFlags::READ));
    }

    /// Sets IRD (masked to 14 bits).
    pub fn set_ird(&mut self, ird: u16) {
        self.update(field::IRD, IRD_ORD_MASK, ird);
    }

    /// Sets ORD (masked to 14 bits).
    pub fn set_ord(&mut self, ord: u16) {
        self.update(field::ORD, IRD_ORD_MASK, ord);
    }
}

/// The parsed enhanced block.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct EnhancedRepr {
    /// A: peer-to-peer model.
    pub p2p: bool,
    /// B/C/D as sent (kept even when `p2p` is false; the handshake ignores them then).
    pub rtr: RtrFlags,
    /// IRD, 14 bits.
    pub ird: u16,
    /// ORD, 14 bits.
    pub ord: u16,
}

impl EnhancedRepr {
    /// Parses a checked view.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(packet: &Packet<&T>) -> Result<Self, MpaError> {
        packet.check_len()?;
        Ok(Self {
            p2p: packet.peer_to_peer(),
            rtr: packet.rtr(),
            ird: packet.ird(),
            ord: packet.ord(),
        })
    }

    /// Always 4.
    pub const fn buffer_len(&self) -> usize {
        LEN
    }

    /// Writes the block (IRD/ORD masked to 14 bits) into the first 4 octets.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Packet<T>) {
        let ird = if self.p2p { FLAG_P2P } else { 0 }
            | if self.rtr.contains(RtrFlags::SEND) {
                FLAG_SEND_RTR
            } else {
                0
            }
            | (self.ird & IRD_ORD_MASK);
        let ord = if self.rtr.contains(RtrFlags::WRITE) {
            FLAG_WRITE_RTR
        } else {
            0
        } | if self.rtr.contains(RtrFlags::READ) {
            FLAG_READ_RTR
        } else {
            0
        } | (self.ord & IRD_ORD_MASK);
        packet.set_word(field::IRD, ird);
        packet.set_word(field::ORD, ord);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // wire-format.md §5.3: A=1, B=0, IRD=16; C=1, D=1, ORD=16.
    static REQUEST_BLOCK: [u8; 4] = [0x80, 0x10, 0xc0, 0x10];
    // §5.3 client-server and "no negotiation" blocks.
    static CLIENT_SERVER: [u8; 4] = [0x00, 0x04, 0x00, 0x04];
    static NO_NEG: [u8; 4] = [0x3f, 0xff, 0x3f, 0xff];

    fn request_repr() -> EnhancedRepr {
        EnhancedRepr {
            p2p: true,
            rtr: RtrFlags::WRITE | RtrFlags::READ,
            ird: 16,
            ord: 16,
        }
    }

    #[test]
    fn deconstruct() {
        let p = Packet::new_unchecked(&REQUEST_BLOCK[..]);
        assert!(p.peer_to_peer());
        assert!(!p.send_rtr());
        assert!(p.write_rtr());
        assert!(p.read_rtr());
        assert_eq!(p.ird(), 16);
        assert_eq!(p.ord(), 16);
        assert_eq!(p.rtr(), RtrFlags::WRITE | RtrFlags::READ);
        let p = Packet::new_unchecked(&NO_NEG[..]);
        assert_eq!((p.ird(), p.ord()), (NO_NEGOTIATION, NO_NEGOTIATION));
        assert!(!p.peer_to_peer() && p.rtr().is_empty());
    }

    #[test]
    fn construct() {
        let mut buf = [0xa5u8; 4];
        let mut p = Packet::new_unchecked(&mut buf[..]);
        p.set_peer_to_peer(true);
        p.set_send_rtr(false);
        p.set_ird(16);
        p.set_write_rtr(true);
        p.set_read_rtr(true);
        p.set_ord(16);
        assert_eq!(buf, REQUEST_BLOCK);
    }

    #[test]
    fn parse() {
        let r = EnhancedRepr::parse(&Packet::new_unchecked(&REQUEST_BLOCK[..])).unwrap();
        assert_eq!(r, request_repr());
        let r = EnhancedRepr::parse(&Packet::new_unchecked(&CLIENT_SERVER[..])).unwrap();
        assert_eq!(
            r,
            EnhancedRepr {
                p2p: false,
                rtr: RtrFlags::NONE,
                ird: 4,
                ord: 4
            }
        );
    }

    #[test]
    fn emit() {
        for (repr, bytes) in [
            (request_repr(), REQUEST_BLOCK),
            (
                EnhancedRepr {
                    p2p: false,
                    rtr: RtrFlags::NONE,
                    ird: 4,
                    ord: 4,
                },
                CLIENT_SERVER,
            ),
            (
                EnhancedRepr {
                    p2p: false,
                    rtr: RtrFlags::NONE,
                    ird: NO_NEGOTIATION,
                    ord: NO_NEGOTIATION,
                },
                NO_NEG,
            ),
            (
                EnhancedRepr {
                    p2p: true,
                    rtr: RtrFlags::SEND,
                    ird: 0,
                    ord: 0,
                },
                [0xc0, 0, 0, 0],
            ),
        ] {
            let mut buf = [0xa5u8; 4];
            assert_eq!(repr.buffer_len(), 4);
            repr.emit(&mut Packet::new_unchecked(&mut buf[..]));
            assert_eq!(buf, bytes);
        }
    }

    #[test]
    fn impossible_len() {
        assert!(Packet::new_checked(&REQUEST_BLOCK[..3]).is_err());
        assert!(EnhancedRepr::parse(&Packet::new_unchecked(&REQUEST_BLOCK[..2])).is_err());
        assert!(Packet::new_checked(&REQUEST_BLOCK[..]).is_ok());
    }
}
