//! The RFC 7306 §5.2 Atomic Request and Atomic Response headers (wire-format.md §4.2).
//!
//! Atomic Request (after an untagged DDP header, QN 1, opcode 0xA), 52 octets:
//!
//! | off | size | field |
//! |---|---|---|
//! | 0 | 4 | Reserved (28 bits) and AOpCode (low 4 bits of octet 3) |
//! | 4 | 4 | Request Identifier |
//! | 8 | 4 | Remote STag |
//! | 12 | 8 | Remote Tagged Offset |
//! | 20 | 8 | Add Data or Swap Data |
//! | 28 | 8 | Add Mask or Swap Mask |
//! | 36 | 8 | Compare Data |
//! | 44 | 8 | Compare Mask |
//!
//! Atomic Response (QN 3, opcode 0xB), 12 octets: Original Request Identifier (4), Original
//! Remote Data Value (8). RFC 7306 §4 prose says 32 octets; its Figure 6, Appendix A.2,
//! urdma and Wireshark all use 12, and so do we.

use core::fmt;

use ddp::STag;

use super::{WireError, read_u32, read_u64, write_u32, write_u64};

/// Length of the Atomic Request header in octets.
pub const ATOMIC_REQUEST_LEN: usize = 52;
/// Length of the Atomic Response header in octets.
pub const ATOMIC_RESPONSE_LEN: usize = 12;

const AOPCODE_MASK: u8 = 0x0F;

mod field {
    use crate::wire::Field;

    pub(super) const RESERVED: Field = 0..3;
    pub(super) const AOPCODE: usize = 3;
    pub(super) const REQ_ID: Field = 4..8;
    pub(super) const STAG: Field = 8..12;
    pub(super) const TO: Field = 12..20;
    pub(super) const ADD_OR_SWAP: Field = 20..28;
    pub(super) const ADD_OR_SWAP_MASK: Field = 28..36;
    pub(super) const COMPARE: Field = 36..44;
    pub(super) const COMPARE_MASK: Field = 44..52;

    pub(super) const RESP_REQ_ID: Field = 0..4;
    pub(super) const RESP_ORIG: Field = 4..12;
}

/// The Atomic Operation subcode (IANA "RDMAP Message Atomic Operation Subcodes").
///
/// Conversion from `u8` is total. Only 0x0 and 0x2 exist; urdma's 0x1 "CmpSwap" is not
/// CmpSwap (0x1 is reserved) and parses as `Unknown(1)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AtomicOp {
    /// 0x0: masked Fetch and Add.
    FetchAdd,
    /// 0x2: masked Compare and Swap.
    CmpSwap,
    /// Any other subcode.
    Unknown(u8),
}

impl From<u8> for AtomicOp {
    fn from(value: u8) -> Self {
        match value {
            0x0 => Self::FetchAdd,
            0x2 => Self::CmpSwap,
            other => Self::Unknown(other),
        }
    }
}

impl From<AtomicOp> for u8 {
    fn from(value: AtomicOp) -> Self {
        match value {
            AtomicOp::FetchAdd => 0x0,
            AtomicOp::CmpSwap => 0x2,
            AtomicOp::Unknown(v) => v,
        }
    }
}

impl fmt::Display for AtomicOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::FetchAdd => f.write_str("FetchAdd"),
            Self::CmpSwap => f.write_str("CmpSwap"),
            Self::Unknown(v) => write!(f, "unknown atomic op {v:#x}"),
        }
    }
}

fixed_len_packet!(
    /// A view of a buffer as an Atomic Request header.
    AtomicRequestPacket,
    ATOMIC_REQUEST_LEN
);

impl<T: AsRef<[u8]>> AtomicRequestPacket<T> {
    /// AOpCode: the low 4 bits of octet 3 (the 28 reserved bits are ignored).
    pub fn op(&self) -> AtomicOp {
        AtomicOp::from(self.buffer.as_ref()[field::AOPCODE] & AOPCODE_MASK)
    }

    /// The Request Identifier, echoed in the Atomic Response.
    pub fn req_id(&self) -> u32 {
        read_u32(self.buffer.as_ref(), field::REQ_ID)
    }

    /// The Remote STag.
    pub fn stag(&self) -> STag {
        STag::from_u32(read_u32(self.buffer.as_ref(), field::STAG))
    }

    /// The Remote Tagged Offset (must be 8-octet aligned; not checked here).
    pub fn to(&self) -> u64 {
        read_u64(self.buffer.as_ref(), field::TO)
    }

