//! The entry table behind the TPT lock: protection domain bookkeeping, the entries by tag
//! index (indices come from the process's [`IndexSpace`]), and the window/region links.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use ddp::{Access, STag};

use super::entry::{Binding, Body, Entry, Span};
use super::error::TptError;
use super::ids::PdId;
use super::space::{self, IndexSpace};
use shm::Region;

/// Entries per leaf of the table: a table holds leaves only where its indices are.
const LEAF: usize = 256;

/// The next protection domain number, process-wide like tag indices, so that a domain
/// keeps its number when it moves to another engine.
static NEXT_PD: AtomicU32 = AtomicU32::new(1);

/// Every entry of one TPT, found by tag index in two steps (a leaf of [`LEAF`] entries,
/// then the entry), as a hardware TPT is paged. Index 0 is never used, so STag 0 and
/// STag 1 (used by the RTR zero-length Write) never name an entry.
#[derive(Debug)]
pub(super) struct Table {
    leaves: Vec<Option<Box<[Option<Entry>]>>>,
    /// Where indices come from and go back to.
    pub(super) space: &'static Mutex<IndexSpace>,
    /// Live entries, and the most this table may hold.
    pub(super) live: usize,
    pub(super) max_entries: usize,
    /// Live protection domains and how many entries each holds.
    pub(super) pds: HashMap<PdId, usize>,
    /// Regions whose registration is queued on the control queue and not done yet.
    pending: HashSet<u32>,
}

/// A protection domain taken out of one table with every entry it holds, their tag
/// indices still taken (see [`Table::take_pd`]).
#[derive(Debug)]
pub(crate) struct TakenPd {
    pub(super) pd: PdId,
    pub(super) entries: Vec<(u32, Entry)>,
}

impl TakenPd {
    /// How many regions and windows it holds.
    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }
}

impl Table {
    /// An empty table holding at most `max_entries` entries, its indices from the
    /// process's space.
    pub(super) fn new(max_entries: u32) -> Self {
        Self::with_space(max_entries, IndexSpace::process())
    }

    /// An empty table whose indices come from `space`.
    pub(super) fn with_space(max_entries: u32, space: &'static Mutex<IndexSpace>) -> Self {
        Self {
            leaves: Vec::new(),
            space,
            live: 0,
            max_entries: max_entries.min(STag::MAX_INDEX) as usize,
            pds: HashMap::new(),
            pending: HashSet::new(),
        }
    }

    /// A new protection domain (numbers start at 1, are unique in the process and are not
    /// reused until they wrap).
    pub(super) fn alloc_pd(&mut self) -> PdId {
        loop {
            let pd = PdId::new(NEXT_PD.fetch_add(1, Ordering::Relaxed));
            if pd.get() == 0 {
                continue;
            }
            if let std::collections::hash_map::Entry::Vacant(slot) = self.pds.entry(pd) {
                slot.insert(0);
                return pd;
            }
        }
    }

    /// Removes an empty protection domain.
    pub(super) fn dealloc_pd(&mut self, pd: PdId) -> Result<(), TptError> {
        match self.pds.get(&pd) {
            None => Err(TptError::NoSuchPd(pd)),
            Some(&count) if count > 0 => Err(TptError::InUse {
                what: "regions or windows",
                count,
            }),
            Some(_) => {
                self.pds.remove(&pd);
                Ok(())
            }
        }
    }

    /// Fails unless `pd` exists.
    pub(super) fn check_pd(&self, pd: PdId) -> Result<(), TptError> {
        if self.pds.contains_key(&pd) {
            Ok(())
        } else {
            Err(TptError::NoSuchPd(pd))
        }
    }

    /// Stores a new entry under a free index and returns its STag.
    pub(super) fn insert(&mut self, pd: PdId, body: Body) -> Result<STag, TptError> {
        self.check_pd(pd)?;
        if self.live >= self.max_entries {
            return Err(TptError::Exhausted);
        }
        let stag = space::lock(self.space).take().ok_or(TptError::Exhausted)?;
        let entry = Entry {
            pd,
            instance: stag.instance(),
            body,
        };
        *self.place(stag.index()) = Some(entry);
        self.live += 1;
        *self.pds.entry(pd).or_default() += 1;
        Ok(stag)
    }

