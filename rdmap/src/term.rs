//! Terminate codes: the Layer / Error Type / Error Code triple of the Terminate Control
//! field (RFC 5040 §4.8, RFC 5041 §7.2, RFC 5044 §8, RFC 6581 §8; IANA registries in
//! RFC 6580; wire-format.md §1.9, §3.6, §4.3).
//!
//! Every code this stack sends or names lives in one table (the `term_codes!` invocation
//! below, in the style of quinn's `errors!`), which generates the named constants and their
//! descriptions. Codes received from a peer that are not in the table are still
//! representable and get a generic description.

use core::fmt;

use ddp::DdpError;

/// The layer that detected a Terminate-worthy error (high nibble of Terminate octet 0).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum Layer {
    /// 0: RDMAP.
    Rdmap,
    /// 1: DDP.
    Ddp,
    /// 2: the lower layer protocol, i.e. MPA over TCP.
    Llp,
    /// Any other 4-bit value.
    Unknown(u8),
}

impl Layer {
    /// Decodes a 4-bit layer value (higher bits are ignored). Never fails.
    pub const fn from_bits(bits: u8) -> Self {
        match bits & 0x0F {
            0 => Self::Rdmap,
            1 => Self::Ddp,
            2 => Self::Llp,
            other => Self::Unknown(other),
        }
    }

    /// The 4-bit wire value (an out-of-range `Unknown` is truncated to 4 bits).
    pub const fn bits(self) -> u8 {
        match self {
            Self::Rdmap => 0,
            Self::Ddp => 1,
            Self::Llp => 2,
            Self::Unknown(v) => v & 0x0F,
        }
    }

    const fn name(self) -> &'static str {
        match self {
            Self::Rdmap => "RDMAP",
            Self::Ddp => "DDP",
            Self::Llp => "LLP",
            Self::Unknown(_) => "unknown layer",
        }
    }
}

impl From<u8> for Layer {
    /// Total conversion from the 4-bit layer nibble; higher bits are ignored.
    fn from(value: u8) -> Self {
        Self::from_bits(value)
    }
}

impl From<Layer> for u8 {
    fn from(value: Layer) -> Self {
        value.bits()
    }
}

/// A Terminate code: Layer (4 bits), Error Type (4 bits) and Error Code (8 bits).
///
/// Values are canonical: the layer and error type are kept to 4 bits, so equal wire octets
/// mean equal codes. Named constants cover every code in RFC 5040/5041/5044/6581.
#[derive(Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct TermCode {
    layer: Layer,
    etype: u8,
    code: u8,
}

impl TermCode {
    /// Builds a code. `layer` and `etype` are truncated to their 4 wire bits.
    pub const fn new(layer: Layer, etype: u8, code: u8) -> Self {
        Self {
            layer: Layer::from_bits(layer.bits()),
            etype: etype & 0x0F,
            code,
        }
    }

    /// The DDP-layer (Layer 1) code of a DDP error.
    pub fn from_ddp(e: DdpError) -> Self {
        Self::new(Layer::Ddp, e.etype(), e.code())
    }

    /// An LLP-layer (Layer 2, Error Type 0 = MPA) code, e.g. `llp(2)` for a CRC error.
    pub const fn llp(mpa_code: u8) -> Self {
        Self::new(Layer::Llp, 0, mpa_code)
    }

    /// Decodes Terminate Control octets 0 and 1 (`layer << 4 | etype`, `code`).
    pub const fn from_wire(b: [u8; 2]) -> Self {
        Self::new(Layer::from_bits(b[0] >> 4), b[0] & 0x0F, b[1])
    }

    /// Encodes Terminate Control octets 0 and 1: `[layer << 4 | etype, code]`.
    pub const fn to_wire(self) -> [u8; 2] {
        [(self.layer.bits() << 4) | self.etype, self.code]
    }

    /// The layer that detected the error.
    pub fn layer(self) -> Layer {
        self.layer
    }

    /// The 4-bit Error Type, whose meaning depends on the layer.
    pub fn etype(self) -> u8 {
        self.etype
    }

    /// The 8-bit Error Code, whose meaning depends on layer and type.
    pub fn code(self) -> u8 {
        self.code
    }

