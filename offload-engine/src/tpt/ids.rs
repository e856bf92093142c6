//! Small value types of the TPT: protection domain and queue pair identifiers, the
//! addressing mode of a region and the type of a memory window.

use core::fmt;

/// A protection domain, as handed out by [`Tpt::alloc_pd`](super::Tpt::alloc_pd).
///
/// Every region and window belongs to one protection domain, and every queue pair view
/// ([`QpMemory`](super::QpMemory)) carries the domain of its queue pair: an access through
/// an entry of another domain fails as [`AccessError::NotAssociated`](rdmap::AccessError).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PdId(u32);

impl PdId {
    /// Wraps a raw protection domain number.
    pub const fn new(raw: u32) -> Self {
        Self(raw)
    }

    /// The raw number.
    pub const fn get(self) -> u32 {
        self.0
    }
}

impl From<u32> for PdId {
    fn from(raw: u32) -> Self {
        Self(raw)
    }
}

impl From<PdId> for u32 {
    fn from(pd: PdId) -> Self {
        pd.0
    }
}

impl fmt::Display for PdId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "pd{}", self.0)
    }
}

/// A queue pair, as numbered by the engine. Type 2 memory windows are bound to one.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct QpId(u32);

impl QpId {
    /// Wraps a raw queue pair number.
    pub const fn new(raw: u32) -> Self {
        Self(raw)
    }

    /// The raw number.
    pub const fn get(self) -> u32 {
        self.0
    }
}

impl From<u32> for QpId {
    fn from(raw: u32) -> Self {
        Self(raw)
    }
}

impl From<QpId> for u32 {
    fn from(qp: QpId) -> Self {
        qp.0
    }
}

impl fmt::Display for QpId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "qp{}", self.0)
    }
}

pub use ddp::Base;

/// The type of a memory window.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum MwType {
    /// Type 1: bound and unbound by verbs ([`Tpt::bind_mw`](super::Tpt::bind_mw),
    /// [`Tpt::invalidate_local`](super::Tpt::invalidate_local)); usable by every queue pair
    /// of its protection domain; cannot be invalidated remotely.
    One,
    /// Type 2: bound by a bind work request on a queue pair's send queue
    /// ([`rdmap::LocalOps::bind`]) and usable only through that queue pair; invalidated by
    /// Local Invalidate or by the peer's Send with Invalidate.
    Two,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_convert_and_display() {
        let pd = PdId::from(7);
        assert_eq!(u32::from(pd), 7);
        assert_eq!(pd.get(), 7);
        assert_eq!(pd.to_string(), "pd7");
        let qp = QpId::new(12);
        assert_eq!(u32::from(qp), 12);
        assert_eq!(QpId::from(12), qp);
        assert_eq!(qp.to_string(), "qp12");
    }

    #[test]
    fn base_start() {
        assert_eq!(Base::Va(0x1000).start(), 0x1000);
        assert_eq!(Base::ZeroBased.start(), 0);
    }
}