    /// Add Data (FetchAdd) or Swap Data (CmpSwap).
    pub fn add_or_swap(&self) -> u64 {
        read_u64(self.buffer.as_ref(), field::ADD_OR_SWAP)
    }

    /// Add Mask (FetchAdd) or Swap Mask (CmpSwap).
    pub fn add_or_swap_mask(&self) -> u64 {
        read_u64(self.buffer.as_ref(), field::ADD_OR_SWAP_MASK)
    }

    /// Compare Data (CmpSwap; FetchAdd sends 0).
    pub fn compare(&self) -> u64 {
        read_u64(self.buffer.as_ref(), field::COMPARE)
    }

    /// Compare Mask (CmpSwap; FetchAdd sends all-ones).
    pub fn compare_mask(&self) -> u64 {
        read_u64(self.buffer.as_ref(), field::COMPARE_MASK)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> AtomicRequestPacket<T> {
    /// Sets AOpCode (low 4 bits) and clears the 28 reserved bits.
    pub fn set_op(&mut self, value: AtomicOp) {
        let buf = self.buffer.as_mut();
        buf[field::RESERVED].fill(0);
        buf[field::AOPCODE] = u8::from(value) & AOPCODE_MASK;
    }

    /// Sets the Request Identifier.
    pub fn set_req_id(&mut self, value: u32) {
        write_u32(self.buffer.as_mut(), field::REQ_ID, value);
    }

    /// Sets the Remote STag.
    pub fn set_stag(&mut self, value: STag) {
        write_u32(self.buffer.as_mut(), field::STAG, value.to_u32());
    }

    /// Sets the Remote Tagged Offset.
    pub fn set_to(&mut self, value: u64) {
        write_u64(self.buffer.as_mut(), field::TO, value);
    }

    /// Sets Add Data or Swap Data.
    pub fn set_add_or_swap(&mut self, value: u64) {
        write_u64(self.buffer.as_mut(), field::ADD_OR_SWAP, value);
    }

    /// Sets Add Mask or Swap Mask.
    pub fn set_add_or_swap_mask(&mut self, value: u64) {
        write_u64(self.buffer.as_mut(), field::ADD_OR_SWAP_MASK, value);
    }

    /// Sets Compare Data.
    pub fn set_compare(&mut self, value: u64) {
        write_u64(self.buffer.as_mut(), field::COMPARE, value);
    }

    /// Sets Compare Mask.
    pub fn set_compare_mask(&mut self, value: u64) {
        write_u64(self.buffer.as_mut(), field::COMPARE_MASK, value);
    }
}

/// A parsed Atomic Request header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct AtomicRequestRepr {
    /// The operation; [`AtomicOp::Unknown`] values are kept so the responder can reject them.
    pub op: AtomicOp,
    /// Request Identifier, chosen by the requester.
    pub req_id: u32,
    /// Remote STag.
    pub stag: STag,
    /// Remote Tagged Offset.
    pub to: u64,
    /// Add Data or Swap Data.
    pub add_or_swap: u64,
    /// Add Mask or Swap Mask.
    pub add_or_swap_mask: u64,
    /// Compare Data.
    pub compare: u64,
    /// Compare Mask.
    pub compare_mask: u64,
}

impl AtomicRequestRepr {
    /// An unmasked FetchAdd as RFC 7306 senders build it: mask 0, compare 0, compare mask
    /// all-ones.
    pub const fn fetch_add(req_id: u32, stag: STag, to: u64, add: u64) -> Self {
        Self {
            op: AtomicOp::FetchAdd,
            req_id,
            stag,
            to,
            add_or_swap: add,
            add_or_swap_mask: 0,
            compare: 0,
            compare_mask: u64::MAX,
        }
    }

    /// An unmasked CmpSwap: both masks all-ones.
    pub const fn cmp_swap(req_id: u32, stag: STag, to: u64, compare: u64, swap: u64) -> Self {
        Self {
            op: AtomicOp::CmpSwap,
            req_id,
            stag,
            to,
            add_or_swap: swap,
            add_or_swap_mask: u64::MAX,
            compare,
            compare_mask: u64::MAX,
        }
    }

    /// Parses the first [`ATOMIC_REQUEST_LEN`] octets of `buf`. Never panics.
    pub fn parse(buf: &[u8]) -> Result<Self, WireError> {
        Self::parse_packet(&AtomicRequestPacket::new_checked(buf)?)
    }

