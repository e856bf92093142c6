//! The MPA Request/Reply frame (RFC 5044 §7.1, RFC 6581 §6).
//!
//! ```text
//! offset size field
//! 0      16   Key   "MPA ID Req Frame" / "MPA ID Rep Frame"
//! 16     1    flags M=0x80 C=0x40 R=0x20 S=0x10 Res=0x0f (0x08: siw's large-FPDU bit;
//!             0x04, 0x02: this stack's extensions)
//! 17     1    Rev   1 (RFC 5044) or 2 (RFC 6581)
//! 18     2    PD_Length (big-endian), 0..=512
//! 20     n    Private Data (starts with the 4-octet enhanced block when S=1; then, in a
//!             Reply that sets an extension bit, the 8-octet extension block)
//! ```
//! The frame is not padded, carries no CRC and no markers.

use super::enhanced::{self, EnhancedRepr};
use super::extensions::{self, ExtensionBlock};
use crate::{Extensions, MAX_PRIVATE_DATA, MpaError};

/// Key of an MPA Request frame.
pub const KEY_REQUEST: [u8; 16] = *b"MPA ID Req Frame";
/// Key of an MPA Reply frame.
pub const KEY_REPLY: [u8; 16] = *b"MPA ID Rep Frame";
/// Length of the fixed part (key, flags, rev, PD_Length).
pub const HEADER_LEN: usize = 20;
/// M: the sender requires markers in the FPDUs it receives.
pub const FLAG_MARKERS: u8 = 0x80;
/// C: the sender asks for CRCs.
pub const FLAG_CRC: u8 = 0x40;
/// R: reject (Reply only).
pub const FLAG_REJECT: u8 = 0x20;
/// S (RFC 6581): the private data starts with the enhanced block.
pub const FLAG_ENHANCED: u8 = 0x10;
/// Reserved bits: sent as 0, never checked (siw uses 0x08 for an experiment).
pub const FLAG_RES: u8 = 0x0f;
/// Linux siw's experimental `MPA_RR_FLAG_GSO_EXP` (0x0800 of its big-endian flags word),
/// a reserved bit to RFC 5044: "my FPDUs may be larger than one TCP segment, and I take
/// such FPDUs from you". Used only when both frames carry it; a standard peer never sets
/// it and ignores it, so an offer costs nothing.
pub const FLAG_LARGE_FPDUS: u8 = 0x08;
/// This stack's Send with Immediate Data extension (a reserved bit to RFC 5044): offered in
/// a Request, agreed in a Reply (see [`Extensions`]).
pub const FLAG_SEND_IMMEDIATE: u8 = 0x04;
/// This stack's RDMA Read V2 extension (a reserved bit to RFC 5044).
pub const FLAG_READ_V2: u8 = 0x02;
/// The flag bit of each extension.
const EXTENSION_FLAGS: [(Extensions, u8); 2] = [
    (Extensions::SEND_IMMEDIATE, FLAG_SEND_IMMEDIATE),
    (Extensions::READ_V2, FLAG_READ_V2),
];
/// Lowest revision accepted (Rev 0, pre-IETF RDMAC, is rejected).
pub const REV_MIN: u8 = 1;
/// Highest revision understood (RFC 6581).
pub const REV_MAX: u8 = 2;

mod field {
    use crate::wire::Field;
    pub(crate) const KEY: Field = 0..16;
    pub(crate) const FLAGS: usize = 16;
    pub(crate) const REV: usize = 17;
    pub(crate) const PD_LENGTH: Field = 18..20;
    pub(crate) const PRIVATE_DATA: usize = 20;
}

/// Request or Reply, told apart by the key.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum FrameKind {
    /// "MPA ID Req Frame", sent by the Initiator.
    Request,
    /// "MPA ID Rep Frame", sent by the Responder.
    Reply,
}

impl FrameKind {
    /// The 16-octet key of this kind.
    pub const fn key(self) -> &'static [u8; 16] {
        match self {
            Self::Request => &KEY_REQUEST,
            Self::Reply => &KEY_REPLY,
        }
    }
}

