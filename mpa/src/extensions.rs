//! This stack's extensions to iWARP (seed 003) and how two peers agree on them.
//!
//! # Negotiation (version 1)
//!
//! The MPA Request offers extensions in two of the four reserved bits of its flags octet
//! ([`FLAG_SEND_IMMEDIATE`](crate::wire::frame::FLAG_SEND_IMMEDIATE) 0x04,
//! [`FLAG_READ_V2`](crate::wire::frame::FLAG_READ_V2) 0x02). A Responder of this stack
//! answers with the same bits for the extensions it takes, and starts the Reply's private
//! data (after the RFC 6581 block) with an 8-octet [`ExtensionBlock`](crate::wire::extensions::ExtensionBlock)
//! that names the version and the agreed set; the Initiator removes the block before it
//! hands the private data to the application. An extension is in force only when both
//! frames say so, so:
//!
//! * a standard peer sees only reserved bits, which RFC 5044 §7.1.1 tells it to ignore
//!   (Linux siw sends and ignores them: it uses 0x08 for its own GSO experiment), and
//!   never receives a block, since a standard Initiator offers nothing;
//! * the application's private data is never touched: the block exists only in a Reply to
//!   an Initiator that offered, and that Initiator strips it;
//! * a Reply that sets the bits without the block (a foreign experiment using the same
//!   bits) agrees to nothing, and its private data stays whole.
//!
//! Why not RFC 6581's block: its four octets have no spare bit (A, B, C, D and two 14-bit
//! counts), and a Rev above 2 is refused by every standard peer. Why not the private data
//! of the Request: a standard Responder would hand it to its application.
//!
//! A later version keeps the first 4 octets of the block and raises its version; a
//! version-1 Initiator reads only the bits it offered.

use core::fmt;
use core::ops::{BitAnd, BitOr};

/// A set of this stack's extensions.
#[derive(
    Copy, Clone, Debug, PartialEq, Eq, Default, Hash, serde::Serialize, serde::Deserialize,
)]
pub struct Extensions(u32);

impl Extensions {
    /// No extension.
    pub const NONE: Self = Self(0);
    /// Send with Immediate Data (seed 003 §3.6): four RDMAP opcodes 0xC–0xF carrying a
    /// 32-bit immediate value with the Send's payload.
    pub const SEND_IMMEDIATE: Self = Self(0x1);
    /// RDMA Read V2 (seed 003 §3.3): a Read Request with no sink STag.
    pub const READ_V2: Self = Self(0x2);
    /// Every extension version 1 knows.
    pub const ALL: Self = Self(0x3);

    /// A set from raw bits; unknown bits are dropped.
    pub const fn from_bits_truncate(bits: u32) -> Self {
        Self(bits & Self::ALL.0)
    }

    /// The raw bits (bit 0 Send with Immediate, bit 1 Read V2).
    pub const fn bits(self) -> u32 {
        self.0
    }

    /// True if every extension of `other` is in `self`.
    pub const fn contains(self, other: Self) -> bool {
        self.0 & other.0 == other.0
    }

    /// True for the empty set.
    pub const fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// Parses a comma-separated list of names (`send_imm`, `read_v2`, `all`, `none`), as
    /// configuration files and command lines spell them.
    pub fn parse_list(list: &str) -> Result<Self, String> {
        let mut set = Self::NONE;
        for name in list.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            set = set
                | match name {
                    "send_imm" => Self::SEND_IMMEDIATE,
                    "read_v2" => Self::READ_V2,
                    "all" => Self::ALL,
                    "none" => Self::NONE,
                    other => {
                        return Err(format!(
                            "unknown extension `{other}`: the known ones are send_imm, \
                             read_v2, all and none"
                        ));
                    }
                };
        }
        Ok(set)
    }
}

impl BitOr for Extensions {
    type Output = Self;
    fn bitor(self, rhs: Self) -> Self {
        Self(self.0 | rhs.0)
    }
}

impl BitAnd for Extensions {
    type Output = Self;
    fn bitand(self, rhs: Self) -> Self {
        Self(self.0 & rhs.0)
    }
}

impl fmt::Display for Extensions {
    /// The names [`parse_list`](Self::parse_list) reads, comma-separated; `none` if empty.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<&str> = [
            (Self::SEND_IMMEDIATE, "send_imm"),
            (Self::READ_V2, "read_v2"),
        ]
        .into_iter()
        .filter(|(e, _)| self.contains(*e))
        .map(|(_, n)| n)
        .collect();
        if names.is_empty() {
            f.write_str("none")
        } else {
            f.write_str(&names.join(","))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for bits in 0..=3 {
            let e = Extensions::from_bits_truncate(bits);
            assert_eq!(Extensions::parse_list(&e.to_string()), Ok(e));
        }
        assert_eq!(Extensions::parse_list("all"), Ok(Extensions::ALL));
        assert_eq!(Extensions::parse_list(""), Ok(Extensions::NONE));
        let err = Extensions::parse_list("send_imm, bogus").unwrap_err();
        assert!(err.contains("`bogus`") && err.contains("read_v2"), "{err}");
        assert_eq!(Extensions::from_bits_truncate(0xff), Extensions::ALL);
    }
}
