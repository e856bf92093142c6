//! Small identifiers of the API: [`PdId`], [`MwType`].

use std::fmt;

/// A protection domain's number, unique within one device.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PdId(pub u32);

impl fmt::Display for PdId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "pd{}", self.0)
    }
}

/// The type of a memory window.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum MwType {
    /// Type 1: bound and unbound by verbs ([`Mw::bind`](crate::Mw::bind),
    /// [`Mw::invalidate`](crate::Mw::invalidate)); usable by every queue pair of its
    /// protection domain; cannot be invalidated remotely.
    One,
    /// Type 2: bound by a work request on one queue pair
    /// ([`Qp::bind_mw`](crate::Qp::bind_mw)) and usable only through it; invalidated by
    /// Local Invalidate or by the peer's Send with Invalidate.
    Two,
}

#[cfg(feature = "embedded")]
impl From<MwType> for offload_engine::tpt::MwType {
    fn from(t: MwType) -> Self {
        match t {
            MwType::One => Self::One,
            MwType::Two => Self::Two,
        }
    }
}