/// A view over a Request/Reply frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// Wraps a buffer without checking its length.
    pub const fn new_unchecked(buffer: T) -> Self {
        Self { buffer }
    }

    /// Wraps a buffer and checks its length ([`check_len`](Self::check_len)).
    pub fn new_checked(buffer: T) -> Result<Self, MpaError> {
        let packet = Self::new_unchecked(buffer);
        packet.check_len()?;
        Ok(packet)
    }

    /// Fails unless the buffer holds the 20-octet header and PD_Length octets after it.
    pub fn check_len(&self) -> Result<(), MpaError> {
        let len = self.buffer.as_ref().len();
        if len < HEADER_LEN {
            Err(MpaError::InvalidFrame("frame shorter than 20 octets"))
        } else if len < HEADER_LEN + usize::from(self.pd_length()) {
            Err(MpaError::InvalidFrame("frame shorter than PD_Length"))
        } else {
            Ok(())
        }
    }

    /// Validates the fixed 20-octet header alone (a buffer of 20 octets is enough): key,
    /// revision in `1..=2`, PD_Length at most 512, and PD_Length at least 4 when a Rev 2
    /// frame has S=1. Reserved bits are ignored. Returns the kind of frame.
    pub fn check_header(&self) -> Result<FrameKind, MpaError> {
        if self.buffer.as_ref().len() < HEADER_LEN {
            return Err(MpaError::InvalidFrame("frame shorter than 20 octets"));
        }
        let kind = self.kind().ok_or(MpaError::InvalidFrame("unknown key"))?;
        match self.rev() {
            0 => return Err(MpaError::InvalidFrame("revision 0 (RDMAC) not supported")),
            r if r > REV_MAX => return Err(MpaError::InvalidFrame("unsupported revision")),
            _ => {}
        }
        if usize::from(self.pd_length()) > MAX_PRIVATE_DATA {
            return Err(MpaError::InvalidFrame("PD_Length above 512"));
        }
        if self.has_enhanced_block() && usize::from(self.pd_length()) < enhanced::LEN {
            return Err(MpaError::InvalidFrame("S=1 with PD_Length below 4"));
        }
        Ok(kind)
    }

    /// Returns the wrapped buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// The 16-octet key.
    pub fn key(&self) -> &[u8] {
        &self.buffer.as_ref()[field::KEY]
    }

    /// The kind of frame, or `None` for an unknown key.
    pub fn kind(&self) -> Option<FrameKind> {
        match self.key() {
            k if k == KEY_REQUEST => Some(FrameKind::Request),
            k if k == KEY_REPLY => Some(FrameKind::Reply),
            _ => None,
        }
    }

    /// The raw flags octet.
    pub fn flags(&self) -> u8 {
        self.buffer.as_ref()[field::FLAGS]
    }

    /// M bit.
    pub fn markers(&self) -> bool {
        self.flags() & FLAG_MARKERS != 0
    }

    /// C bit.
    pub fn crc(&self) -> bool {
        self.flags() & FLAG_CRC != 0
    }

    /// R bit.
    pub fn reject(&self) -> bool {
        self.flags() & FLAG_REJECT != 0
    }

    /// S bit (RFC 6581). Only meaningful in a Rev 2 frame; see
    /// [`has_enhanced_block`](Self::has_enhanced_block).
    pub fn enhanced(&self) -> bool {
        self.flags() & FLAG_ENHANCED != 0
    }

    /// True when the private data starts with the enhanced block: Rev 2 and S=1. In a Rev 1
    /// frame the S position is a reserved bit and is ignored.
    pub fn has_enhanced_block(&self) -> bool {
        self.rev() >= 2 && self.enhanced()
    }

    /// siw's large-FPDU bit ([`FLAG_LARGE_FPDUS`], one of the reserved bits).
    pub fn large_fpdus(&self) -> bool {
        self.flags() & FLAG_LARGE_FPDUS != 0
    }

    /// The extension bits of the flags octet ([`FLAG_SEND_IMMEDIATE`], [`FLAG_READ_V2`]).
    pub fn extension_flags(&self) -> Extensions {
        EXTENSION_FLAGS
            .iter()
            .filter(|(_, bit)| self.flags() & bit != 0)
            .fold(Extensions::NONE, |set, (e, _)| set | *e)
    }

    /// The reserved bits (0x0f of the flags octet).
    pub fn res(&self) -> u8 {
        self.flags() & FLAG_RES
    }

    /// Rev.
    pub fn rev(&self) -> u8 {
        self.buffer.as_ref()[field::REV]
    }

    /// PD_Length.
    pub fn pd_length(&self) -> u16 {
        let d = &self.buffer.as_ref()[field::PD_LENGTH];
        u16::from_be_bytes([d[0], d[1]])
    }
}

