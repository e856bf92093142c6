//! The Terminate header (RFC 5040 §4.8; wire-format.md §4.2).
//!
//! It follows the 18-octet untagged DDP header (QN 2, MSN 1, MO 0, L=1):
//!
//! | off | size | field |
//! |---|---|---|
//! | 0 | 1 | `Layer << 4 \| EType` |
//! | 1 | 1 | Error Code |
//! | 2 | 1 | HdrCt: M=0x80 (DDP Segment Length valid), D=0x40 (DDP header included), R=0x20 (RDMA header included); 5 reserved bits |
//! | 3 | 1 | Reserved |
//! | 4 | 2 | DDP Segment Length, present iff M or D |
//! | 6 | 14 or 18 | Terminated DDP Header, present iff D; 14 octets if its own T bit is set |
//! | +0 | 28 | Terminated RDMA Header (a Read Request header), present iff R |
//!
//! Parsing follows the note of wire-format.md §4.2: read HdrCt, then the copied DDP
//! control octet to choose 14 or 18, then R. Zero octets after the header are tolerated
//! (some senders keep zero-filled space for omitted headers).

use core::fmt;

use ddp::{TAGGED_HEADER_LEN, UNTAGGED_HEADER_LEN};

use super::{Opcode, READ_REQUEST_LEN, RdmapControl, WireError};
use crate::term::TermCode;

/// Length of the Terminate Control word (layer/etype, code, HdrCt, reserved).
pub const TERMINATE_CONTROL_LEN: usize = 4;
/// The longest Terminate header: 4 + 2 + 18 + 28 = 52 octets.
pub const TERMINATE_MAX_LEN: usize =
    TERMINATE_CONTROL_LEN + SEG_LEN_LEN + UNTAGGED_HEADER_LEN + READ_REQUEST_LEN;

const SEG_LEN_LEN: usize = 2;
/// DDP control octet T bit (tagged).
const DDP_T: u8 = 0x80;

mod field {
    use crate::wire::Field;

    pub(super) const CONTROL: Field = 0..2;
    pub(super) const HDRCT: usize = 2;
    pub(super) const RESERVED: usize = 3;
    pub(super) const SEG_LEN: Field = 4..6;
    pub(super) const DDP_HEADER: usize = 6;

    pub(super) const FLAG_M: u8 = 0x80;
    pub(super) const FLAG_D: u8 = 0x40;
    pub(super) const FLAG_R: u8 = 0x20;
}

/// Where the optional parts of a Terminate header sit, derived from its flags.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Layout {
    /// Offset of the copied RDMA header, if R is set.
    rdma_at: Option<usize>,
    /// One past the last octet of the header.
    end: usize,
}

