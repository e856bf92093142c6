//! The memory TPT (translation and protection table) of the software RNIC.
//!
//! One [`Tpt`] per engine holds every protection domain, memory region and memory window;
//! every queue pair reaches it through its own [`QpMemory`] view, the [`rdmap::Memory`]
//! its stream uses. Region octets are a [`Region`] (a `shm::Region`: a memfd mapping or
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
//! Every access runs, in order, and the first failure decides the [`rdmap::AccessError`]:
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
//! instance, the window range inside the region, and the region rights the window's need
//! ([`Access::needed_to_bind`](ddp::Access::needed_to_bind): BIND, and LOCAL_WRITE for a
//! window the peer may write, as the RDMAC and InfiniBand verbs have it). Type 1 windows ([`MwType::One`]) are bound by
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
mod octets;
mod space;
mod table;
mod view;

pub use entry::{EntryInfo, EntryKind};
pub use error::TptError;
pub use ids::{Base, MwType, PdId, QpId};
pub(crate) use image::EntryImage;
pub(crate) use table::TakenPd;
pub use view::QpMemory;

use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};

use ddp::{Access, STag};
use rdmap::AccessError;

use self::entry::{Binding, Body, Entry, MrEntry, Requester, Span, Window};
use self::octets::bounds;
use self::table::Table;
use shm::Region;

/// The memory TPT of one engine: protection domains, regions and windows, shared by every
/// queue pair (`Send + Sync`; one `RwLock` around the table, held only for lookups and
/// state changes, never while octets are copied).
///
/// Verbs that the application calls directly live here and fail with [`TptError`]. Work
/// requests and incoming messages of a queue pair come in through that queue pair's
/// [`QpMemory`] view ([`Tpt::view`]) and fail with [`AccessError`].
pub struct Tpt {
    table: RwLock<Table>,
    /// How many registrations are pending, read without the lock on every post.
    pending: AtomicUsize,
}

impl Tpt {
    /// An empty table that may hold as many entries as there are tag indices.
    pub fn new() -> Self {
        Self::with_max_entries(STag::MAX_INDEX)
    }

    /// An empty table holding at most `max_entries` regions and windows (capped at
    /// `STag::MAX_INDEX`). Tag indices come from one space per process, shared by every
    /// table: an STag names at most one entry in the process.
    pub fn with_max_entries(max_entries: u32) -> Self {
        Self {
            table: RwLock::new(Table::new(max_entries)),
            pending: AtomicUsize::new(0),
        }
    }

    /// A view for one queue pair of domain `pd`: what its [`rdmap::Stream`] uses as
    /// [`rdmap::Memory`].
    pub fn view(self: &Arc<Self>, pd: PdId, qp: QpId) -> QpMemory {
        QpMemory::new(Arc::clone(self), pd, qp)
    }

    /// Allocates a protection domain.
    pub fn alloc_pd(&self) -> PdId {
        self.table_mut().alloc_pd()
    }

    /// True if `pd` is a protection domain of this table.
    pub fn has_pd(&self, pd: PdId) -> bool {
        self.table().check_pd(pd).is_ok()
    }

    /// Deallocates a protection domain; fails with [`TptError::InUse`] while regions or
    /// windows of it exist.
    pub fn dealloc_pd(&self, pd: PdId) -> Result<(), TptError> {
        self.table_mut().dealloc_pd(pd)
    }

    /// Registers `data` as a region of `pd` with `access`, addressed from `base`, and
    /// returns its STag: [`register_region`](Self::register_region) over the vector's own
    /// octets, taken over without a copy.
    pub fn register(
        &self,
        pd: PdId,
        data: Vec<u8>,
        base: Base,
        access: Access,
    ) -> Result<STag, TptError> {
        self.register_region(pd, Arc::new(Region::adopt(data)), base, access)
    }

