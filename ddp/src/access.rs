//! Access rights of a memory region or window.

use core::fmt;
use core::ops::{BitAnd, BitAndAssign, BitOr, BitOrAssign};

/// Access rights of a memory region or memory window, as a small bit set.
///
/// Combine with `|`, test with [`Access::contains`]. Bits outside the defined set are
/// never stored ([`Access::from_bits_truncate`] drops them).
#[derive(Copy, Clone, PartialEq, Eq, Hash, Default, serde::Serialize, serde::Deserialize)]
pub struct Access(u8);

impl Access {
    /// No access at all.
    pub const NONE: Self = Self(0);
    /// Local reads (the memory may be a source of local work requests).
    pub const LOCAL_READ: Self = Self(0x01);
    /// Local writes (the memory may be a receive buffer or a Read sink).
    pub const LOCAL_WRITE: Self = Self(0x02);
    /// The peer may RDMA Read from the memory.
    pub const REMOTE_READ: Self = Self(0x04);
    /// The peer may RDMA Write into the memory.
    pub const REMOTE_WRITE: Self = Self(0x08);
    /// The peer may perform atomic operations on the memory (RFC 7306).
    pub const REMOTE_ATOMIC: Self = Self(0x10);
    /// Memory windows may be bound to the region.
    pub const BIND: Self = Self(0x20);
    /// Every defined right.
    pub const ALL: Self = Self(0x3F);

    const NAMES: [(Self, &'static str); 6] = [
        (Self::LOCAL_READ, "LOCAL_READ"),
        (Self::LOCAL_WRITE, "LOCAL_WRITE"),
        (Self::REMOTE_READ, "REMOTE_READ"),
        (Self::REMOTE_WRITE, "REMOTE_WRITE"),
        (Self::REMOTE_ATOMIC, "REMOTE_ATOMIC"),
        (Self::BIND, "BIND"),
    ];

    /// The raw bits.
    pub const fn bits(self) -> u8 {
        self.0
    }

    /// Builds a set from raw bits, dropping undefined bits.
    pub const fn from_bits_truncate(bits: u8) -> Self {
        Self(bits & Self::ALL.0)
    }

    /// True if every right in `other` is also in `self`.
    pub const fn contains(self, other: Self) -> bool {
        self.0 & other.0 == other.0
    }

    /// True if no right is set.
    pub const fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// The rights in either set.
    pub const fn union(self, other: Self) -> Self {
        Self(self.0 | other.0)
    }

    /// The rights in both sets.
    pub const fn intersection(self, other: Self) -> Self {
        Self(self.0 & other.0)
    }

    /// The rights in `self` but not in `other`.
    pub const fn difference(self, other: Self) -> Self {
        Self(self.0 & !other.0)
    }

    /// True if any remote right (read, write or atomic) is set.
    pub const fn is_remote(self) -> bool {
        self.0 & (Self::REMOTE_READ.0 | Self::REMOTE_WRITE.0 | Self::REMOTE_ATOMIC.0) != 0
    }

    /// The rights a region needs for a memory window with rights `self` to be bound to
    /// it, as the RDMAC and InfiniBand verbs have it: [`BIND`](Self::BIND), and
    /// [`LOCAL_WRITE`](Self::LOCAL_WRITE) if the window lets the peer write (Remote Write
    /// or Remote Atomic). The region's own remote rights do not limit its windows: a
    /// region the peer cannot reach by its own STag may be exposed through a window.
    pub const fn needed_to_bind(self) -> Self {
        let writes = self.0 & (Self::REMOTE_WRITE.0 | Self::REMOTE_ATOMIC.0) != 0;
        Self(Self::BIND.0 | if writes { Self::LOCAL_WRITE.0 } else { 0 })
    }
}

impl BitOr for Access {
    type Output = Self;
    fn bitor(self, rhs: Self) -> Self {
        self.union(rhs)
    }
}

impl BitOrAssign for Access {
    fn bitor_assign(&mut self, rhs: Self) {
        *self = self.union(rhs);
    }
}

impl BitAnd for Access {
    type Output = Self;
    fn bitand(self, rhs: Self) -> Self {
        self.intersection(rhs)
    }
}

impl BitAndAssign for Access {
    fn bitand_assign(&mut self, rhs: Self) {
        *self = self.intersection(rhs);
    }
}

impl fmt::Debug for Access {
    /// Prints the names of the set rights joined by `" | "`, or `NONE`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_empty() {
            return f.write_str("NONE");
        }
        let mut first = true;
        for (flag, name) in Self::NAMES {
            if self.contains(flag) {
                if !first {
                    f.write_str(" | ")?;
                }
                f.write_str(name)?;
                first = false;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn set_operations() {
        let rw = Access::REMOTE_READ | Access::REMOTE_WRITE;
        assert!(rw.contains(Access::REMOTE_READ));
        assert!(rw.contains(Access::REMOTE_WRITE));
        assert!(!rw.contains(Access::LOCAL_WRITE));
        assert!(rw.contains(Access::NONE));
        assert!(!rw.contains(Access::REMOTE_READ | Access::BIND));
        assert_eq!(rw & Access::REMOTE_READ, Access::REMOTE_READ);
        assert_eq!(rw.difference(Access::REMOTE_READ), Access::REMOTE_WRITE);
        assert!(rw.is_remote());
        assert!(!(Access::LOCAL_READ | Access::BIND).is_remote());

        let mut a = Access::NONE;
        assert!(a.is_empty());
        a |= Access::BIND;
        a |= Access::LOCAL_READ;
        assert_eq!(a.bits(), 0x21);
        a &= Access::BIND;
        assert_eq!(a, Access::BIND);
        assert_eq!(Access::default(), Access::NONE);
    }

    #[test]
    fn truncation() {
        assert_eq!(Access::from_bits_truncate(0xFF), Access::ALL);
        assert_eq!(Access::from_bits_truncate(0xC4), Access::REMOTE_READ);
        assert_eq!(Access::from_bits_truncate(0x3F).bits(), 0x3F);
    }

    #[test]
    fn debug_names() {
        assert_eq!(
            format!("{:?}", Access::REMOTE_READ | Access::REMOTE_WRITE),
            "REMOTE_READ | REMOTE_WRITE"
        );
        assert_eq!(format!("{:?}", Access::NONE), "NONE");
        assert_eq!(
            format!("{:?}", Access::ALL),
            "LOCAL_READ | LOCAL_WRITE | REMOTE_READ | REMOTE_WRITE | REMOTE_ATOMIC | BIND"
        );
    }
}
