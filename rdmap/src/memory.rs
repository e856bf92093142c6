//! The seam between the stream and registered memory.
//!
//! The stream never owns memory. Every placement, every read of local data, every
//! invalidation, registration and bind it executes goes through [`Memory`], which the engine implements over its TPT (one view
//! per queue pair, so it knows the QP's protection domain) and tests implement over plain
//! vectors ([`crate::testing::VecMemory`]).
//!
//! An implementation runs the checks in a fixed order (valid entry, kind, protection domain
//! and queue pair association, tag instance, bounds, rights) and either performs the whole
//! access or none of it: a failed call leaves memory untouched.

use core::fmt;

use std::sync::Arc;

use bytes::BytesMut;
use shm::Region;

use ddp::{Access, DdpError, STag};

use crate::term::TermCode;
use crate::work::{Bind, FastReg, RecvWr};

/// A shared receive queue as one stream sees it: the receives it takes, oldest first,
/// when its own receive queue is empty ([`Stream::handle_input_srq`](crate::Stream::handle_input_srq)).
pub trait SharedRecv {
    /// The next receive, if any is posted.
    fn take(&mut self) -> Option<RecvWr>;
}

/// No shared receive queue.
#[derive(Copy, Clone, Debug, Default)]
pub struct NoSharedRecv;

impl SharedRecv for NoSharedRecv {
    fn take(&mut self) -> Option<RecvWr> {
        None
    }
}

impl SharedRecv for std::collections::VecDeque<RecvWr> {
    fn take(&mut self) -> Option<RecvWr> {
        self.pop_front()
    }
}

/// Registered memory as seen by one stream: placement of incoming data, reads of local
/// data for transmission, Atomics and the peer's invalidation. The work requests that only
/// change the table are [`LocalOps`].
pub trait Memory {
    /// Checks that `[to, to + len)` of `stag` may be accessed with every right in `access`,
    /// without touching it.
    fn check(&self, stag: STag, to: u64, len: u32, access: Access) -> Result<(), AccessError>;

    /// Copies `data` to `[to, to + data.len())` of `stag` after the checks for `access`.
    fn write(
        &mut self,
        stag: STag,
        to: u64,
        data: &[u8],
        access: Access,
    ) -> Result<(), AccessError>;

    /// Fills `dst` from `[to, to + dst.len())` of `stag` after the checks for `access`.
    fn read(
        &mut self,
        stag: STag,
        to: u64,
        dst: &mut [u8],
        access: Access,
    ) -> Result<(), AccessError>;

    /// Appends the `len` octets at `[to, to + len)` of `stag` to `dst` after the checks for
    /// `access`; on failure `dst` is unchanged. Lets the transmit path copy local data once,
    /// straight into an FPDU. The default zero-extends `dst` and calls
    /// [`read`](Self::read); implementations that can copy directly override it.
    fn read_append(
        &mut self,
        stag: STag,
        to: u64,
        len: usize,
        dst: &mut BytesMut,
        access: Access,
    ) -> Result<(), AccessError> {
        let start = dst.len();
        dst.resize(start + len, 0);
        let result = self.read(stag, to, &mut dst[start..], access);
        if result.is_err() {
            dst.truncate(start);
        }
        result
    }

    /// Where `[to, to + len)` of `stag` lies in shared registered memory, after the checks
    /// for `access`: the region and the offset in it, so that the transmit path can send
    /// the octets in place, read only when the socket takes them. `None` (the default) when
    /// the memory is not such a region; the stream then copies with
    /// [`read_append`](Self::read_append).
    fn in_place(
        &mut self,
        stag: STag,
        to: u64,
        len: usize,
        access: Access,
    ) -> Result<Option<(Arc<Region>, usize)>, AccessError> {
        let _ = (stag, to, len, access);
        Ok(None)
    }

    /// Runs a 64-bit read-modify-write on the 8 octets at `to` (little-endian in memory) with
    /// remote-atomic access, and returns the original value. `to` is already known to be
    /// 8-aligned.
    fn atomic(
        &mut self,
        stag: STag,
        to: u64,
        op: &mut dyn FnMut(u64) -> u64,
    ) -> Result<u64, AccessError>;

    /// Invalidates `stag` at the peer's request (Send with Invalidate): it must name a region
    /// or window associated with this stream that allows remote invalidation.
    fn invalidate(&mut self, stag: STag) -> Result<(), AccessError>;

    /// Called when the last segment of a tagged message that targeted `stag` was placed:
    /// the hook for one-touch windows. The default does nothing.
    fn message_placed(&mut self, stag: STag) {
        let _ = stag;
    }
}