    /// The named constant for this code, if it is in the table (e.g. `"MPA_CRC"`).
    pub fn name(self) -> Option<&'static str> {
        lookup(self).map(|row| row.name)
    }

    /// A human-readable description, e.g. `"DDP tagged: invalid STag"`. Codes outside
    /// the table get a generic text naming what is known (layer, error type).
    pub fn description(self) -> &'static str {
        match lookup(self) {
            Some(row) => row.description,
            None => generic_description(self),
        }
    }

    /// Whether a Terminate for this code carries the DDP Segment Length and the copied DDP
    /// header of the offending segment (M and D bits), per RFC 5040 Fig. 10: yes for
    /// RDMAP Remote Protection and Remote Operation errors ("if possible") and for every
    /// DDP error; no for RDMAP Local Catastrophic, LLP and unknown codes.
    pub fn copies_ddp_header(self) -> bool {
        matches!(
            (self.layer, self.etype),
            (Layer::Rdmap, 1 | 2) | (Layer::Ddp, _)
        )
    }

    /// Whether a Terminate for this code carries the copied RDMA header (R bit), per
    /// RFC 5040 Fig. 10: only RDMAP Remote Protection errors, and then only when the
    /// offending message is a Read Request (the only message with such a header); the
    /// caller checks the message type.
    pub fn copies_rdma_header(self) -> bool {
        matches!((self.layer, self.etype), (Layer::Rdmap, 1))
    }
}

impl From<DdpError> for TermCode {
    fn from(e: DdpError) -> Self {
        Self::from_ddp(e)
    }
}

impl fmt::Debug for TermCode {
    /// `TermCode(DDP/untagged/0x02: invalid MSN - no buffer available)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("TermCode(")?;
        match self.layer {
            Layer::Unknown(v) => write!(f, "layer {v:#x}")?,
            known => f.write_str(known.name())?,
        }
        match etype_name(self.layer, self.etype) {
            Some(name) => write!(f, "/{name}")?,
            None => write!(f, "/etype {:#x}", self.etype)?,
        }
        let text = lookup(*self).map_or("unknown code", |row| row.short);
        write!(f, "/{:#04x}: {text})", self.code)
    }
}

impl fmt::Display for TermCode {
    /// `DDP untagged: invalid MSN - no buffer available [12 02]`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let [a, b] = self.to_wire();
        write!(f, "{} [{a:02x} {b:02x}]", self.description())
    }
}

/// One row of the code table.
#[derive(Debug)]
struct Row {
    code: TermCode,
    name: &'static str,
    short: &'static str,
    description: &'static str,
}

