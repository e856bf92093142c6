//! The errors of the verbs: memory operations ([`MemError`]) and work requests whose
//! completion goes to a future ([`WcError`]). Each names the cause and the fix.

use std::fmt;

#[cfg(feature = "embedded")]
use offload_engine::tpt::TptError;
#[cfg(feature = "embedded")]
use rdmap::AccessError;
use rdmap::{Access, Completion, PostError, STag, TermCode, WcOpcode, WcStatus};

/// Why a memory operation (register, read, write, deregister, bind, invalidate) failed.
/// A failed operation changes nothing.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum MemError {
    /// The range `[offset, offset + len)` (octets from the start of the region) does not
    /// lie inside the region.
    OutOfBounds {
        /// The region.
        stag: STag,
        /// First octet asked for.
        offset: u64,
        /// Octets asked for.
        len: u64,
        /// The region's length.
        region_len: u64,
    },
    /// The region was registered without a right the operation needs.
    MissingRights {
        /// The region.
        stag: STag,
        /// First octet of the access.
        offset: u64,
        /// The rights that are missing.
        missing: Access,
    },
    /// The STag no longer names this region or window: it was deregistered, deallocated
    /// or invalidated (a fast-registration region not registered yet is invalid too).
    Invalid {
        /// The STag.
        stag: STag,
    },
    /// The object belongs to another protection domain or device than the one it is used
    /// with.
    WrongDomain {
        /// The STag of the object.
        stag: STag,
    },
    /// The operation does not apply to this kind of object (for example a type 1 bind of
    /// a type 2 window, or a fast registration of an ordinary region).
    WrongKind {
        /// The STag of the object.
        stag: STag,
        /// What the operation needs.
        expected: &'static str,
    },
    /// The object is still in use (a region with windows bound to it, a protection
    /// domain with objects in it).
    InUse {
        /// The object.
        stag: STag,
        /// What still uses it.
        what: &'static str,
        /// How many.
        count: usize,
    },
    /// Every memory table entry of the device is in use.
    Exhausted,
    /// The system refused shared memory for a region of this many octets.
    NoMemory {
        /// The length asked for.
        len: usize,
    },
    /// Daemon mode: the local `iwarpd` could not do it.
    Daemon {
        /// What was asked.
        op: &'static str,
        /// Why.
        why: DaemonWhy,
    },
}

/// Why the local `iwarpd` could not do a memory operation.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum DaemonWhy {
    /// The daemon at this control socket cannot be reached (it exited or restarted).
    Unreachable(&'static str),
    /// The daemon refused, for this reason (its words: the cause and what to do).
    Refused(std::sync::Arc<str>),
}

impl MemError {
    /// The error for a failed access at `offset` of the region `stag`.
    #[cfg(feature = "embedded")]
    pub(crate) fn access(
        stag: STag,
        offset: u64,
        len: u64,
        region_len: u64,
        e: AccessError,
    ) -> Self {
        match e {
            AccessError::Bounds | AccessError::ToWrap => Self::OutOfBounds {
                stag,
                offset,
                len,
                region_len,
            },
            AccessError::Rights { missing } => Self::MissingRights {
                stag,
                offset,
                missing,
            },
            AccessError::NotAssociated => Self::WrongDomain { stag },
            _ => Self::Invalid { stag },
        }
    }

    /// The error for a failed TPT verb on `stag`.
    #[cfg(feature = "embedded")]
    pub(crate) fn tpt(op: &'static str, stag: STag, error: TptError) -> Self {
        match error {
            TptError::NoSuchStag(_) | TptError::StaleStag { .. } | TptError::NotValid(_) => {
                Self::Invalid { stag }
            }
            TptError::PdMismatch { .. } => Self::WrongDomain { stag },
            TptError::WrongKind { expected, .. } => Self::WrongKind { stag, expected },
            TptError::InUse { what, count } => Self::InUse { stag, what, count },
            TptError::Bounds { start, len } => Self::OutOfBounds {
                stag,
                offset: start,
                len,
                region_len: 0,
            },
            TptError::Rights { missing } => Self::MissingRights {
                stag,
                offset: 0,
                missing,
            },
            TptError::NoMemory { len } => Self::NoMemory { len },
            TptError::Exhausted => Self::Exhausted,
            other => {
                tracing::debug!(op, error = %other, "memory verb refused");
                Self::Invalid { stag }
            }
        }
    }
}