    /// Allocates `len` zeroed octets of shared memory (a memfd mapping, whose pages go
    /// back to the system when the region is deregistered) and registers them as
    /// [`register_region`](Self::register_region) does.
    pub fn alloc_region(
        &self,
        pd: PdId,
        len: usize,
        base: Base,
        access: Access,
    ) -> Result<STag, TptError> {
        let storage = Region::alloc(len).map_err(|_| TptError::NoMemory { len })?;
        self.register_region(pd, Arc::new(storage), base, access)
    }

    /// Registers `storage` as a region of `pd` with `access`, addressed from `base`, and
    /// returns its STag. The region is valid at once, reachable locally and (with remote
    /// rights) remotely; the caller keeps its own `Arc` to reach the octets in place.
    pub fn register_region(
        &self,
        pd: PdId,
        storage: Arc<Region>,
        base: Base,
        access: Access,
    ) -> Result<STag, TptError> {
        let region = MrEntry::new(storage, base, access)?;
        self.table_mut().insert(pd, Body::Region(region))
    }

    /// The first half of a registration through the control queue (seed 003's pipelined
    /// registration): the region gets its STag now but stays invalid, marked pending,
    /// until [`finish_pending`](Self::finish_pending). Every access to it fails meanwhile
    /// (the peer's as an invalid STag); the engine holds work requests that name it.
    pub fn register_pending(
        &self,
        pd: PdId,
        storage: Arc<Region>,
        base: Base,
        access: Access,
    ) -> Result<STag, TptError> {
        let region = MrEntry::new(storage, base, access)?;
        self.enter_pending(region, |t, body| t.insert(pd, body))
    }

    /// Enters `region`, invalid and marked pending, with `insert`.
    fn enter_pending(
        &self,
        mut region: MrEntry,
        insert: impl FnOnce(&mut Table, Body) -> Result<STag, TptError>,
    ) -> Result<STag, TptError> {
        region.valid = false;
        let mut t = self.table_mut();
        let stag = insert(&mut t, Body::Region(region))?;
        t.set_pending(stag.index());
        self.pending.store(t.pending(), Ordering::Release);
        Ok(stag)
    }

    /// The second half: region `stag`, pending, becomes valid. False if it is no longer
    /// there (deregistered meanwhile) or was not pending.
    pub fn finish_pending(&self, stag: STag) -> bool {
        let mut t = self.table_mut();
        let ours = t
            .entry(stag)
            .is_some_and(|e| e.instance == stag.instance() && t.is_pending(stag.index()));
        if !ours || !t.clear_pending(stag.index()) {
            return false;
        }
        self.pending.store(t.pending(), Ordering::Release);
        if let Some(Entry {
            body: Body::Region(r),
            ..
        }) = t.entry_mut(stag)
        {
            r.valid = true;
        }
        true
    }

    /// Reserves an STag for a registration whose request has not arrived yet (a local
    /// client's queued registration through iwarpd): a pending placeholder of no domain,
    /// which every access fails and which holds the work requests naming it, until
    /// [`register_reserved`](Self::register_reserved) fills it.
    pub fn reserve_pending(&self) -> Result<STag, TptError> {
        let placeholder = MrEntry::new(Arc::new(Region::empty()), Base::ZeroBased, Access::NONE)?;
        self.enter_pending(placeholder, Table::insert_unowned)
    }

    /// Registers `storage` as a region of `pd` under `stag`, reserved by
    /// [`reserve_pending`](Self::reserve_pending) and still pending: valid from now on.
    pub fn register_reserved(
        &self,
        stag: STag,
        pd: PdId,
        storage: Arc<Region>,
        base: Base,
        access: Access,
    ) -> Result<(), TptError> {
        let region = MrEntry::new(storage, base, access)?;
        let mut t = self.table_mut();
        let reserved = t
            .entry(stag)
            .is_some_and(|e| e.instance == stag.instance() && e.pd.get() == 0)
            && t.is_pending(stag.index());
        if !reserved {
            return Err(TptError::NoSuchStag(stag));
        }
        t.adopt(stag.index(), pd, Body::Region(region))?;
        t.clear_pending(stag.index());
        self.pending.store(t.pending(), Ordering::Release);
        Ok(())
    }

