//! Ready-To-Receive (RTR) types of RFC 6581 peer-to-peer mode (§2.4 of wire-format.md).

use core::ops::{BitAnd, BitAndAssign, BitOr, BitOrAssign};

/// RTR types as a bit set (RFC 6581): zero-length Send (B), RDMA Write (C), RDMA Read (D).
#[derive(
    Copy, Clone, Debug, PartialEq, Eq, Default, Hash, serde::Serialize, serde::Deserialize,
)]
pub struct RtrFlags(u8);

impl RtrFlags {
    /// No RTR type.
    pub const NONE: Self = Self(0);
    /// Zero-length Send (flag B of the enhanced block).
    pub const SEND: Self = Self(0x1);
    /// Zero-length RDMA Write (flag C).
    pub const WRITE: Self = Self(0x2);
    /// Zero-length RDMA Read Request (flag D).
    pub const READ: Self = Self(0x4);
    /// All three types.
    pub const ALL: Self = Self(0x7);

    /// Builds a set from raw bits (`SEND = 1, WRITE = 2, READ = 4`); other bits are dropped.
    pub const fn from_bits_truncate(bits: u8) -> Self {
        Self(bits & Self::ALL.0)
    }

    /// The raw bits (`SEND = 1, WRITE = 2, READ = 4`).
    pub const fn bits(self) -> u8 {
        self.0
    }

    /// True if every type in `other` is also in `self`.
    pub const fn contains(self, other: Self) -> bool {
        self.0 & other.0 == other.0
    }

    /// True if the set holds no type.
    pub const fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// The single type in the set, or `None` if the set is empty or holds several types.
    pub fn single(self) -> Option<Rtr> {
        match self {
            Self::SEND => Some(Rtr::Send),
            Self::WRITE => Some(Rtr::Write),
            Self::READ => Some(Rtr::Read),
            _ => None,
        }
    }

    /// The preferred type in the set: Write, then Read, then Send (siw and irdma order;
    /// Send consumes an untagged buffer and MSN 1 at the peer, so it comes last).
    pub fn preferred(self) -> Option<Rtr> {
        [Rtr::Write, Rtr::Read, Rtr::Send]
            .into_iter()
            .find(|&t| self.contains(t.into()))
    }
}

impl BitOr for RtrFlags {
    type Output = Self;
    fn bitor(self, rhs: Self) -> Self {
        Self(self.0 | rhs.0)
    }
}

impl BitOrAssign for RtrFlags {
    fn bitor_assign(&mut self, rhs: Self) {
        self.0 |= rhs.0;
    }
}

impl BitAnd for RtrFlags {
    type Output = Self;
    fn bitand(self, rhs: Self) -> Self {
        Self(self.0 & rhs.0)
    }
}

impl BitAndAssign for RtrFlags {
    fn bitand_assign(&mut self, rhs: Self) {
        self.0 &= rhs.0;
    }
}

/// One RTR type.
#[derive(Copy, Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Rtr {
    /// Zero-length Send (flag B).
    Send,
    /// Zero-length RDMA Write (flag C).
    Write,
    /// Zero-length RDMA Read Request (flag D).
    Read,
}

impl From<Rtr> for RtrFlags {
    fn from(rtr: Rtr) -> Self {
        match rtr {
            Rtr::Send => Self::SEND,
            Rtr::Write => Self::WRITE,
            Rtr::Read => Self::READ,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn set_operations() {
        let wr = RtrFlags::WRITE | RtrFlags::READ;
        assert!(wr.contains(RtrFlags::WRITE) && wr.contains(RtrFlags::READ));
        assert!(!wr.contains(RtrFlags::SEND));
        assert!(wr.contains(RtrFlags::NONE));
        assert_eq!(wr & RtrFlags::READ, RtrFlags::READ);
        assert!((wr & RtrFlags::SEND).is_empty());
        assert_eq!(RtrFlags::default(), RtrFlags::NONE);
        assert_eq!(RtrFlags::from_bits_truncate(0xff), RtrFlags::ALL);
        assert_eq!(RtrFlags::READ.bits(), 4);
    }

    #[test]
    fn single_and_preferred() {
        assert_eq!(RtrFlags::READ.single(), Some(Rtr::Read));
        assert_eq!((RtrFlags::READ | RtrFlags::SEND).single(), None);
        assert_eq!(RtrFlags::NONE.single(), None);
        assert_eq!(RtrFlags::ALL.preferred(), Some(Rtr::Write));
        assert_eq!(
            (RtrFlags::READ | RtrFlags::SEND).preferred(),
            Some(Rtr::Read)
        );
        assert_eq!(RtrFlags::SEND.preferred(), Some(Rtr::Send));
        assert_eq!(RtrFlags::NONE.preferred(), None);
        assert_eq!(RtrFlags::from(Rtr::Write), RtrFlags::WRITE);
    }
}
