//! The 4-bit RDMAP opcode (RFC 5040 §4.2, RFC 7306 §4; wire-format.md §4.1), and the four
//! Send with Immediate Data opcodes of this stack's negotiated extension (seed 003 §3.6).
//!
//! RFC 5040 and RFC 7306 use 0x0–0xB; the 4-bit field leaves 0xC–0xF, which are exactly
//! the four Send with Immediate variants (0xF is the IANA value reserved for experiments,
//! which this extension is). They mirror the Send variants 0x3–0x6 in the same order, and
//! are sent only to a peer that agreed ([`mpa::Extensions::SEND_IMMEDIATE`]); anyone else
//! receiving one answers with an "unexpected OpCode" Terminate, as for any unknown value.

use core::fmt;

/// An RDMAP message opcode.
///
/// The conversion from `u8` is total (smoltcp `enum_with_unknown!` style): values without a
/// meaning become [`Opcode::Unknown`], so peer input never panics, and
/// `u8::from(Opcode::from(v)) == v` for every `v`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Opcode {
    /// 0x0: RDMA Write (tagged).
    RdmaWrite,
    /// 0x1: RDMA Read Request (untagged, QN 1).
    ReadRequest,
    /// 0x2: RDMA Read Response (tagged).
    ReadResponse,
    /// 0x3: Send (untagged, QN 0).
    Send,
    /// 0x4: Send with Invalidate (untagged, QN 0).
    SendInvalidate,
    /// 0x5: Send with Solicited Event (untagged, QN 0).
    SendSe,
    /// 0x6: Send with Solicited Event and Invalidate (untagged, QN 0).
    SendSeInvalidate,
    /// 0x7: Terminate (untagged, QN 2).
    Terminate,
    /// 0x8: Immediate Data, RFC 7306 (untagged, QN 0).
    ImmediateData,
    /// 0x9: Immediate Data with Solicited Event, RFC 7306 (untagged, QN 0).
    ImmediateDataSe,
    /// 0xA: Atomic Request, RFC 7306 (untagged, QN 1).
    AtomicRequest,
    /// 0xB: Atomic Response, RFC 7306 (untagged, QN 3).
    AtomicResponse,
    /// 0xC: Send with Immediate Data (extension; untagged, QN 0): a 4-octet immediate value
    /// after the DDP header of every segment, then the payload.
    SendImm,
    /// 0xD: Send with Invalidate and Immediate Data (extension).
    SendInvalidateImm,
    /// 0xE: Send with Solicited Event and Immediate Data (extension).
    SendSeImm,
    /// 0xF: Send with Solicited Event, Invalidate and Immediate Data (extension).
    SendSeInvalidateImm,
    /// Any other value (more than 4 bits).
    Unknown(u8),
}

impl Opcode {
    /// Whether the message travels in tagged DDP segments (RDMA Write, Read Response).
    pub fn is_tagged(self) -> bool {
        matches!(self, Self::RdmaWrite | Self::ReadResponse)
    }

    /// The DDP untagged queue number of the message (wire-format.md §3.4), or `None` for
    /// tagged and unknown opcodes.
    pub fn queue(self) -> Option<u32> {
        match self {
            Self::Send
            | Self::SendInvalidate
            | Self::SendSe
            | Self::SendSeInvalidate
            | Self::ImmediateData
            | Self::ImmediateDataSe
            | Self::SendImm
            | Self::SendInvalidateImm
            | Self::SendSeImm
            | Self::SendSeInvalidateImm => Some(0),
            Self::ReadRequest | Self::AtomicRequest => Some(1),
            Self::Terminate => Some(2),
            Self::AtomicResponse => Some(3),
            Self::RdmaWrite | Self::ReadResponse | Self::Unknown(_) => None,
        }
    }

    /// Whether this is one of the eight Send variants (RFC 5040's four, and the four with
    /// Immediate Data).
    pub fn is_send(self) -> bool {
        matches!(
            self,
            Self::Send
                | Self::SendInvalidate
                | Self::SendSe
                | Self::SendSeInvalidate
                | Self::SendImm
                | Self::SendInvalidateImm
                | Self::SendSeImm
                | Self::SendSeInvalidateImm
        )
    }