    /// True if `stag` names a region whose registration is still queued.
    pub fn is_pending(&self, stag: STag) -> bool {
        let t = self.table();
        t.pending() > 0
            && t.is_pending(stag.index())
            && t.entry(stag).is_some_and(|e| e.instance == stag.instance())
    }

    /// True if any registration is still queued (a cheap check before
    /// [`is_pending`](Self::is_pending)).
    pub fn has_pending(&self) -> bool {
        self.pending.load(Ordering::Acquire) > 0
    }

    /// Allocates a region of `max_len` zeroed octets (a memfd mapping) for fast
    /// registration: [`alloc_fast_reg_region`](Self::alloc_fast_reg_region).
    pub fn alloc_fast_reg(&self, pd: PdId, max_len: usize) -> Result<STag, TptError> {
        let storage = Region::alloc(max_len).map_err(|_| TptError::NoMemory { len: max_len })?;
        self.alloc_fast_reg_region(pd, Arc::new(storage))
    }

    /// Makes `storage` a region for fast registration, at most `storage.len()` octets. It
    /// is invalid until a fast registration work request ([`rdmap::FastReg`]) of a queue
    /// pair of `pd` arms it with an instance, tagged offset, length and rights.
    pub fn alloc_fast_reg_region(&self, pd: PdId, storage: Arc<Region>) -> Result<STag, TptError> {
        let max_len = storage.len();
        let mut region = MrEntry::new(storage, Base::ZeroBased, Access::NONE)?;
        region.valid = false;
        region.span.len = 0;
        region.fast_reg = Some(max_len as u64);
        self.table_mut().insert(pd, Body::Region(region))
    }

    /// Deregisters a region (ordinary or fast-registration). The entry is gone at once:
    /// every later access fails, and the index is reused with a bumped instance. Fails with
    /// [`TptError::InUse`] while windows are bound to it.
    ///
    /// Work already past the checks may still be copying: it holds clones of the returned
    /// `Arc` (the strong count tells how many, besides the caller's own handles).
    pub fn deregister(&self, stag: STag) -> Result<Arc<Region>, TptError> {
        let mut t = self.table_mut();
        let e = t.lookup(stag)?;
        let Body::Region(r) = &e.body else {
            return Err(TptError::WrongKind {
                stag,
                expected: "a memory region",
            });
        };
        Table::check_instance(e, stag)?;
        if !r.windows.is_empty() {
            return Err(TptError::InUse {
                what: "bound windows",
                count: r.windows.len(),
            });
        }
        let removed = t.remove(stag.index()).map(|e| e.body);
        self.pending.store(t.pending(), Ordering::Release);
        match removed {
            Some(Body::Region(r)) => Ok(r.storage),
            _ => Err(TptError::NoSuchStag(stag)),
        }
    }

    /// Allocates an unbound memory window of `pd`.
    pub fn alloc_mw(&self, pd: PdId, kind: MwType) -> Result<STag, TptError> {
        let window = Window {
            ty: kind,
            binding: None,
            touched: false,
        };
        self.table_mut().insert(pd, Body::Window(window))
    }