    /// Stores `body` under a free index with no domain (domain 0, which no domain has):
    /// a placeholder until [`adopt`](Self::adopt) gives it one.
    pub(super) fn insert_unowned(&mut self, body: Body) -> Result<STag, TptError> {
        if self.live >= self.max_entries {
            return Err(TptError::Exhausted);
        }
        let stag = space::lock(self.space).take().ok_or(TptError::Exhausted)?;
        let entry = Entry {
            pd: PdId::new(0),
            instance: stag.instance(),
            body,
        };
        *self.place(stag.index()) = Some(entry);
        self.live += 1;
        Ok(stag)
    }

    /// Gives the placeholder at `index` the domain `pd` and the body `body`.
    pub(super) fn adopt(&mut self, index: u32, pd: PdId, body: Body) -> Result<(), TptError> {
        self.check_pd(pd)?;
        let e = self
            .entry_at_mut(index)
            .filter(|e| e.pd.get() == 0)
            .ok_or_else(|| TptError::NoSuchStag(STag::new(index, 0)))?;
        e.pd = pd;
        e.body = body;
        *self.pds.entry(pd).or_default() += 1;
        Ok(())
    }

    /// Removes an entry and frees its index: the next entry there answers to a bumped
    /// instance, so STags of the removed entry never match again (until the 8-bit
    /// instance wraps).
    pub(super) fn remove(&mut self, index: u32) -> Option<Entry> {
        let entry = self.cell(index)?.take()?;
        self.prune(index);
        self.pending.remove(&index);
        space::lock(self.space).release(index, entry.instance);
        self.live -= 1;
        if let Some(count) = self.pds.get_mut(&entry.pd) {
            *count = count.saturating_sub(1);
        }
        Some(entry)
    }

    /// Marks the region at `index` as waiting for its registration.
    pub(super) fn set_pending(&mut self, index: u32) {
        self.pending.insert(index);
    }

    /// Clears the pending mark of `index`; false if it had none.
    pub(super) fn clear_pending(&mut self, index: u32) -> bool {
        self.pending.remove(&index)
    }

    /// True if `index` waits for its registration.
    pub(super) fn is_pending(&self, index: u32) -> bool {
        self.pending.contains(&index)
    }

    /// How many regions wait for their registration.
    pub(super) fn pending(&self) -> usize {
        self.pending.len()
    }

    /// Takes protection domain `pd` out of this table with every region and window of it.
    /// Their indices stay taken in the space: the entries keep their STags wherever
    /// [`put_pd`](Self::put_pd) puts them next.
    pub(super) fn take_pd(&mut self, pd: PdId) -> Result<TakenPd, TptError> {
        self.check_pd(pd)?;
        let indices: Vec<u32> = self
            .entries()
            .filter(|(_, e)| e.pd == pd)
            .map(|(i, _)| i)
            .collect();
        let pending = indices.iter().filter(|i| self.pending.contains(i)).count();
        if pending > 0 {
            return Err(TptError::InUse {
                what: "registrations still queued",
                count: pending,
            });
        }
        let entries: Vec<(u32, Entry)> = indices
            .into_iter()
            .filter_map(|i| Some((i, self.cell(i)?.take()?)))
            .collect();
        for (i, _) in &entries {
            self.prune(*i);
        }
        self.live -= entries.len();
        self.pds.remove(&pd);
        Ok(TakenPd { pd, entries })
    }

    /// Gives the indices of a domain taken out for good back to the space.
    pub(super) fn forget(&mut self, taken: TakenPd) {
        let mut space = space::lock(self.space);
        for (index, entry) in taken.entries {
            space.release(index, entry.instance);
        }
    }

    /// Puts a domain taken out of another table into this one, every entry under its
    /// STag. Fails, handing the domain back, if this table has a domain of that number
    /// already or no room for its entries.
    pub(super) fn put_pd(&mut self, taken: TakenPd) -> Result<(), (TptError, TakenPd)> {
        if self.pds.contains_key(&taken.pd) {
            return Err((
                TptError::InUse {
                    what: "the protection domain number",
                    count: 1,
                },
                taken,
            ));
        }
        if self.live + taken.entries.len() > self.max_entries {
            return Err((TptError::Exhausted, taken));
        }
        let count = taken.entries.len();
        for (index, entry) in taken.entries {
            *self.place(index) = Some(entry);
        }
        self.live += count;
        self.pds.insert(taken.pd, count);
        Ok(())
    }