/// A view of a buffer as a Terminate header (the Terminate message's RDMAP payload).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TerminatePacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> TerminatePacket<T> {
    /// Wraps a buffer without checking it (for emitting).
    pub const fn new_unchecked(buffer: T) -> Self {
        Self { buffer }
    }

    /// Wraps a buffer and checks that it holds every part its flags announce.
    /// Use this for peer input.
    pub fn new_checked(buffer: T) -> Result<Self, WireError> {
        let packet = Self::new_unchecked(buffer);
        packet.check_len()?;
        Ok(packet)
    }

    /// Checks that the buffer holds the control word and every optional part that M, D,
    /// R and the copied DDP header's T bit announce. After this no getter can panic.
    pub fn check_len(&self) -> Result<(), WireError> {
        self.layout().map(|_| ())
    }

    /// Consumes the view and returns the buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// The Terminate code (octets 0 and 1).
    pub fn code(&self) -> TermCode {
        let b = self.buffer.as_ref();
        TermCode::from_wire([b[field::CONTROL.start], b[field::CONTROL.start + 1]])
    }

    /// M: the DDP Segment Length field is valid.
    pub fn m(&self) -> bool {
        self.hdrct() & field::FLAG_M != 0
    }

    /// D: the offending DDP header is included.
    pub fn d(&self) -> bool {
        self.hdrct() & field::FLAG_D != 0
    }

    /// R: the offending RDMA (Read Request) header is included.
    pub fn r(&self) -> bool {
        self.hdrct() & field::FLAG_R != 0
    }

    /// The raw DDP Segment Length field, `None` unless M or D is set (then the field is
    /// present; its value is meaningful only with M).
    pub fn ddp_seg_len(&self) -> Option<u16> {
        if !(self.m() || self.d()) {
            return None;
        }
        let b = self.buffer.as_ref().get(field::SEG_LEN)?;
        Some(u16::from_be_bytes([*b.first()?, *b.get(1)?]))
    }

    /// The copied DDP header (14 or 18 octets by its own T bit), `None` unless D is set.
    pub fn ddp_header(&self) -> Option<&[u8]> {
        if !self.d() {
            return None;
        }
        let b = self.buffer.as_ref();
        let len = copied_ddp_len(*b.get(field::DDP_HEADER)?);
        b.get(field::DDP_HEADER..field::DDP_HEADER + len)
    }

    /// The copied RDMA header (28 octets), `None` unless R is set.
    pub fn rdma_header(&self) -> Option<&[u8]> {
        let at = self.layout().ok()?.rdma_at?;
        self.buffer.as_ref().get(at..at + READ_REQUEST_LEN)
    }

    /// The length of the header as its flags describe it (the octets after it are padding
    /// or garbage). Fails like [`check_len`](Self::check_len).
    pub fn header_len(&self) -> Result<usize, WireError> {
        self.layout().map(|l| l.end)
    }

    fn hdrct(&self) -> u8 {
        self.buffer.as_ref()[field::HDRCT]
    }

    fn layout(&self) -> Result<Layout, WireError> {
        let b = self.buffer.as_ref();
        if b.len() < TERMINATE_CONTROL_LEN {
            return Err(WireError::Truncated);
        }
        let hdrct = b[field::HDRCT];
        let (m, d, r) = (
            hdrct & field::FLAG_M != 0,
            hdrct & field::FLAG_D != 0,
            hdrct & field::FLAG_R != 0,
        );
        let mut end = TERMINATE_CONTROL_LEN;
        if m || d {
            end += SEG_LEN_LEN;
        }
        if d {
            let ctrl = *b.get(field::DDP_HEADER).ok_or(WireError::Truncated)?;
            end += copied_ddp_len(ctrl);
        }
        let rdma_at = r.then_some(end);
        if r {
            end += READ_REQUEST_LEN;
        }
        if b.len() < end {
            return Err(WireError::Truncated);
        }
        Ok(Layout { rdma_at, end })
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> TerminatePacket<T> {
    /// Sets octets 0 and 1.
    pub fn set_code(&mut self, code: TermCode) {
        self.buffer.as_mut()[field::CONTROL].copy_from_slice(&code.to_wire());
    }

    /// Sets the HdrCt bits and clears the 5 reserved bits and the reserved octet 3.
    pub fn set_flags(&mut self, m: bool, d: bool, r: bool) {
        let mut hdrct = 0;
        if m {
            hdrct |= field::FLAG_M;
        }
        if d {
            hdrct |= field::FLAG_D;
        }
        if r {
            hdrct |= field::FLAG_R;
        }
        let b = self.buffer.as_mut();
        b[field::HDRCT] = hdrct;
        b[field::RESERVED] = 0;
    }

    /// Sets the DDP Segment Length field (octets 4–5). Call after setting M or D.
    pub fn set_ddp_seg_len(&mut self, value: u16) {
        self.buffer.as_mut()[field::SEG_LEN].copy_from_slice(&value.to_be_bytes());
    }

    /// Copies a DDP header (14 or 18 octets, matching its own T bit) to octet 6.
    /// Call after [`set_flags`](Self::set_flags) with D.
    pub fn set_ddp_header(&mut self, header: &[u8]) {
        let at = field::DDP_HEADER;
        self.buffer.as_mut()[at..at + header.len()].copy_from_slice(header);
    }

    /// Copies the RDMA header after the optional fields. Call after the flags and the DDP
    /// header are set, since they decide where it goes.
    pub fn set_rdma_header(&mut self, header: &[u8; READ_REQUEST_LEN]) {
        let b = self.buffer.as_ref();
        let hdrct = b[field::HDRCT];
        let mut at = TERMINATE_CONTROL_LEN;
        if hdrct & (field::FLAG_M | field::FLAG_D) != 0 {
            at += SEG_LEN_LEN;
        }
        if hdrct & field::FLAG_D != 0 {
            at += copied_ddp_len(b[field::DDP_HEADER]);
        }
        self.buffer.as_mut()[at..at + READ_REQUEST_LEN].copy_from_slice(header);
    }
}

/// A copy of the offending segment's DDP header: 14 octets if its T bit is set, else 18.
#[derive(Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct CopiedDdpHeader {
    /// The header, zero beyond `len`.
    bytes: [u8; UNTAGGED_HEADER_LEN],
    len: u8,
}