impl fmt::Display for MemError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::OutOfBounds {
                stag,
                offset,
                len,
                region_len,
            } => write!(
                f,
                "octets [{offset}, +{len}) lie outside region {stag} of {region_len} octets; \
                 use a range inside the region"
            ),
            Self::MissingRights {
                stag,
                offset,
                missing,
            } => write!(
                f,
                "region {stag} (at offset {offset}) lacks the rights {missing:?}; register it \
                 with them"
            ),
            Self::Invalid { stag } => write!(
                f,
                "STag {stag} is no longer valid (deregistered, deallocated or invalidated); \
                 use a live region or rebind the window"
            ),
            Self::WrongDomain { stag } => write!(
                f,
                "{stag} belongs to another protection domain or device; use objects of one \
                 protection domain together"
            ),
            Self::WrongKind { stag, expected } => {
                write!(f, "STag {stag} is not {expected}")
            }
            Self::InUse { stag, what, count } => write!(
                f,
                "{stag} is still in use by {count} {what}; release them first"
            ),
            Self::Exhausted => f.write_str(
                "every memory table entry is in use; deregister regions or drop windows",
            ),
            Self::NoMemory { len } => write!(
                f,
                "the system refused {len} octets of shared memory for the region; free \
                 memory or register a smaller region"
            ),
            Self::Daemon { op, why } => match why {
                DaemonWhy::Unreachable(path) => write!(
                    f,
                    "{op}: iwarpd at {path} cannot be reached (it exited or was restarted); \
                     open the device again once it runs"
                ),
                DaemonWhy::Refused(why) => write!(f, "{op}: {why}"),
            },
        }
    }
}

impl std::error::Error for MemError {}

/// Why a work request whose completion goes to a future (the async methods of
/// [`Qp`](crate::Qp)) did not succeed.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum WcError {
    /// The request was not posted: the queue is full or the queue pair is closing.
    Post {
        /// What was asked for.
        op: WcOpcode,
        /// Why it was refused.
        error: PostError,
    },
    /// The request named memory it cannot use; it was not posted.
    Mem {
        /// What was asked for.
        op: WcOpcode,
        /// What is wrong with the memory.
        error: MemError,
    },
    /// The request completed with an error status (every posted request completes: when
    /// the queue pair ends, what is outstanding completes as flushed).
    Failed(Box<Completion>),
}

impl WcError {
    /// The operation.
    pub fn opcode(&self) -> WcOpcode {
        match self {
            Self::Post { op, .. } | Self::Mem { op, .. } => *op,
            Self::Failed(wc) => wc.opcode,
        }
    }

    /// The completion status, when the request completed.
    pub fn status(&self) -> Option<WcStatus> {
        self.completion().map(|wc| wc.status)
    }

    /// The Terminate that caused the failure, when one was sent or received.
    pub fn term(&self) -> Option<TermCode> {
        self.completion().and_then(|wc| wc.term)
    }

    /// The error completion, when the request completed.
    pub fn completion(&self) -> Option<&Completion> {
        match self {
            Self::Failed(wc) => Some(wc),
            _ => None,
        }
    }
}