    /// Whether the message asks for a Solicited Event at the receiver.
    pub fn solicited(self) -> bool {
        matches!(
            self,
            Self::SendSe
                | Self::SendSeInvalidate
                | Self::ImmediateDataSe
                | Self::SendSeImm
                | Self::SendSeInvalidateImm
        )
    }

    /// Whether the untagged header carries an STag to invalidate (octets 2–5).
    pub fn invalidates(self) -> bool {
        matches!(
            self,
            Self::SendInvalidate
                | Self::SendSeInvalidate
                | Self::SendInvalidateImm
                | Self::SendSeInvalidateImm
        )
    }

    /// Whether this is a Send with Immediate Data (the extension's 0xC–0xF): each segment
    /// starts with the 4-octet immediate value.
    pub fn has_send_immediate(self) -> bool {
        matches!(
            self,
            Self::SendImm | Self::SendInvalidateImm | Self::SendSeImm | Self::SendSeInvalidateImm
        )
    }

    /// The Send variant with these properties.
    pub fn send(invalidate: bool, solicited: bool, immediate: bool) -> Self {
        match (immediate, invalidate, solicited) {
            (false, false, false) => Self::Send,
            (false, true, false) => Self::SendInvalidate,
            (false, false, true) => Self::SendSe,
            (false, true, true) => Self::SendSeInvalidate,
            (true, false, false) => Self::SendImm,
            (true, true, false) => Self::SendInvalidateImm,
            (true, false, true) => Self::SendSeImm,
            (true, true, true) => Self::SendSeInvalidateImm,
        }
    }

    /// Whether this is one of the two Immediate Data opcodes (RFC 7306 §6).
    pub fn is_immediate(self) -> bool {
        matches!(self, Self::ImmediateData | Self::ImmediateDataSe)
    }

    /// Whether the opcode has a meaning here (0x0–0xB, and the extension's 0xC–0xF).
    pub fn is_known(self) -> bool {
        !matches!(self, Self::Unknown(_))
    }
}

impl From<u8> for Opcode {
    fn from(value: u8) -> Self {
        match value {
            0x0 => Self::RdmaWrite,
            0x1 => Self::ReadRequest,
            0x2 => Self::ReadResponse,
            0x3 => Self::Send,
            0x4 => Self::SendInvalidate,
            0x5 => Self::SendSe,
            0x6 => Self::SendSeInvalidate,
            0x7 => Self::Terminate,
            0x8 => Self::ImmediateData,
            0x9 => Self::ImmediateDataSe,
            0xA => Self::AtomicRequest,
            0xB => Self::AtomicResponse,
            0xC => Self::SendImm,
            0xD => Self::SendInvalidateImm,
            0xE => Self::SendSeImm,
            0xF => Self::SendSeInvalidateImm,
            other => Self::Unknown(other),
        }
    }
}

impl From<Opcode> for u8 {
    fn from(value: Opcode) -> Self {
        match value {
            Opcode::RdmaWrite => 0x0,
            Opcode::ReadRequest => 0x1,
            Opcode::ReadResponse => 0x2,
            Opcode::Send => 0x3,
            Opcode::SendInvalidate => 0x4,
            Opcode::SendSe => 0x5,
            Opcode::SendSeInvalidate => 0x6,
            Opcode::Terminate => 0x7,
            Opcode::ImmediateData => 0x8,
            Opcode::ImmediateDataSe => 0x9,
            Opcode::AtomicRequest => 0xA,
            Opcode::AtomicResponse => 0xB,
            Opcode::SendImm => 0xC,
            Opcode::SendInvalidateImm => 0xD,
            Opcode::SendSeImm => 0xE,
            Opcode::SendSeInvalidateImm => 0xF,
            Opcode::Unknown(v) => v,
        }
    }
}

