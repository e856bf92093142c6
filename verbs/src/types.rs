//! Small identifiers and outcomes of the API: [`QpNum`], [`PdId`], [`MwType`], [`QpEnd`].

use std::fmt;

use rdmap::TermCode;

/// A queue pair number, unique within one device.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct QpNum(pub u32);

impl fmt::Display for QpNum {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "qp{}", self.0)
    }
}

impl From<offload_engine::QpNum> for QpNum {
    fn from(n: offload_engine::QpNum) -> Self {
        Self(n.0)
    }
}

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

impl From<MwType> for offload_engine::tpt::MwType {
    fn from(t: MwType) -> Self {
        match t {
            MwType::One => Self::One,
            MwType::Two => Self::Two,
        }
    }
}

/// How a queue pair ended.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum QpEnd {
    /// Both sides closed gracefully.
    Closed,
    /// The peer sent this Terminate.
    TerminatedByPeer(TermCode),
    /// This side detected a fatal error and sent this Terminate.
    Terminated(TermCode),
    /// The TCP connection failed or the peer closed it without a graceful close.
    ConnectionLost,
}

impl From<offload_engine::QpEnd> for QpEnd {
    fn from(e: offload_engine::QpEnd) -> Self {
        match e {
            offload_engine::QpEnd::Closed => Self::Closed,
            offload_engine::QpEnd::TerminatedByPeer(c) => Self::TerminatedByPeer(c),
            offload_engine::QpEnd::Terminated(c) => Self::Terminated(c),
            _ => Self::ConnectionLost,
        }
    }
}

impl fmt::Display for QpEnd {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Closed => f.write_str("closed gracefully"),
            Self::TerminatedByPeer(c) => write!(f, "the peer sent a Terminate: {c}"),
            Self::Terminated(c) => write!(f, "sent a Terminate: {c}"),
            Self::ConnectionLost => f.write_str("the TCP connection was lost"),
        }
    }
}