    /// The entry at `stag`'s index, whatever its instance and state.
    pub(super) fn entry(&self, stag: STag) -> Option<&Entry> {
        self.entry_at(stag.index())
    }

    /// Mutable access to the entry at `stag`'s index.
    pub(super) fn entry_mut(&mut self, stag: STag) -> Option<&mut Entry> {
        self.entry_at_mut(stag.index())
    }

    /// The entry at `stag`'s index, or [`TptError::NoSuchStag`].
    pub(super) fn lookup(&self, stag: STag) -> Result<&Entry, TptError> {
        self.entry(stag).ok_or(TptError::NoSuchStag(stag))
    }

    /// Fails with [`TptError::StaleStag`] unless `stag` carries the entry's instance.
    pub(super) fn check_instance(entry: &Entry, stag: STag) -> Result<(), TptError> {
        if stag.instance() == entry.instance {
            Ok(())
        } else {
            Err(TptError::StaleStag {
                given: stag,
                current: stag.with_instance(entry.instance),
            })
        }
    }

    /// The region-side checks of a window bind, in order: valid, kind, protection domain,
    /// instance, bounds, then the region's rights ([`Access::needed_to_bind`]: BIND, and
    /// LOCAL_WRITE for a window the peer may write). Returns what the window will expose.
    pub(super) fn bind_target(
        &self,
        mr: STag,
        pd: PdId,
        to: u64,
        len: u64,
        access: Access,
    ) -> Result<(Span, Arc<Region>), TptError> {
        let e = self.lookup(mr)?;
        if !e.is_valid() {
            return Err(TptError::NotValid(mr));
        }
        let Body::Region(r) = &e.body else {
            return Err(TptError::WrongKind {
                stag: mr,
                expected: "a memory region",
            });
        };
        if e.pd != pd {
            return Err(TptError::PdMismatch {
                expected: pd,
                found: e.pd,
            });
        }
        Self::check_instance(e, mr)?;
        let span = r.span.sub(to, len)?;
        let missing = access.needed_to_bind().difference(r.access);
        if !missing.is_empty() {
            return Err(TptError::Rights { missing });
        }
        Ok((span, Arc::clone(&r.storage)))
    }

    /// Binds window `mw` (which must be unbound) under `instance` and records it in its
    /// region.
    pub(super) fn attach(&mut self, mw: u32, binding: Binding, instance: u8) {
        let parent = binding.parent.index();
        if let Some(e) = self.entry_at_mut(mw)
            && let Body::Window(w) = &mut e.body
        {
            w.binding = Some(binding);
            w.touched = false;
            e.instance = instance;
        }
        if let Some(Entry {
            body: Body::Region(r),
            ..
        }) = self.entry_at_mut(parent)
        {
            r.windows.push(mw);
        }
    }

    /// Unbinds window `mw`; true if it was bound. Its instance stays, so its STag fails as
    /// invalid until the next bind gives it a new one.
    pub(super) fn unbind(&mut self, mw: u32) -> bool {
        let binding = match self.entry_at_mut(mw) {
            Some(Entry {
                body: Body::Window(w),
                ..
            }) => w.binding.take(),
            _ => None,
        };
        let Some(b) = binding else {
            return false;
        };
        if let Some(Entry {
            body: Body::Region(r),
            ..
        }) = self.entry_at_mut(b.parent.index())
        {
            r.windows.retain(|&i| i != mw);
        }
        true
    }

    /// Invalidates the entry at `index`: a window is unbound; a region becomes invalid and
    /// every window bound to it is unbound with it (no window outlives its region's
    /// validity). Invalidating an invalid entry does nothing.
    pub(super) fn invalidate(&mut self, index: u32) {
        let windows = match self.entry_at_mut(index).map(|e| &mut e.body) {
            Some(Body::Region(r)) => {
                r.valid = false;
                core::mem::take(&mut r.windows)
            }
            Some(Body::Window(_)) => {
                self.unbind(index);
                return;
            }
            None => return,
        };
        for mw in windows {
            self.unbind(mw);
        }
    }