/// What a status means and what to do about it.
fn explain(status: WcStatus) -> &'static str {
    match status {
        WcStatus::LocalLength => {
            "a local buffer is too short (a receive smaller than the message, or a Read sink \
             smaller than the source); post a larger buffer"
        }
        WcStatus::LocalProtection => {
            "local memory named by the request failed its checks (STag deregistered or \
             invalidated, range outside the region, or a missing LOCAL_WRITE/LOCAL_READ \
             right); check the Sge against its Mr"
        }
        WcStatus::LocalQpOperation => {
            "the request is not valid on this queue pair (for example a Read or Atomic with \
             an ORD of 0)"
        }
        WcStatus::Flushed => {
            "the queue pair ended before the request ran (its connection closed or failed, \
             or its device went away); how it ended says why (Qp::closed)"
        }
        WcStatus::RemoteAccess => {
            "the peer refused the access (its STag invalid or invalidated, the range outside \
             its buffer, or a missing right); check the RemoteBuf the peer advertised"
        }
        WcStatus::RemoteOperation => {
            "the peer reported an operation error (for example no receive posted, or too many \
             Reads in flight for its IRD)"
        }
        WcStatus::RemoteInvalidRequest => "the peer's response did not match the request",
        _ => "the request failed",
    }
}

impl fmt::Display for WcError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Post { op, error } => write!(f, "{op:?} not posted: {error}"),
            Self::Mem { op, error } => write!(f, "{op:?} not posted: {error}"),
            Self::Failed(wc) => {
                write!(
                    f,
                    "{:?} failed ({:?}): {}",
                    wc.opcode,
                    wc.status,
                    explain(wc.status)
                )?;
                if let Some(term) = wc.term {
                    write!(f, "; Terminate: {term}")?;
                }
                Ok(())
            }
        }
    }
}

impl std::error::Error for WcError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Post { error, .. } => Some(error),
            Self::Mem { error, .. } => Some(error),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rdmap::Queue;

    #[test]
    fn mem_errors_name_stag_offset_and_right() {
        let stag = STag::new(5, 1);
        let e = MemError::access(stag, 64, 8, 32, AccessError::Bounds);
        assert_eq!(
            e,
            MemError::OutOfBounds {
                stag,
                offset: 64,
                len: 8,
                region_len: 32
            }
        );
        let text = e.to_string();
        assert!(
            text.contains("0x00000501") && text.contains("[64, +8)"),
            "{text}"
        );
        let e = MemError::access(
            stag,
            3,
            1,
            32,
            AccessError::Rights {
                missing: Access::LOCAL_WRITE,
            },
        );
        assert!(e.to_string().contains("LOCAL_WRITE"), "{e}");
        assert_eq!(
            MemError::access(stag, 0, 1, 1, AccessError::InvalidStag),
            MemError::Invalid { stag }
        );
        assert_eq!(
            MemError::tpt("deregister", stag, TptError::NoSuchStag(stag)),
            MemError::Invalid { stag }
        );
        let busy = TptError::InUse {
            what: "bound windows",
            count: 1,
        };
        let e = MemError::tpt("deregister", stag, busy);
        assert!(e.to_string().contains("in use by 1 bound windows"), "{e}");
    }

    #[test]
    fn wc_error_carries_status_and_terminate() {
        let mut wc = Completion::new(0, Queue::Send, WcOpcode::Read, WcStatus::RemoteAccess);
        wc.term = Some(TermCode::INVALID_STAG);
        let e = WcError::Failed(Box::new(wc));
        assert_eq!(e.status(), Some(WcStatus::RemoteAccess));
        assert_eq!(e.term(), Some(TermCode::INVALID_STAG));
        assert_eq!(e.opcode(), WcOpcode::Read);
        let text = e.to_string();
        assert!(
            text.contains("Read failed") && text.contains("RemoteBuf"),
            "{text}"
        );
        assert!(text.contains("Terminate"), "{text}");
        let e = WcError::Post {
            op: WcOpcode::Send,
            error: PostError::QueueFull,
        };
        assert_eq!((e.status(), e.term()), (None, None));
        assert!(e.to_string().contains("queue full"), "{e}");
    }
}