impl<'a, T: AsRef<[u8]> + ?Sized> Packet<&'a T> {
    /// The Private Data (PD_Length octets, enhanced block included).
    pub fn private_data(&self) -> &'a [u8] {
        let start = field::PRIVATE_DATA;
        &self.buffer.as_ref()[start..start + usize::from(self.pd_length())]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Writes the key of `kind`.
    pub fn set_kind(&mut self, kind: FrameKind) {
        self.buffer.as_mut()[field::KEY].copy_from_slice(kind.key());
    }

    /// Sets the raw flags octet.
    pub fn set_flags(&mut self, flags: u8) {
        self.buffer.as_mut()[field::FLAGS] = flags;
    }

    fn set_flag(&mut self, bit: u8, on: bool) {
        let flags = self.flags();
        self.set_flags(if on { flags | bit } else { flags & !bit });
    }

    /// Sets M.
    pub fn set_markers(&mut self, on: bool) {
        self.set_flag(FLAG_MARKERS, on);
    }

    /// Sets C.
    pub fn set_crc(&mut self, on: bool) {
        self.set_flag(FLAG_CRC, on);
    }

    /// Sets R.
    pub fn set_reject(&mut self, on: bool) {
        self.set_flag(FLAG_REJECT, on);
    }

    /// Sets S.
    pub fn set_enhanced(&mut self, on: bool) {
        self.set_flag(FLAG_ENHANCED, on);
    }

    /// Sets siw's large-FPDU bit.
    pub fn set_large_fpdus(&mut self, on: bool) {
        self.set_flag(FLAG_LARGE_FPDUS, on);
    }

    /// Sets the extension bits of the flags octet to `set`.
    pub fn set_extension_flags(&mut self, set: Extensions) {
        for (e, bit) in EXTENSION_FLAGS {
            self.set_flag(bit, set.contains(e));
        }
    }

    /// Sets the reserved bits (masked to 0x0f).
    pub fn set_res(&mut self, res: u8) {
        let flags = self.flags();
        self.set_flags((flags & !FLAG_RES) | (res & FLAG_RES));
    }

    /// Sets Rev.
    pub fn set_rev(&mut self, rev: u8) {
        self.buffer.as_mut()[field::REV] = rev;
    }

    /// Sets PD_Length.
    pub fn set_pd_length(&mut self, len: u16) {
        self.buffer.as_mut()[field::PD_LENGTH].copy_from_slice(&len.to_be_bytes());
    }

    /// The Private Data area (PD_Length octets), for writing.
    pub fn private_data_mut(&mut self) -> &mut [u8] {
        let start = field::PRIVATE_DATA;
        let end = start + usize::from(self.pd_length());
        &mut self.buffer.as_mut()[start..end]
    }
}

/// A parsed Request/Reply frame.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct FrameRepr<'a> {
    /// Request or Reply.
    pub kind: FrameKind,
    /// M bit.
    pub markers: bool,
    /// C bit.
    pub crc: bool,
    /// R bit (meaningful in a Reply only).
    pub reject: bool,
    /// siw's large-FPDU bit ([`FLAG_LARGE_FPDUS`]).
    pub large_fpdus: bool,
    /// Rev (1 or 2).
    pub rev: u8,
    /// The enhanced block; `Some` exactly when the frame is Rev 2 with S=1.
    pub enhanced: Option<EnhancedRepr>,
    /// This stack's extensions: offered (Request) or agreed (Reply: both the flag bits and
    /// the extension block say so). See [`Extensions`].
    pub extensions: Extensions,
    /// The ULP private data, after the enhanced block (and a Reply's extension block).
    pub private_data: &'a [u8],
}