    /// Every entry with its index.
    pub(super) fn entries(&self) -> impl Iterator<Item = (u32, &Entry)> {
        self.leaves
            .iter()
            .enumerate()
            .filter_map(|(l, leaf)| Some((l, leaf.as_deref()?)))
            .flat_map(|(l, leaf)| {
                leaf.iter().enumerate().filter_map(move |(i, e)| {
                    Some((u32::try_from(l * LEAF + i).ok()?, e.as_ref()?))
                })
            })
    }

    /// Number of live entries.
    pub(super) fn len(&self) -> usize {
        self.live
    }

    fn entry_at(&self, index: u32) -> Option<&Entry> {
        let i = index as usize;
        self.leaves
            .get(i / LEAF)?
            .as_deref()?
            .get(i % LEAF)?
            .as_ref()
    }

    pub(super) fn entry_at_mut(&mut self, index: u32) -> Option<&mut Entry> {
        self.cell(index)?.as_mut()
    }

    /// The cell of `index`, if its leaf exists (index 0 has none).
    fn cell(&mut self, index: u32) -> Option<&mut Option<Entry>> {
        if index == 0 {
            return None;
        }
        let i = index as usize;
        self.leaves
            .get_mut(i / LEAF)?
            .as_deref_mut()?
            .get_mut(i % LEAF)
    }

    /// Gives back the memory of `index`'s leaf once no entry is left in it: a table that
    /// held many entries holds no more than what is live after they go.
    fn prune(&mut self, index: u32) {
        let l = index as usize / LEAF;
        if let Some(slot) = self.leaves.get_mut(l)
            && slot
                .as_deref()
                .is_some_and(|leaf| leaf.iter().all(Option::is_none))
        {
            *slot = None;
        }
        while self.leaves.last().is_some_and(Option::is_none) {
            self.leaves.pop();
        }
    }

    /// Leaves holding entries (each [`LEAF`] cells).
    #[cfg(test)]
    pub(super) fn leaves(&self) -> usize {
        self.leaves.iter().flatten().count()
    }