/// The local operations of a queue pair: work requests that change the memory table and
/// put nothing on the wire. They run in send-queue order from
/// [`Stream::poll_transmit`](crate::Stream::poll_transmit), never because of a peer's
/// message, which is why [`Stream::handle_input`](crate::Stream::handle_input) takes a
/// [`Memory`] without them.
pub trait LocalOps {
    /// Invalidates `stag` for a Local Invalidate work request of this queue pair.
    fn local_invalidate(&mut self, stag: STag) -> Result<(), AccessError>;

    /// Executes a fast registration work request of this queue pair.
    fn fast_register(&mut self, fr: &FastReg) -> Result<(), AccessError>;

    /// Binds a type 2 memory window to this queue pair, for a bind work request.
    fn bind(&mut self, bind: &Bind) -> Result<(), AccessError>;

    /// True while the registration of `stag` is queued and not yet done (seed 003 §3.4:
    /// registration through a control queue). A send-queue request that names such an
    /// STag waits at the head of the queue, and every later request behind it, until it
    /// is done (the owner then lets the stream transmit again); if the registration
    /// fails, the request goes on and fails its local checks. By default nothing is
    /// pending.
    fn registration_pending(&self, stag: STag) -> bool {
        let _ = stag;
        false
    }
}

/// Placement and local operations together: what the transmit side needs.
pub trait MemoryOps: Memory + LocalOps {}

impl<T: Memory + LocalOps + ?Sized> MemoryOps for T {}

/// Why an access to registered memory failed.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum AccessError {
    /// No valid entry for the STag's index, the tag instance does not match, or the entry was
    /// invalidated.
    InvalidStag,
    /// The entry belongs to another protection domain or is bound to another queue pair.
    NotAssociated,
    /// The range runs outside the region.
    Bounds,
    /// `to + len` wraps past 2^64.
    ToWrap,
    /// The entry lacks a right the access needs.
    Rights {
        /// The rights that are missing.
        missing: Access,
    },
    /// The entry cannot be invalidated this way (for example a region that does not allow
    /// remote invalidation).
    CannotInvalidate,
}

impl AccessError {
    /// The access error for a range [`ddp::tagged_offset`] rejected: [`ToWrap`](Self::ToWrap)
    /// for a range past 2^64, [`Bounds`](Self::Bounds) otherwise.
    pub fn range(e: DdpError) -> Self {
        match e {
            DdpError::ToWrap => Self::ToWrap,
            _ => Self::Bounds,
        }
    }

    /// The Terminate code for an access by an incoming tagged message (RDMA Write, Read
    /// Response): DDP tagged-buffer errors (RFC 5041 §7.2), except missing rights, which DDP
    /// has no code for and which RDMAP reports as a Remote Protection "access rights
    /// violation" (RFC 5040 §4.8).
    pub fn tagged_term(self) -> TermCode {
        match self {
            Self::InvalidStag | Self::CannotInvalidate => TermCode::from_ddp(DdpError::InvalidStag),
            Self::NotAssociated => TermCode::from_ddp(DdpError::StagNotAssociated),
            Self::Bounds => TermCode::from_ddp(DdpError::BaseBounds),
            Self::ToWrap => TermCode::from_ddp(DdpError::ToWrap),
            Self::Rights { .. } => TermCode::ACCESS_RIGHTS,
        }
    }

    /// The Terminate code for an access requested by an RDMAP message (Read Request source,
    /// Atomic target): RDMAP Remote Protection errors (RFC 5040 §4.8).
    pub fn rdmap_term(self) -> TermCode {
        match self {
            Self::InvalidStag => TermCode::INVALID_STAG,
            Self::NotAssociated => TermCode::STAG_NOT_ASSOCIATED,
            Self::Bounds => TermCode::BASE_BOUNDS,
            Self::ToWrap => TermCode::TO_WRAP,
            Self::Rights { .. } => TermCode::ACCESS_RIGHTS,
            Self::CannotInvalidate => TermCode::PROT_CANNOT_INVALIDATE,
        }
    }

    /// The Terminate code for a failed Send with Invalidate: Remote Protection 0x09 when the
    /// STag is not this stream's to invalidate, Remote Operation 0x09 otherwise (as siw).
    pub fn invalidate_term(self) -> TermCode {
        match self {
            Self::NotAssociated | Self::Rights { .. } => TermCode::PROT_CANNOT_INVALIDATE,
            _ => TermCode::OP_CANNOT_INVALIDATE,
        }
    }
}

impl fmt::Display for AccessError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::InvalidStag => {
                f.write_str("invalid STag (no entry, stale instance or invalidated)")
            }
            Self::NotAssociated => {
                f.write_str("STag belongs to another protection domain or queue pair")
            }
            Self::Bounds => f.write_str("access outside the registered range"),
            Self::ToWrap => f.write_str("tagged offset plus length wraps 2^64"),
            Self::Rights { missing } => write!(f, "missing access rights {missing:?}"),
            Self::CannotInvalidate => f.write_str("STag cannot be invalidated"),
        }
    }
}

impl std::error::Error for AccessError {}