impl fmt::Display for Opcode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = match self {
            Self::RdmaWrite => "RDMA Write",
            Self::ReadRequest => "RDMA Read Request",
            Self::ReadResponse => "RDMA Read Response",
            Self::Send => "Send",
            Self::SendInvalidate => "Send with Invalidate",
            Self::SendSe => "Send with SE",
            Self::SendSeInvalidate => "Send with SE and Invalidate",
            Self::Terminate => "Terminate",
            Self::ImmediateData => "Immediate Data",
            Self::ImmediateDataSe => "Immediate Data with SE",
            Self::AtomicRequest => "Atomic Request",
            Self::AtomicResponse => "Atomic Response",
            Self::SendImm => "Send with Immediate Data",
            Self::SendInvalidateImm => "Send with Invalidate and Immediate Data",
            Self::SendSeImm => "Send with SE and Immediate Data",
            Self::SendSeInvalidateImm => "Send with SE, Invalidate and Immediate Data",
            Self::Unknown(v) => return write!(f, "unknown opcode {v:#x}"),
        };
        f.write_str(name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_all_256_values() {
        for v in 0..=u8::MAX {
            let op = Opcode::from(v);
            assert_eq!(u8::from(op), v);
            assert_eq!(op.is_known(), v <= 0xF, "{v:#x}");
        }
    }

    #[test]
    fn queue_numbers_follow_section_3_4() {
        let expect: [(u8, Option<u32>); 17] = [
            (0x0, None),
            (0x1, Some(1)),
            (0x2, None),
            (0x3, Some(0)),
            (0x4, Some(0)),
            (0x5, Some(0)),
            (0x6, Some(0)),
            (0x7, Some(2)),
            (0x8, Some(0)),
            (0x9, Some(0)),
            (0xA, Some(1)),
            (0xB, Some(3)),
            (0xC, Some(0)),
            (0xD, Some(0)),
            (0xE, Some(0)),
            (0xF, Some(0)),
            (0x10, None),
        ];
        for (v, qn) in expect {
            let op = Opcode::from(v);
            assert_eq!(op.queue(), qn, "{op}");
            // Every untagged known opcode has a queue; tagged ones do not.
            assert_eq!(op.is_tagged(), op.is_known() && qn.is_none(), "{op}");
        }
    }

    #[test]
    fn predicates() {
        let all: Vec<Opcode> = (0..=0xFu8).map(Opcode::from).collect();
        let pick = |f: fn(Opcode) -> bool| -> Vec<u8> {
            all.iter()
                .copied()
                .filter(|o| f(*o))
                .map(u8::from)
                .collect()
        };
        assert_eq!(pick(Opcode::is_tagged), [0x0, 0x2]);
        assert_eq!(
            pick(Opcode::is_send),
            [0x3, 0x4, 0x5, 0x6, 0xC, 0xD, 0xE, 0xF]
        );
        assert_eq!(pick(Opcode::solicited), [0x5, 0x6, 0x9, 0xE, 0xF]);
        assert_eq!(pick(Opcode::invalidates), [0x4, 0x6, 0xD, 0xF]);
        assert_eq!(pick(Opcode::is_immediate), [0x8, 0x9]);
        assert_eq!(pick(Opcode::has_send_immediate), [0xC, 0xD, 0xE, 0xF]);
        // Opcode::send names all eight, each once, and agrees with the predicates.
        let mut seen = Vec::new();
        for bits in 0..8u8 {
            let (inv, se, imm) = (bits & 1 != 0, bits & 2 != 0, bits & 4 != 0);
            let op = Opcode::send(inv, se, imm);
            assert_eq!(
                (op.invalidates(), op.solicited(), op.has_send_immediate()),
                (inv, se, imm)
            );
            seen.push(u8::from(op));
        }
        seen.sort_unstable();
        assert_eq!(seen, [0x3, 0x4, 0x5, 0x6, 0xC, 0xD, 0xE, 0xF]);
    }

    #[test]
    fn display_names() {
        assert_eq!(
            Opcode::SendSeInvalidate.to_string(),
            "Send with SE and Invalidate"
        );
        assert_eq!(Opcode::from(0x1C).to_string(), "unknown opcode 0x1c");
        assert_eq!(
            Opcode::from(0xD).to_string(),
            "Send with Invalidate and Immediate Data"
        );
    }
}
