//! RDMA Read V2 (this stack's negotiated extension, seed 003 §3.3): a Read whose request
//! names no sink, so the requester exposes no STag for the data to land in.
//!
//! The 4-bit opcode field is full once Send with Immediate Data takes 0xC–0xF, so a V2
//! message is the Read Request (0x1) or Read Response (0x2) with the first reserved bit of
//! the RDMAP control octet set ([`READ_V2_FLAG`]): control octets `0x51` and `0x52`. Only a
//! peer that agreed ([`mpa::Extensions::READ_V2`]) ever receives one; a standard peer would
//! find a Read Request of the wrong length, or a Read Response for a sink it never named,
//! and terminate.
//!
//! Read V2 Request (untagged, QN 1, one segment), 16 octets after the DDP header:
//!
//! | off | size | field |
//! |---|---|---|
//! | 0 | 4 | RDMA Read Message Size (RDMARDSZ) |
//! | 4 | 4 | Data Source STag (SrcSTag) |
//! | 8 | 8 | Data Source Tagged Offset (SrcTO) |
//!
//! Read V2 Response (tagged): the STag field carries the request's MSN on QN 1 (the
//! requester's read identifier, not an STag) and the TO field the octet offset within the
//! read, from 0. Responses come in request order (RFC 5040 §5.2), so the requester matches
//! each against the oldest outstanding read and checks the identifier.

use ddp::STag;

use super::{ReadRequestRepr, WireError, read_u32, read_u64, write_u32, write_u64};

/// The RDMAP control octet bit (the first of the two reserved bits) that marks a V2 Read
/// Request or Response.
pub const READ_V2_FLAG: u8 = 0x10;
/// Length of the Read V2 Request header in octets.
pub const READ_V2_REQUEST_LEN: usize = 16;

mod field {
    use crate::wire::Field;

    pub(super) const SIZE: Field = 0..4;
    pub(super) const SRC_STAG: Field = 4..8;
    pub(super) const SRC_TO: Field = 8..16;
}

/// A parsed Read V2 Request header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ReadV2RequestRepr {
    /// RDMARDSZ: octets to read.
    pub size: u32,
    /// Data Source STag: the responder's buffer.
    pub src_stag: STag,
    /// Data Source Tagged Offset.
    pub src_to: u64,
}

impl ReadV2RequestRepr {
    /// Parses exactly [`READ_V2_REQUEST_LEN`] octets: fewer is [`WireError::Truncated`],
    /// more [`WireError::Malformed`].
    pub fn parse(buf: &[u8]) -> Result<Self, WireError> {
        match buf.len() {
            READ_V2_REQUEST_LEN => Ok(Self {
                size: read_u32(buf, field::SIZE),
                src_stag: STag::from_u32(read_u32(buf, field::SRC_STAG)),
                src_to: read_u64(buf, field::SRC_TO),
            }),
            n if n < READ_V2_REQUEST_LEN => Err(WireError::Truncated),
            _ => Err(WireError::Malformed),
        }
    }

    /// Writes the header into the first [`READ_V2_REQUEST_LEN`] octets of `buf`.
    pub fn emit(&self, buf: &mut [u8]) {
        write_u32(buf, field::SIZE, self.size);
        write_u32(buf, field::SRC_STAG, self.src_stag.to_u32());
        write_u64(buf, field::SRC_TO, self.src_to);
    }

    /// The V1 form the responder queues: the sink fields carry the read identifier `msn`
    /// and offset 0, which its Read V2 Responses echo.
    pub fn to_read_request(&self, msn: u32) -> ReadRequestRepr {
        ReadRequestRepr {
            sink_stag: STag::from_u32(msn),
            sink_to: 0,
            size: self.size,
            src_stag: self.src_stag,
            src_to: self.src_to,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn literal_octets() {
        let r = ReadV2RequestRepr {
            size: 0x0000_1000,
            src_stag: STag::from_u32(0x1122_3344),
            src_to: 0x0102_0304_0506_0708,
        };
        let mut b = [0u8; READ_V2_REQUEST_LEN];
        r.emit(&mut b);
        assert_eq!(
            b,
            [
                0, 0, 0x10, 0, 0x11, 0x22, 0x33, 0x44, 1, 2, 3, 4, 5, 6, 7, 8
            ]
        );
        assert_eq!(ReadV2RequestRepr::parse(&b), Ok(r));
        assert_eq!(
            ReadV2RequestRepr::parse(&b[..15]),
            Err(WireError::Truncated)
        );
        assert_eq!(
            ReadV2RequestRepr::parse(&[0; READ_V2_REQUEST_LEN + 1]),
            Err(WireError::Malformed)
        );
        let plan = r.to_read_request(7);
        assert_eq!((plan.sink_stag.to_u32(), plan.sink_to), (7, 0));
    }
}