    /// The cell of `index`, making its leaf if needed.
    fn place(&mut self, index: u32) -> &mut Option<Entry> {
        let i = index as usize;
        if self.leaves.len() <= i / LEAF {
            self.leaves.resize_with(i / LEAF + 1, || None);
        }
        let leaf = self.leaves[i / LEAF].get_or_insert_with(|| (0..LEAF).map(|_| None).collect());
        &mut leaf[i % LEAF]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tpt::entry::Window;
    use crate::tpt::ids::MwType;

    fn window() -> Body {
        Body::Window(Window {
            ty: MwType::One,
            binding: None,
            touched: false,
        })
    }

    /// A table over its own space, as if it were the process's only one.
    fn private(max_entries: u32) -> Table {
        let space = Box::leak(Box::new(Mutex::new(IndexSpace::new(STag::MAX_INDEX))));
        Table::with_space(max_entries, space)
    }

    #[test]
    fn indices_start_at_one_and_reuse_changes_the_instance() {
        let mut t = private(STag::MAX_INDEX);
        let pd = t.alloc_pd();
        let a = t.insert(pd, window()).unwrap();
        let b = t.insert(pd, window()).unwrap();
        assert_eq!((a.index(), b.index()), (1, 2));
        assert!(t.entry(STag::new(0, 0)).is_none());
        assert_eq!(t.len(), 2);
        t.remove(a.index()).unwrap();
        assert!(t.remove(a.index()).is_none());
        let c = t.insert(pd, window()).unwrap();
        assert_eq!(c.index(), 1);
        assert_ne!(c.instance(), a.instance());
    }

    /// A table that held many entries gives the memory of their leaves back once they
    /// go (1.8 GB stayed in iwarpd after a client's 16 M windows were released).
    #[test]
    fn leaves_are_given_back_when_their_entries_go() {
        let mut t = private(STag::MAX_INDEX);
        let pd = t.alloc_pd();
        let all: Vec<STag> = (0..10 * LEAF)
            .map(|_| t.insert(pd, window()).unwrap())
            .collect();
        assert!(t.leaves() >= 10);
        // Indices start at 1: the first leaf holds the first LEAF - 1.
        for s in &all[LEAF - 1..] {
            t.remove(s.index());
        }
        assert_eq!(t.leaves(), 1, "only the first leaf still has entries");
        let taken = t.take_pd(pd).unwrap();
        assert_eq!((taken.len(), t.leaves()), (LEAF - 1, 0));
    }

    #[test]
    fn tables_of_one_space_never_share_an_index() {
        let space = Box::leak(Box::new(Mutex::new(IndexSpace::new(STag::MAX_INDEX))));
        let (mut a, mut b) = (Table::with_space(10, space), Table::with_space(10, space));
        let (pa, pb) = (a.alloc_pd(), b.alloc_pd());
        assert_ne!(pa, pb, "domain numbers are process-wide too");
        let x = a.insert(pa, window()).unwrap();
        let y = b.insert(pb, window()).unwrap();
        assert_ne!(x.index(), y.index());
        assert!(b.entry(x).is_none() && a.entry(y).is_none());
    }

    #[test]
    fn a_domain_moves_between_tables_with_its_stags() {
        let space = Box::leak(Box::new(Mutex::new(IndexSpace::new(STag::MAX_INDEX))));
        let (mut a, mut b) = (Table::with_space(10, space), Table::with_space(2, space));
        let (pd, stays) = (a.alloc_pd(), a.alloc_pd());
        let x = a.insert(pd, window()).unwrap();
        let kept = a.insert(stays, window()).unwrap();
        // 300 entries apart: the moved one lands in another leaf of the new table.
        let far: Vec<STag> = (0..300)
            .map(|_| space::lock(space).take().unwrap())
            .collect();
        let y = a.insert(pd, window()).unwrap();
        assert!(y.index() as usize >= LEAF);
        let taken = a.take_pd(pd).unwrap();
        assert_eq!(taken.len(), 2);
        assert_eq!((a.len(), a.check_pd(pd)), (1, Err(TptError::NoSuchPd(pd))));
        assert!(a.entry(x).is_none() && a.entry(kept).is_some());
        // Taken, the indices are not free: nothing else gets them meanwhile.
        let z = a.insert(stays, window()).unwrap();
        assert!(z != x && z != y);
        b.put_pd(taken).unwrap();
        assert_eq!((b.len(), b.check_pd(pd)), (2, Ok(())));
        assert_eq!(
            b.entry(x).map(|e| (e.pd, e.instance)),
            Some((pd, x.instance()))
        );
        assert_eq!(b.entry(y).map(|e| e.pd), Some(pd));
        assert_eq!(b.entries().count(), 2);
        // A full table refuses a domain and hands it back whole.
        let taken = b.take_pd(pd).unwrap();
        let other = b.alloc_pd();
        b.insert(other, window()).unwrap();
        let (e, taken) = b.put_pd(taken).unwrap_err();
        assert_eq!(e, TptError::Exhausted);
        a.put_pd(taken).unwrap();
        assert_eq!(a.entry(y).map(|e| e.pd), Some(pd));
        drop(far);
    }

    #[test]
    fn exhaustion_and_pd_accounting() {
        let mut t = Table::new(2);
        let pd = t.alloc_pd();
        t.insert(pd, window()).unwrap();
        let b = t.insert(pd, window()).unwrap();
        assert_eq!(t.insert(pd, window()), Err(TptError::Exhausted));
        assert_eq!(
            t.dealloc_pd(pd),
            Err(TptError::InUse {
                what: "regions or windows",
                count: 2
            })
        );
        t.remove(b.index());
        assert!(t.insert(pd, window()).is_ok());
        let other = t.alloc_pd();
        assert_ne!(other, pd);
        assert_eq!(t.dealloc_pd(other), Ok(()));
        assert_eq!(t.dealloc_pd(other), Err(TptError::NoSuchPd(other)));
        assert_eq!(t.insert(other, window()), Err(TptError::NoSuchPd(other)));
    }
}
