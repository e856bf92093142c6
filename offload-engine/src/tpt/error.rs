//! Errors of the TPT's verbs (registration, windows, protection domains).
//!
//! Accesses and work requests that arrive through [`rdmap::Memory`] fail with
//! [`rdmap::AccessError`] instead, which maps onto Terminate codes.

use core::fmt;

use ddp::{Access, STag};
use rdmap::AccessError;

use super::ids::PdId;

/// Why a TPT verb failed. A failed verb changes nothing.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum TptError {
    /// The protection domain was never allocated or was deallocated.
    NoSuchPd(PdId),
    /// No entry has the STag's index.
    NoSuchStag(STag),
    /// The entry exists but answers to another tag instance now.
    StaleStag {
        /// The STag given.
        given: STag,
        /// The STag the entry answers to.
        current: STag,
    },
    /// The STag names the wrong kind of entry for this verb.
    WrongKind {
        /// The STag given.
        stag: STag,
        /// What the verb needs.
        expected: &'static str,
    },
    /// The entry is invalid (a fast-registration region not registered yet, or invalidated).
    NotValid(STag),
    /// The entry belongs to another protection domain than the requester (the window, or
    /// the queue pair).
    PdMismatch {
        /// The requester's domain.
        expected: PdId,
        /// The entry's domain.
        found: PdId,
    },
    /// The object is still in use.
    InUse {
        /// What still uses it.
        what: &'static str,
        /// How many.
        count: usize,
    },
    /// The range lies outside the region, or `start + len` wraps 2^64.
    Bounds {
        /// Requested start (tagged offset).
        start: u64,
        /// Requested length.
        len: u64,
    },
    /// The region lacks rights the request needs or asks to pass on.
    Rights {
        /// The rights that are missing.
        missing: Access,
    },
    /// Every tag index is in use.
    Exhausted,
    /// The system refused memory for a region of this many octets.
    NoMemory {
        /// The length asked for.
        len: usize,
    },
}

impl TptError {
    /// The [`AccessError`] a work request (bind) reports for this failure, following the
    /// check order: every lookup failure is an invalid STag, a domain mismatch is "not
    /// associated".
    pub(super) fn to_access(self) -> AccessError {
        match self {
            Self::PdMismatch { .. } => AccessError::NotAssociated,
            Self::Bounds { start, len } if start.checked_add(len).is_none() => AccessError::ToWrap,
            Self::Bounds { .. } => AccessError::Bounds,
            Self::Rights { missing } => AccessError::Rights { missing },
            _ => AccessError::InvalidStag,
        }
    }
}

impl fmt::Display for TptError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Self::NoSuchPd(pd) => write!(
                f,
                "protection domain {pd} does not exist; allocate one with alloc_pd"
            ),
            Self::NoSuchStag(stag) => write!(
                f,
                "no TPT entry for STag {stag} (index {:#x}); it was never allocated or was \
                 deregistered/deallocated",
                stag.index()
            ),
            Self::StaleStag { given, current } => write!(
                f,
                "STag {given} is stale: the entry now answers to {current}; use the STag \
                 returned by the latest registration or bind"
            ),
            Self::WrongKind { stag, expected } => {
                write!(f, "STag {stag} does not name {expected}")
            }
            Self::NotValid(stag) => write!(
                f,
                "STag {stag} is not valid (invalidated, or a fast-registration region not \
                 registered yet); register or bind it first"
            ),
            Self::PdMismatch { expected, found } => write!(
                f,
                "the entry is in {found}, not in {expected}; a window binds only to a region \
                 of its own protection domain"
            ),
            Self::InUse { what, count } => {
                write!(f, "still in use by {count} {what}; release them first")
            }
            Self::Bounds { start, len } => write!(
                f,
                "range [{start:#x}, +{len:#x}) lies outside the region or wraps 2^64; \
                 choose a range inside it"
            ),
            Self::Rights { missing } => write!(
                f,
                "missing access rights {missing:?}; register the region with them or ask \
                 for fewer"
            ),
            Self::Exhausted => {
                f.write_str("every TPT index is in use; deregister regions or deallocate windows")
            }
            Self::NoMemory { len } => write!(
                f,
                "the system refused {len} octets of shared memory for the region; free \
                 memory or register a smaller region"
            ),
        }
    }
}

impl std::error::Error for TptError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_names_cause_and_fix() {
        let e = TptError::Rights {
            missing: Access::BIND,
        };
        assert!(e.to_string().contains("BIND"));
        let e = TptError::InUse {
            what: "bound windows",
            count: 2,
        };
        assert!(e.to_string().contains("2 bound windows"));
        let e = TptError::StaleStag {
            given: STag::new(1, 0),
            current: STag::new(1, 1),
        };
        assert!(e.to_string().contains("0x00000101"));
    }
}
