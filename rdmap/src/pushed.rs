//! A message framed by another writer of the stream: the push path that skips the daemon
//! (issue 33) writes a small Send or RDMA Write to the shared socket from the
//! application's thread, as one FPDU, with the same octets the connection's own stream
//! would have sent for it at that point of the stream.

use bytes::BytesMut;
use ddp::{STag, SegmentRepr, TaggedRepr, UntaggedRepr};
use mpa::Framer;

use crate::wire::{Opcode, RdmapControl};

/// A message that may be pushed: one FPDU, no local memory to check, nothing that
/// waits for the peer.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum PushedOp {
    /// A Send (with the Solicited Event flag or not): it takes the next MSN of queue 0.
    Send {
        /// Send with Solicited Event.
        solicited: bool,
    },
    /// An RDMA Write into `stag` at `to`.
    Write {
        /// The remote region.
        stag: STag,
        /// The tagged offset.
        to: u64,
    },
}

impl PushedOp {
    /// True for a Send (it takes an MSN).
    pub fn is_send(&self) -> bool {
        matches!(self, Self::Send { .. })
    }

    /// The longest payload that goes in one FPDU of `mulpdu` octets (its DDP header
    /// taken off): a longer message is not for pushing.
    pub fn max_payload(&self, mulpdu: u16) -> usize {
        let header = match self {
            Self::Send { .. } => ddp::UNTAGGED_HEADER_LEN,
            Self::Write { .. } => ddp::TAGGED_HEADER_LEN,
        };
        usize::from(mulpdu).saturating_sub(header)
    }
}

/// Frames `op` with `payload` as one FPDU at `framer`'s position into `dst`: a Send
/// carries MSN `send_msn` (the last one on the wire plus one). `None`, and nothing
/// written, when the ULPDU would exceed `mulpdu` (the message is then not for pushing);
/// otherwise the FPDU's octets.
pub fn frame_pushed(
    op: PushedOp,
    send_msn: u32,
    payload: &[u8],
    mulpdu: u16,
    framer: &mut Framer,
    dst: &mut BytesMut,
) -> Option<usize> {
    let header = match op {
        PushedOp::Send { solicited } => SegmentRepr::Untagged(UntaggedRepr {
            last: true,
            rsvd_ulp: RdmapControl::new(Opcode::send(false, solicited, false)).emit(),
            rsvd_ulp_ext: 0,
            qn: 0,
            msn: send_msn,
            mo: 0,
        }),
        PushedOp::Write { stag, to } => SegmentRepr::Tagged(TaggedRepr {
            last: true,
            rsvd_ulp: RdmapControl::new(Opcode::RdmaWrite).emit(),
            stag,
            to,
        }),
    };
    if payload.len() > op.max_payload(mulpdu) {
        return None;
    }
    let hlen = header.header_len();
    let mut hbuf = [0u8; ddp::UNTAGGED_HEADER_LEN];
    header.emit(&mut hbuf[..hlen]);
    let before = dst.len();
    framer.encode(&hbuf[..hlen], payload, dst);
    Some(dst.len() - before)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_send_is_laid_out_byte_for_byte() {
        let mut framer = Framer::new(false, true);
        let mut got = BytesMut::new();
        let op = PushedOp::Send { solicited: true };
        frame_pushed(op, 3, b"hi", 1448, &mut framer, &mut got).unwrap();
        #[rustfmt::skip]
        let head: &[u8] = &[
            0x00, 0x14,             // ULPDU length 20: DDP header 18, payload 2
            0x41, 0x45,             // untagged, last, DDP v1; RDMAP v1, Send with SE (5)
            0, 0, 0, 0,             // invalidate STag (none)
            0, 0, 0, 0,             // queue 0
            0, 0, 0, 3,             // MSN 3
            0, 0, 0, 0,             // MO 0
            b'h', b'i',
            0, 0,                   // PAD to a multiple of four
        ];
        assert_eq!(&got[..head.len()], head);
        assert_eq!(got.len(), head.len() + 4, "then the CRC");
        assert_eq!(
            got[head.len()..],
            mpa::crc32c(head).to_le_bytes(),
            "CRC32c over the FPDU"
        );
        assert_eq!(framer.position(), 28);
        assert_eq!(op.max_payload(1448), 1430);
        assert!(frame_pushed(op, 4, &[0; 1431], 1448, &mut framer, &mut got).is_none());
        assert_eq!(framer.position(), 28, "too long: nothing framed");
    }
}
