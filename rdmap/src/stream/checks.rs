//! The header checks every incoming DDP segment passes before anything else looks at it,
//! whether the driver reads it whole or straight into memory.

use ddp::{DdpError, SegmentRepr};
use mpa::Extensions;

use crate::term::TermCode;
use crate::wire::{Opcode, RDMAP_VERSION, RdmapControl};

/// The DDP and RDMAP header checks every incoming segment passes first, in order (RFC
/// 5041 §7.2, RFC 5040 §4.8): the segment, its payload and its opcode, or the Terminate
/// code and whether the Terminate copies the segment's header. An extension's opcode is
/// unexpected unless `extensions` (what both sides agreed) has it.
pub(super) fn check_segment(
    ulpdu: &[u8],
    extensions: Extensions,
) -> Result<(SegmentRepr, &[u8], Opcode), (TermCode, bool)> {
    let (seg, payload) =
        SegmentRepr::parse(ulpdu).map_err(|e| (TermCode::from_ddp(e), e != DdpError::Truncated))?;
    // DDP: the queue number must exist (untagged check 1).
    if let SegmentRepr::Untagged(u) = &seg
        && u.qn > 3
    {
        return Err((TermCode::from_ddp(DdpError::InvalidQn), true));
    }
    let ctrl = RdmapControl::parse(seg.rsvd_ulp());
    if ctrl.version != RDMAP_VERSION {
        return Err((TermCode::INVALID_RDMAP_VERSION, true));
    }
    let op = ctrl.opcode;
    let fits = match &seg {
        SegmentRepr::Tagged(_) => op.is_tagged(),
        SegmentRepr::Untagged(u) => !op.is_tagged() && op.queue() == Some(u.qn),
    };
    let agreed = !op.has_send_immediate() || extensions.contains(Extensions::SEND_IMMEDIATE);
    if !fits || !agreed {
        return Err((TermCode::UNEXPECTED_OPCODE, true));
    }
    Ok((seg, payload, op))
}
