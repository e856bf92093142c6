//! The memory TPT (translation and protection table) of the software RNIC.
//!
//! One [`Tpt`] per engine holds every protection domain, memory region and memory window;
//! every queue pair reaches it through its own [`QpMemory`] view, the [`rdmap::Memory`]
//! its stream uses. Region octets are a [`Storage`] (a `shm::Region`: a memfd mapping or
//! memory the application handed over without a copy; one `Arc` per region, aliased by its
//! windows, and held by the application too, which reads and writes it in place); tagged
//! data is copied once, from the caller's slice straight into that storage.
//!
//! # STags
//!
//! STag = `tag_index << 8 | tag_instance`. The index picks the table slot; the instance is
//! compared with the slot's. Indices start at 1 (index 0 is never used, so neither STag 0
//! nor STag 1, the RTR zero-length Write's, names an entry). A freed index is reused oldest
//! first, and its next entry answers to the old instance plus 1, so a stale STag fails as
//! invalid (until the 8-bit instance wraps after 256 reuses). Binds and fast registrations
//! set the instance named by the work request or the verb.
//!
//! # The ordered checks
//!
//! Every access runs, in order, and the first failure decides the [`AccessError`](rdmap::AccessError):
//!
//! | # | Check | Error |
//! |---|---|---|
//! | a | the index has an entry and it is valid (a window: bound) | `InvalidStag` |
//! | b | kind: a local access (`LOCAL_READ`/`LOCAL_WRITE`) names a region; windows serve remote access only | `InvalidStag` |
//! | c | the entry's protection domain is the requester's; a type 2 window is bound to the requesting queue pair | `NotAssociated` |
//! | d | the STag's instance is the entry's | `InvalidStag` |
//! | e | `to + len` does not wrap 2^64, then `[to, to + len)` lies inside the entry | `ToWrap`, `Bounds` |
//! | f | the entry has every right asked for | `Rights { missing }` |
//!
//! A failed access touches nothing. Regions are reachable locally and, with remote rights,
//! remotely; windows only remotely. Region addressing is virtual-address based
//! ([`Base::Va`]: `[va, va + len)`) or zero based ([`Base::ZeroBased`]: `[0, len)`);
//! windows use their region's tagged offsets.
//!
//! # Windows
//!
//! A bind needs, in this order: a valid region, of the window's domain, under its current
//! instance, the window range inside the region, the region's [`BIND`](ddp::Access::BIND) right, and
//! window rights no wider than the region's. Type 1 windows ([`MwType::One`]) are bound by
//! [`Tpt::bind_mw`] (rebinding replaces the old binding), unbound by
//! [`Tpt::invalidate_local`], and usable by every queue pair of the domain. Type 2 windows
//! are bound by a bind work request (`LocalOps::bind` on a queue pair's view), must be
//! unbound first, and are usable only through that queue pair. Invalidating a region
//! unbinds its windows; deregistering a region with bound windows fails.
//!
//! # Invalidation
//!
//! * Local Invalidate work request (`LocalOps::local_invalidate`): fast-registration regions
//!   and type 2 windows (bound to this queue pair, if bound) of the queue pair's domain.
//!   Ordinary regions are deregistered and type 1 windows unbound by the verb instead
//!   (`CannotInvalidate`). Invalidating an already invalid entry is accepted.
//! * Remote invalidate, Send with Invalidate (`Memory::invalidate`), following the iWARP
//!   and IB verbs rules (only what the peer was handed for one use may be invalidated by
//!   it): allowed for a **type 2 window bound to this queue pair** and for a
//!   **fast-registration region of this domain with at least one remote right** (a region
//!   with no remote right was never the peer's to name). Refusals and their Terminates
//!   ([`AccessError::invalidate_term`](rdmap::AccessError::invalidate_term)): not valid or stale instance -> `InvalidStag`
//!   (Remote Operation 0x09); another domain, or a type 2 window bound to another queue
//!   pair -> `NotAssociated` (Remote Protection 0x09); a fast-registration region without
//!   remote rights -> `Rights` (Remote Protection 0x09); an ordinary region or a type 1
//!   window -> `CannotInvalidate` (Remote Operation 0x09), as siw answers `-EINVAL`.
//! * [`Tpt::deregister`] removes the entry at once and hands back the table's `Arc` of the
//!   storage; work that already passed the checks holds `Arc` clones while it copies, and
//!   the octets go back to the system when the last clone is dropped.
//!
//! # One-touch windows and Table D under kernel TCP
//!
//! A window bound with `one_touch` serves exactly one RDMA Write message. The stream calls
//! `Memory::message_placed` once the **last** segment of a Write has been placed; the
//! window is then unbound at once ([`EntryInfo::touched`] records it), and any later
//! segment naming it fails check (a) as `InvalidStag` (Terminate DDP tagged-buffer error
//! 0x00). One-touch counts RDMA Writes only: Read Responses land in local regions, and
//! Read Request sources and atomic targets are not one-touch (seed 001 §3.1).
//!
//! Seed 001's Table D decides per tagged segment from the Last flag, the One Touch and
//! Touched bits and the segment's TCP sequence number relative to `rcv_nxt` and the
//! receive window. This engine reads TCP bytes from a kernel socket, which hands them over
//! exactly once and in order, after its own window and duplicate checks. So:
//!
//! * Row 1 (Last = 0: place) and row 2 (Last = 1, not one-touch: place) happen as written.
//! * Row 4 (Last = 1, one-touch, not touched, in order: place and invalidate) is the only
//!   one-touch row that happens: every segment is in order by construction, so
//!   `seg_last_sn == rcv_nxt - 1` always holds and no sequence number is tracked.
//! * Row 5 (Last segment out of order inside the window: place, set Touched, store the
//!   SN, invalidate when the stream lines up) cannot happen: there is no out-of-order
//!   segment, hence no touched-but-valid state, no stored SN and no pending list.
//! * Row 6 (outside the receive window: drop silently) cannot happen: the kernel drops
//!   such bytes before the engine sees them.
//! * Row 3 (Last = 1 on a touched entry: invalidate and Terminate) cannot happen in its
//!   table form, because an entry is never touched while still valid. Its intent holds
//!   and is detected earlier: the second message's first segment, Last or not, fails
//!   check (a) and is answered by a Terminate with nothing placed. Because messages never
//!   interleave on an in-order stream, no byte of a second message is placed either, a
//!   guarantee the seed's out-of-order design does not give.

mod entry;
mod error;
mod ids;
mod image;
mod space;
mod storage;
mod table;
mod verbs;
mod view;

pub use entry::{EntryInfo, EntryKind};
pub use error::TptError;
pub use ids::{Base, MwType, PdId, QpId};
pub(crate) use image::EntryImage;
pub use storage::Storage;
pub(crate) use table::TakenPd;
pub use verbs::Tpt;
pub use view::QpMemory;

/// The highest STag index this process has handed out so far: what a successor process
/// must not hand out itself while entries may still move in from this one.
pub fn index_high_water() -> u32 {
    space::lock(space::IndexSpace::process()).high_water()
}

/// STag indices up to `last` that this process has not handed out are another
/// process's (the one handing its domains over, whose [`index_high_water`] this is): they
/// are kept for its entries, which keep their STags when they move in, and never handed
/// out to new ones here.
pub fn hold_indices_through(last: u32) {
    space::lock(space::IndexSpace::process()).hold_through(last);
}

#[cfg(test)]
mod tests;