    /// Parses a packet view (smoltcp style).
    pub fn parse_packet<T: AsRef<[u8]>>(
        packet: &AtomicRequestPacket<T>,
    ) -> Result<Self, WireError> {
        packet.check_len()?;
        Ok(Self {
            op: packet.op(),
            req_id: packet.req_id(),
            stag: packet.stag(),
            to: packet.to(),
            add_or_swap: packet.add_or_swap(),
            add_or_swap_mask: packet.add_or_swap_mask(),
            compare: packet.compare(),
            compare_mask: packet.compare_mask(),
        })
    }

    /// The header length, always [`ATOMIC_REQUEST_LEN`].
    pub const fn buffer_len() -> usize {
        ATOMIC_REQUEST_LEN
    }

    /// Writes the header into the first [`ATOMIC_REQUEST_LEN`] octets of `buf`.
    ///
    /// # Panics
    /// If `buf` is shorter than [`ATOMIC_REQUEST_LEN`].
    pub fn emit(&self, buf: &mut [u8]) {
        self.emit_packet(&mut AtomicRequestPacket::new_unchecked(buf));
    }

    /// Writes the header through a packet view (smoltcp style).
    ///
    /// # Panics
    /// If the view's buffer is shorter than [`ATOMIC_REQUEST_LEN`].
    pub fn emit_packet<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut AtomicRequestPacket<T>) {
        packet.set_op(self.op);
        packet.set_req_id(self.req_id);
        packet.set_stag(self.stag);
        packet.set_to(self.to);
        packet.set_add_or_swap(self.add_or_swap);
        packet.set_add_or_swap_mask(self.add_or_swap_mask);
        packet.set_compare(self.compare);
        packet.set_compare_mask(self.compare_mask);
    }
}

fixed_len_packet!(
    /// A view of a buffer as an Atomic Response header.
    AtomicResponsePacket,
    ATOMIC_RESPONSE_LEN
);

impl<T: AsRef<[u8]>> AtomicResponsePacket<T> {
    /// The Original Request Identifier.
    pub fn req_id(&self) -> u32 {
        read_u32(self.buffer.as_ref(), field::RESP_REQ_ID)
    }

    /// The Original Remote Data Value (the target's value before the operation).
    pub fn orig(&self) -> u64 {
        read_u64(self.buffer.as_ref(), field::RESP_ORIG)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> AtomicResponsePacket<T> {
    /// Sets the Original Request Identifier.
    pub fn set_req_id(&mut self, value: u32) {
        write_u32(self.buffer.as_mut(), field::RESP_REQ_ID, value);
    }

    /// Sets the Original Remote Data Value.
    pub fn set_orig(&mut self, value: u64) {
        write_u64(self.buffer.as_mut(), field::RESP_ORIG, value);
    }
}

/// A parsed Atomic Response header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct AtomicResponseRepr {
    /// The Request Identifier of the request being answered.
    pub req_id: u32,
    /// The target's value before the operation.
    pub orig: u64,
}

impl AtomicResponseRepr {
    /// Parses the first [`ATOMIC_RESPONSE_LEN`] octets of `buf`. Never panics.
    pub fn parse(buf: &[u8]) -> Result<Self, WireError> {
        Self::parse_packet(&AtomicResponsePacket::new_checked(buf)?)
    }

    /// Parses a packet view (smoltcp style).
    pub fn parse_packet<T: AsRef<[u8]>>(
        packet: &AtomicResponsePacket<T>,
    ) -> Result<Self, WireError> {
        packet.check_len()?;
        Ok(Self {
            req_id: packet.req_id(),
            orig: packet.orig(),
        })
    }

    /// The header length, always [`ATOMIC_RESPONSE_LEN`].
    pub const fn buffer_len() -> usize {
        ATOMIC_RESPONSE_LEN
    }

    /// Writes the header into the first [`ATOMIC_RESPONSE_LEN`] octets of `buf`.
    ///
    /// # Panics
    /// If `buf` is shorter than [`ATOMIC_RESPONSE_LEN`].
    pub fn emit(&self, buf: &mut [u8]) {
        self.emit_packet(&mut AtomicResponsePacket::new_unchecked(buf));
    }

    /// Writes the header through a packet view (smoltcp style).
    ///
    /// # Panics
    /// If the view's buffer is shorter than [`ATOMIC_RESPONSE_LEN`].
    pub fn emit_packet<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut AtomicResponsePacket<T>) {
        packet.set_req_id(self.req_id);
        packet.set_orig(self.orig);
    }
}

#[cfg(test)]
mod tests;