    /// Binds type 1 window `mw` to `[to, to + len)` of region `mr` (in the region's tagged
    /// offsets) with `access`, rebinding it if it is bound. The region must be valid, of
    /// the window's domain, carry [`Access::BIND`] and every right in `access`. With
    /// `one_touch` the window invalidates itself once the first RDMA Write that targets it
    /// has been placed. Returns the window's STag under its new instance (`new_instance`,
    /// or the current one plus 1).
    #[allow(clippy::too_many_arguments)]
    pub fn bind_mw(
        &self,
        mw: STag,
        mr: STag,
        to: u64,
        len: u64,
        access: Access,
        one_touch: bool,
        new_instance: Option<u8>,
    ) -> Result<STag, TptError> {
        let mut t = self.table_mut();
        let e = t.lookup(mw)?;
        let Body::Window(Window {
            ty: MwType::One, ..
        }) = &e.body
        else {
            return Err(TptError::WrongKind {
                stag: mw,
                expected: "a type 1 memory window (type 2 windows are bound by a work request)",
            });
        };
        Table::check_instance(e, mw)?;
        let pd = e.pd;
        let instance = new_instance.unwrap_or_else(|| e.instance.wrapping_add(1));
        let (span, storage) = t.bind_target(mr, pd, to, len, access)?;
        t.unbind(mw.index());
        let binding = Binding {
            parent: mr,
            storage,
            span,
            access,
            one_touch,
            qp: None,
        };
        t.attach(mw.index(), binding, instance);
        Ok(mw.with_instance(instance))
    }

    /// Invalidates `stag` for the application: unbinds a window (type 1 or 2), or makes a
    /// fast-registration region invalid (and unbinds the windows bound to it). Ordinary
    /// regions are deregistered instead. Invalidating an invalid entry is not an error.
    pub fn invalidate_local(&self, stag: STag) -> Result<(), TptError> {
        let mut t = self.table_mut();
        let e = t.lookup(stag)?;
        if let Body::Region(MrEntry { fast_reg: None, .. }) = e.body {
            return Err(TptError::WrongKind {
                stag,
                expected: "a window or a fast-registration region (deregister other regions)",
            });
        }
        Table::check_instance(e, stag)?;
        t.invalidate(stag.index());
        Ok(())
    }

    /// Deallocates a window, unbinding it first if it is bound.
    pub fn dealloc_mw(&self, mw: STag) -> Result<(), TptError> {
        let mut t = self.table_mut();
        let e = t.lookup(mw)?;
        if !matches!(e.body, Body::Window(_)) {
            return Err(TptError::WrongKind {
                stag: mw,
                expected: "a memory window",
            });
        }
        Table::check_instance(e, mw)?;
        t.unbind(mw.index());
        t.remove(mw.index());
        Ok(())
    }

    /// Removes every window and region of `pd` (windows unbound first, whatever their
    /// instances now), then the domain itself: what a local client that went away held.
    /// Returns how many entries were removed.
    pub fn release_pd(&self, pd: PdId) -> usize {
        let mut t = self.table_mut();
        let mut of_pd: Vec<(u32, bool)> = t
            .entries()
            .filter(|(_, e)| e.pd == pd)
            .map(|(i, e)| (i, matches!(e.body, Body::Window(_))))
            .collect();
        // Windows first: a region with windows bound to it cannot go.
        of_pd.sort_by_key(|&(_, window)| !window);
        for &(i, window) in &of_pd {
            if window {
                t.unbind(i);
            }
            t.remove(i);
        }
        let _ = t.dealloc_pd(pd);
        self.pending.store(t.pending(), Ordering::Release);
        of_pd.len()
    }

    /// Takes protection domain `pd` out of this table with every region and window of it,
    /// for [`put_pd`](Self::put_pd) into another engine's table (live migration): their
    /// STags stay reserved meanwhile, and stay the same there.
    pub(crate) fn take_pd(&self, pd: PdId) -> Result<TakenPd, TptError> {
        self.table_mut().take_pd(pd)
    }

    /// Puts a domain taken from another table into this one; on failure hands it back.
    pub(crate) fn put_pd(&self, taken: TakenPd) -> Result<(), (TptError, TakenPd)> {
        self.table_mut().put_pd(taken)
    }

    /// The most regions and windows it may hold.
    pub fn max_entries(&self) -> usize {
        self.table().max_entries
    }