impl CopiedDdpHeader {
    /// Copies the DDP header at the start of an MPA ULPDU: 14 octets if the T bit of its
    /// first octet is set, else 18. `None` if the ULPDU is shorter than that.
    pub fn from_ulpdu(ulpdu: &[u8]) -> Option<Self> {
        let len = copied_ddp_len(*ulpdu.first()?);
        let src = ulpdu.get(..len)?;
        let mut bytes = [0u8; UNTAGGED_HEADER_LEN];
        bytes.get_mut(..len)?.copy_from_slice(src);
        Some(Self {
            bytes,
            len: u8::try_from(len).ok()?,
        })
    }

    /// An all-zero 18-octet header, for errors detected while building a message
    /// (RFC 5040 §7.1 rule 1: the copied headers are "set to zero").
    pub const fn zeroed() -> Self {
        Self {
            bytes: [0; UNTAGGED_HEADER_LEN],
            len: UNTAGGED_HEADER_LEN as u8,
        }
    }

    /// The copied octets (14 or 18).
    pub fn as_bytes(&self) -> &[u8] {
        self.bytes
            .get(..usize::from(self.len))
            .unwrap_or(&self.bytes)
    }

    /// Whether the copied header is tagged (T bit set, 14 octets).
    pub fn is_tagged(&self) -> bool {
        self.bytes[0] & DDP_T != 0
    }

    /// The RDMAP control octet inside the copied header (DDP octet 1).
    pub fn rdmap_control(&self) -> RdmapControl {
        RdmapControl::parse(self.bytes[1])
    }

    /// The number of copied octets, 14 or 18.
    pub fn len(&self) -> usize {
        usize::from(self.len)
    }

    /// Always false: a copied header has 14 or 18 octets (present for clippy's
    /// `len_without_is_empty`).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl fmt::Debug for CopiedDdpHeader {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("CopiedDdpHeader(")?;
        for (i, b) in self.as_bytes().iter().enumerate() {
            if i > 0 {
                f.write_str(" ")?;
            }
            write!(f, "{b:02x}")?;
        }
        f.write_str(")")
    }
}

/// A parsed Terminate header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct TerminateRepr {
    /// The error.
    pub code: TermCode,
    /// DDP Segment Length; `Some` means M=1 (the field is valid). Diagnostic only: RFC
    /// says "length handed up by DDP"; siw sends the payload length, we send the ULPDU
    /// length.
    pub ddp_seg_len: Option<u16>,
    /// The offending segment's DDP header; `Some` means D=1 (the length field is then
    /// present too, written as 0 when `ddp_seg_len` is `None`).
    pub ddp_header: Option<CopiedDdpHeader>,
    /// The offending Read Request header; `Some` means R=1.
    pub rdma_header: Option<[u8; READ_REQUEST_LEN]>,
}

impl TerminateRepr {
    /// A Terminate with no copied headers (M=D=R=0): 4 octets, as for LLP and RDMAP Local
    /// Catastrophic errors.
    pub const fn new(code: TermCode) -> Self {
        Self {
            code,
            ddp_seg_len: None,
            ddp_header: None,
            rdma_header: None,
        }
    }

    /// The Terminate for an error in the received segment `ulpdu` (the MPA ULPDU, DDP
    /// header first), following RFC 5040 Fig. 10 through
    /// [`TermCode::copies_ddp_header`] and [`TermCode::copies_rdma_header`]:
    /// * the DDP header is copied when the code calls for it and the ULPDU holds it; M is
    ///   then set with the ULPDU length (the full DDP segment length);
    /// * the 28-octet RDMA header is copied when the code calls for it, the segment is an
    ///   untagged Read Request and the ULPDU holds the header.
    ///
    /// If a Read Response was partly sent, replace `rdma_header` with
    /// [`ReadRequestRepr::advanced`](super::ReadRequestRepr::advanced).
    pub fn for_segment(code: TermCode, ulpdu: &[u8]) -> Self {
        let mut t = Self::new(code);
        if !code.copies_ddp_header() {
            return t;
        }
        let Some(hdr) = CopiedDdpHeader::from_ulpdu(ulpdu) else {
            return t;
        };
        t.ddp_seg_len = u16::try_from(ulpdu.len()).ok();
        t.ddp_header = Some(hdr);
        if code.copies_rdma_header()
            && !hdr.is_tagged()
            && hdr.rdmap_control().opcode == Opcode::ReadRequest
        {
            t.rdma_header = ulpdu
                .get(UNTAGGED_HEADER_LEN..UNTAGGED_HEADER_LEN + READ_REQUEST_LEN)
                .and_then(|s| <[u8; READ_REQUEST_LEN]>::try_from(s).ok());
        }
        t
    }