impl<'a> FrameRepr<'a> {
    /// Parses a frame: [`Packet::check_len`] plus [`Packet::check_header`].
    pub fn parse<T: AsRef<[u8]> + ?Sized>(packet: &Packet<&'a T>) -> Result<Self, MpaError> {
        packet.check_len()?;
        let kind = packet.check_header()?;
        let pd = packet.private_data();
        let (enhanced, private_data) = if packet.has_enhanced_block() {
            let (block, rest) = pd.split_at(enhanced::LEN);
            (
                Some(EnhancedRepr::parse(&enhanced::Packet::new_unchecked(
                    block,
                ))?),
                rest,
            )
        } else {
            (None, pd)
        };
        let flagged = packet.extension_flags();
        let (extensions, private_data) = match kind {
            FrameKind::Request => (flagged, private_data),
            FrameKind::Reply if flagged.is_empty() => (flagged, private_data),
            // Bits without our block: someone else's experiment; nothing is agreed.
            FrameKind::Reply => match ExtensionBlock::parse(private_data) {
                Some(block) => (block.agreed & flagged, &private_data[extensions::LEN..]),
                None => (Extensions::NONE, private_data),
            },
        };
        Ok(Self {
            kind,
            markers: packet.markers(),
            crc: packet.crc(),
            reject: packet.reject(),
            large_fpdus: packet.large_fpdus(),
            rev: packet.rev(),
            enhanced,
            extensions,
            private_data,
        })
    }

    /// True when the frame carries the extension block (an agreeing Reply).
    fn has_extension_block(&self) -> bool {
        self.kind == FrameKind::Reply && !self.extensions.is_empty()
    }

    /// PD_Length: the private data plus the enhanced and extension blocks, if any.
    pub fn pd_length(&self) -> usize {
        let enhanced = if self.enhanced.is_some() {
            enhanced::LEN
        } else {
            0
        };
        let extension = if self.has_extension_block() {
            extensions::LEN
        } else {
            0
        };
        self.private_data.len() + enhanced + extension
    }

    /// Octets of the whole frame.
    pub fn buffer_len(&self) -> usize {
        HEADER_LEN + self.pd_length()
    }

    /// Writes the frame into the first [`buffer_len`](Self::buffer_len) octets. The S bit is
    /// set exactly when `enhanced` is `Some`; reserved bits are written as 0 but for
    /// [`FLAG_LARGE_FPDUS`] when `large_fpdus` and the bits of `extensions` (with the
    /// extension block after the enhanced block in a Reply). The caller
    /// keeps [`pd_length`](Self::pd_length) within 512 (the handshake checks it).
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Packet<T>) {
        debug_assert!(self.pd_length() <= MAX_PRIVATE_DATA);
        packet.set_kind(self.kind);
        packet.set_flags(0);
        packet.set_markers(self.markers);
        packet.set_crc(self.crc);
        packet.set_reject(self.reject);
        packet.set_enhanced(self.enhanced.is_some());
        packet.set_large_fpdus(self.large_fpdus);
        packet.set_extension_flags(self.extensions);
        packet.set_rev(self.rev);
        packet.set_pd_length(self.pd_length() as u16);
        let pd = packet.private_data_mut();
        let rest = match &self.enhanced {
            Some(block) => {
                let (head, rest) = pd.split_at_mut(enhanced::LEN);
                block.emit(&mut enhanced::Packet::new_unchecked(head));
                rest
            }
            None => pd,
        };
        let rest = if self.has_extension_block() {
            let (head, rest) = rest.split_at_mut(extensions::LEN);
            let block = ExtensionBlock {
                version: extensions::VERSION,
                agreed: self.extensions,
            };
            head.copy_from_slice(&block.emit());
            rest
        } else {
            rest
        };
        rest.copy_from_slice(self.private_data);
    }
}

#[cfg(test)]
mod tests;