    /// Puts a domain that crossed from another process into this table as a new domain
    /// (see `image`).
    pub(crate) fn put_image(
        &self,
        entries: Vec<EntryImage>,
        storages: &[Arc<Region>],
        qp: impl Fn(u32) -> Option<QpId>,
    ) -> Result<PdId, TptError> {
        self.table_mut().put_image(entries, storages, qp)
    }

    /// Drops a domain taken out of this table for good (it moved to another process):
    /// its indices go back to the space.
    pub(crate) fn forget_pd(&self, taken: TakenPd) {
        self.table_mut().forget(taken);
    }

    /// Unbinds every type 2 window bound to `qp` (for a destroyed queue pair); returns how
    /// many.
    pub fn release_qp(&self, qp: QpId) -> usize {
        let mut t = self.table_mut();
        let bound: Vec<u32> = t
            .entries()
            .filter(|(_, e)| match &e.body {
                Body::Window(w) => w.binding.as_ref().is_some_and(|b| b.qp == Some(qp)),
                Body::Region(_) => false,
            })
            .map(|(i, _)| i)
            .collect();
        for &mw in &bound {
            t.unbind(mw);
        }
        bound.len()
    }

    /// The application reads `dst.len()` octets at `to` of region `stag` of `pd`, with the
    /// ordered checks for [`Access::LOCAL_READ`].
    pub fn read(&self, pd: PdId, stag: STag, to: u64, dst: &mut [u8]) -> Result<(), AccessError> {
        let who = Requester { pd, qp: None };
        let (storage, off) = self.resolve(who, stag, to, dst.len() as u64, Access::LOCAL_READ)?;
        storage.read_at(off, dst).map_err(bounds)
    }

    /// The application writes `src` at `to` of region `stag` of `pd`, with the ordered
    /// checks for [`Access::LOCAL_WRITE`].
    pub fn write(&self, pd: PdId, stag: STag, to: u64, src: &[u8]) -> Result<(), AccessError> {
        let who = Requester { pd, qp: None };
        let (storage, off) = self.resolve(who, stag, to, src.len() as u64, Access::LOCAL_WRITE)?;
        storage.write_at(off, src).map_err(bounds)
    }

    /// A snapshot of the entry `stag` names (`None` if its index is free or it answers to
    /// another instance).
    pub fn info(&self, stag: STag) -> Option<EntryInfo> {
        let t = self.table();
        let e = t.entry(stag).filter(|e| e.instance == stag.instance())?;
        Some(e.info(stag))
    }

    /// The number of live entries (regions and windows).
    pub fn len(&self) -> usize {
        self.table().len()
    }

    /// True if no region or window exists.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Runs the ordered checks and returns the storage (an in-flight clone) and offset.
    fn resolve(
        &self,
        who: Requester,
        stag: STag,
        to: u64,
        len: u64,
        access: Access,
    ) -> Result<(Arc<Region>, usize), AccessError> {
        let t = self.table();
        let e = t.entry(stag).ok_or(AccessError::InvalidStag)?;
        let (storage, off) = e.check(stag, who, to, len, access)?;
        Ok((Arc::clone(storage), off))
    }

    fn table(&self) -> RwLockReadGuard<'_, Table> {
        self.table.read().unwrap_or_else(PoisonError::into_inner)
    }

    fn table_mut(&self) -> RwLockWriteGuard<'_, Table> {
        self.table.write().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Default for Tpt {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for Tpt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Tpt").field("entries", &self.len()).finish()
    }
}

/// The span a fast registration arms: `[to, to + len)` over the first `len` octets.
fn fast_reg_span(to: u64, len: u64, max_len: u64) -> Result<Span, AccessError> {
    ddp::tagged_offset(to, len, to, len).map_err(AccessError::range)?;
    if len > max_len {
        return Err(AccessError::Bounds);
    }
    Ok(Span { to, len, offset: 0 })
}

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