/// Generates the named constants, `TermCode::ALL` and the lookup table. Each group has
/// the prefix of its descriptions; each row is `NAME = (Layer, etype, code) "short text";`.
macro_rules! term_codes {
    ($(
        $prefix:literal {
            $( $(#[$doc:meta])* $name:ident = ($layer:ident, $etype:literal, $code:literal) $short:literal; )*
        }
    )*) => {
        impl TermCode {
            $($(
                $(#[$doc])*
                pub const $name: Self = Self::new(Layer::$layer, $etype, $code);
            )*)*

            /// Every named code, in table order.
            pub const ALL: &'static [Self] = &[$($(Self::$name,)*)*];
        }

        static TABLE: &[Row] = &[$($(
            Row {
                code: TermCode::$name,
                name: stringify!($name),
                short: $short,
                description: concat!($prefix, ": ", $short),
            },
        )*)*];
    };
}

term_codes! {
    "RDMAP" {
        /// RDMAP Local Catastrophic error (0/0/0). RFC 5040 defines no codes for this type,
        /// so any code octet is accepted as the same error on receive (siw sends 0xFF).
        RDMAP_LOCAL_CATASTROPHIC = (Rdmap, 0x0, 0x00) "local catastrophic error";
    }
    "RDMAP remote protection" {
        /// The STag is not valid (0/1/0x00), e.g. a Read Request's SrcSTag.
        INVALID_STAG = (Rdmap, 0x1, 0x00) "invalid STag";
        /// Base or bounds violation (0/1/0x01).
        BASE_BOUNDS = (Rdmap, 0x1, 0x01) "base or bounds violation";
        /// Access rights violation (0/1/0x02).
        ACCESS_RIGHTS = (Rdmap, 0x1, 0x02) "access rights violation";
        /// STag not associated with the RDMAP stream (0/1/0x03).
        STAG_NOT_ASSOCIATED = (Rdmap, 0x1, 0x03) "STag not associated with RDMAP stream";
        /// TO wrap (0/1/0x04).
        TO_WRAP = (Rdmap, 0x1, 0x04) "TO wrap";
        /// STag cannot be invalidated, as a protection failure (0/1/0x09); siw uses it for a
        /// permission or ownership failure of Send with Invalidate.
        PROT_CANNOT_INVALIDATE = (Rdmap, 0x1, 0x09) "STag cannot be invalidated";
        /// Unspecified remote protection error (0/1/0xFF).
        PROT_UNSPECIFIED = (Rdmap, 0x1, 0xFF) "unspecified error";
    }
    "RDMAP remote operation" {
        /// The RDMAP control octet has RV ≠ 1 (0/2/0x05).
        INVALID_RDMAP_VERSION = (Rdmap, 0x2, 0x05) "invalid RDMAP version";
        /// Unknown or unexpected opcode (0/2/0x06), also the answer of a peer without
        /// RFC 7306 to opcodes 0x8–0xB.
        UNEXPECTED_OPCODE = (Rdmap, 0x2, 0x06) "unexpected OpCode";
        /// Catastrophic error localized to the RDMAP stream (0/2/0x07). RFC 7306 §8.2
        /// uses it for a misaligned atomic target; siw for too many inbound Read Requests.
        CATASTROPHIC_STREAM = (Rdmap, 0x2, 0x07) "catastrophic error, localized to RDMAP stream";
        /// Catastrophic error, global (0/2/0x08).
        CATASTROPHIC_GLOBAL = (Rdmap, 0x2, 0x08) "catastrophic error, global";
        /// STag cannot be invalidated (0/2/0x09), e.g. Send with Invalidate naming an STag
        /// of another stream.
        OP_CANNOT_INVALIDATE = (Rdmap, 0x2, 0x09) "STag cannot be invalidated";
        /// Unspecified remote operation error (0/2/0xFF); wire-format.md §5.7 uses it for
        /// Immediate Data whose length is not 8.
        OP_UNSPECIFIED = (Rdmap, 0x2, 0xFF) "unspecified error";
    }
    "DDP" {
        /// DDP Local Catastrophic error (1/0/0x00). Also the answer to a ULPDU too short
        /// for any DDP header (the zero-length FPDU among them): without a header the
        /// segment is neither tagged nor untagged, and its MPA framing was valid.
        DDP_LOCAL_CATASTROPHIC = (Ddp, 0x0, 0x00) "local catastrophic error";
    }
    "DDP tagged" {
        /// Tagged segment with an invalid STag (1/1/0x00).
        DDP_INVALID_STAG = (Ddp, 0x1, 0x00) "invalid STag";
        /// Tagged segment outside the registered range (1/1/0x01).
        DDP_BASE_BOUNDS = (Ddp, 0x1, 0x01) "base or bounds violation";
        /// Tagged segment's STag not associated with the DDP stream (1/1/0x02).
        DDP_STAG_NOT_ASSOCIATED = (Ddp, 0x1, 0x02) "STag not associated with DDP stream";
        /// Tagged segment whose TO + length wraps 2^64 (1/1/0x03).
        DDP_TO_WRAP = (Ddp, 0x1, 0x03) "TO wrap";
        /// Tagged segment with DV ≠ 1 (1/1/0x04).
        DDP_TAGGED_INVALID_VERSION = (Ddp, 0x1, 0x04) "invalid DDP version";
    }
    "DDP untagged" {
        /// Untagged segment with an invalid QN (1/2/0x01).
        DDP_INVALID_QN = (Ddp, 0x2, 0x01) "invalid QN";
        /// Untagged segment with no buffer for its MSN (1/2/0x02).
        DDP_NO_BUFFER = (Ddp, 0x2, 0x02) "invalid MSN - no buffer available";
        /// Untagged segment whose MSN is outside the valid range (1/2/0x03).
        DDP_MSN_RANGE = (Ddp, 0x2, 0x03) "invalid MSN - MSN range not valid";
        /// Untagged segment whose MO is beyond the buffer (1/2/0x04).
        DDP_INVALID_MO = (Ddp, 0x2, 0x04) "invalid MO";
        /// Untagged message longer than the receive buffer (1/2/0x05).
        DDP_TOO_LONG = (Ddp, 0x2, 0x05) "DDP message too long for available buffer";
        /// Untagged segment with DV ≠ 1 (1/2/0x06).
        DDP_UNTAGGED_INVALID_VERSION = (Ddp, 0x2, 0x06) "invalid DDP version";
    }
    "MPA" {
        /// TCP connection closed, terminated or lost (2/0/0x01); reported locally.
        MPA_TCP_LOST = (Llp, 0x0, 0x01) "TCP connection closed, terminated or lost";
        /// Received CRC differs from the computed CRC (2/0/0x02).
        MPA_CRC = (Llp, 0x0, 0x02) "CRC error";
        /// Marker and ULPDU_Length disagree on an FPDU start (2/0/0x03).
        MPA_MARKER = (Llp, 0x0, 0x03) "marker and ULPDU_Length mismatch";
        /// Invalid MPA Request or Reply frame (2/0/0x04).
        MPA_INVALID_FRAME = (Llp, 0x0, 0x04) "invalid MPA Request or Reply frame";
        /// Local catastrophic error during enhanced connection setup (2/0/0x05, RFC 6581).
        MPA_LOCAL_CATASTROPHIC = (Llp, 0x0, 0x05) "local catastrophic error";
        /// Insufficient IRD resources (2/0/0x06, RFC 6581).
        MPA_INSUFFICIENT_IRD = (Llp, 0x0, 0x06) "insufficient IRD resources";
        /// No matching RTR option (2/0/0x07, RFC 6581).
        MPA_NO_MATCHING_RTR = (Llp, 0x0, 0x07) "no matching RTR option";
    }
}

/// The table row of `code`. RDMAP Local Catastrophic matches whatever its code octet.
fn lookup(code: TermCode) -> Option<&'static Row> {
    let code = match (code.layer, code.etype) {
        (Layer::Rdmap, 0) => TermCode::RDMAP_LOCAL_CATASTROPHIC,
        _ => code,
    };
    TABLE.iter().find(|row| row.code == code)
}

fn etype_name(layer: Layer, etype: u8) -> Option<&'static str> {
    Some(match (layer, etype) {
        (Layer::Rdmap | Layer::Ddp, 0) => "local catastrophic",
        (Layer::Rdmap, 1) => "remote protection",
        (Layer::Rdmap, 2) => "remote operation",
        (Layer::Ddp, 1) => "tagged",
        (Layer::Ddp, 2) => "untagged",
        (Layer::Ddp, 3) => "reserved for LLP",
        (Layer::Llp, 0) => "MPA",
        _ => return None,
    })
}

fn generic_description(code: TermCode) -> &'static str {
    match (code.layer, code.etype) {
        (Layer::Rdmap, 1) => "RDMAP remote protection: unknown error code",
        (Layer::Rdmap, 2) => "RDMAP remote operation: unknown error code",
        (Layer::Rdmap, _) => "RDMAP: unknown error type",
        (Layer::Ddp, 0) => "DDP: local catastrophic error (unknown code)",
        (Layer::Ddp, 1) => "DDP tagged: unknown error code",
        (Layer::Ddp, 2) => "DDP untagged: unknown error code",
        (Layer::Ddp, 3) => "DDP: error type reserved for the LLP",
        (Layer::Ddp, _) => "DDP: unknown error type",
        (Layer::Llp, 0) => "MPA: unknown error code",
        (Layer::Llp, _) => "LLP: unknown error type",
        (Layer::Unknown(_), _) => "unknown Terminate layer",
    }
}

#[cfg(test)]
mod tests;