    /// Parses a Terminate header. `buf` is the RDMAP payload of the Terminate message
    /// (the ULPDU after its 18-octet DDP header). Octets after the header must be zero.
    /// Never panics.
    pub fn parse(buf: &[u8]) -> Result<Self, WireError> {
        let packet = TerminatePacket::new_checked(buf)?;
        let end = packet.header_len()?;
        if buf
            .get(end..)
            .is_some_and(|rest| rest.iter().any(|&b| b != 0))
        {
            return Err(WireError::Malformed);
        }
        Self::parse_packet(&packet)
    }

    /// Parses a packet view (smoltcp style); octets after the header are not examined.
    pub fn parse_packet<T: AsRef<[u8]>>(packet: &TerminatePacket<T>) -> Result<Self, WireError> {
        packet.check_len()?;
        let ddp_header = match packet.ddp_header() {
            Some(h) => Some(CopiedDdpHeader::from_ulpdu(h).ok_or(WireError::Truncated)?),
            None => None,
        };
        let rdma_header = match packet.rdma_header() {
            Some(h) => {
                Some(<[u8; READ_REQUEST_LEN]>::try_from(h).map_err(|_| WireError::Truncated)?)
            }
            None => None,
        };
        Ok(Self {
            code: packet.code(),
            ddp_seg_len: if packet.m() {
                packet.ddp_seg_len()
            } else {
                None
            },
            ddp_header,
            rdma_header,
        })
    }

    /// The header length: 4, plus 2 if M or D, plus 14/18 if D, plus 28 if R.
    pub fn buffer_len(&self) -> usize {
        let mut len = TERMINATE_CONTROL_LEN;
        if self.ddp_seg_len.is_some() || self.ddp_header.is_some() {
            len += SEG_LEN_LEN;
        }
        if let Some(h) = &self.ddp_header {
            len += h.len();
        }
        if self.rdma_header.is_some() {
            len += READ_REQUEST_LEN;
        }
        len
    }

    /// Writes the header into the first [`buffer_len`](Self::buffer_len) octets of `buf`.
    ///
    /// # Panics
    /// If `buf` is shorter than [`buffer_len`](Self::buffer_len).
    pub fn emit(&self, buf: &mut [u8]) {
        self.emit_packet(&mut TerminatePacket::new_unchecked(buf));
    }

    /// Writes the header through a packet view (smoltcp style).
    ///
    /// # Panics
    /// If the view's buffer is shorter than [`buffer_len`](Self::buffer_len).
    pub fn emit_packet<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut TerminatePacket<T>) {
        let m = self.ddp_seg_len.is_some();
        let d = self.ddp_header.is_some();
        packet.set_code(self.code);
        packet.set_flags(m, d, self.rdma_header.is_some());
        if m || d {
            packet.set_ddp_seg_len(self.ddp_seg_len.unwrap_or(0));
        }
        if let Some(h) = &self.ddp_header {
            packet.set_ddp_header(h.as_bytes());
        }
        if let Some(h) = &self.rdma_header {
            packet.set_rdma_header(h);
        }
    }
}

impl fmt::Display for TerminateRepr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Terminate {}", self.code)?;
        if let Some(len) = self.ddp_seg_len {
            write!(f, " seg_len={len}")?;
        }
        if let Some(h) = &self.ddp_header {
            write!(f, " ddp_hdr={}", h.len())?;
        }
        if self.rdma_header.is_some() {
            f.write_str(" rdma_hdr")?;
        }
        Ok(())
    }
}

/// The length of a copied DDP header whose control octet is `ctrl`.
fn copied_ddp_len(ctrl: u8) -> usize {
    if ctrl & DDP_T != 0 {
        TAGGED_HEADER_LEN
    } else {
        UNTAGGED_HEADER_LEN
    }
}

#[cfg(test)]
mod tests;
