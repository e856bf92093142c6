//! The slot table behind the TPT lock: tag index allocation with instance bumping,
//! protection domain bookkeeping, and the window/region links.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use ddp::{Access, STag};

use super::entry::{Binding, Body, Entry, Span};
use super::error::TptError;
use super::ids::PdId;
use super::storage::Storage;

/// One tag index.
#[derive(Debug, Default)]
struct Slot {
    /// The instance the next entry created in this slot answers to.
    next_instance: u8,
    entry: Option<Entry>,
}

/// Every entry of one TPT. Index 0 is never used, so STag 0 and STag 1 (used by the RTR
/// zero-length Write) never name an entry.
#[derive(Debug)]
pub(super) struct Table {
    slots: Vec<Slot>,
    /// Freed indices, reused oldest first so an index rests as long as possible.
    free: VecDeque<u32>,
    max_index: u32,
    /// Live protection domains and how many entries each holds.
    pds: HashMap<PdId, usize>,
    next_pd: u32,
}

impl Table {
    /// An empty table handing out indices `1..=max_index`.
    pub(super) fn new(max_index: u32) -> Self {
        Self {
            slots: vec![Slot::default()],
            free: VecDeque::new(),
            max_index: max_index.min(STag::MAX_INDEX),
            pds: HashMap::new(),
            next_pd: 1,
        }
    }

    /// A new protection domain (numbers start at 1 and are not reused until they wrap).
    pub(super) fn alloc_pd(&mut self) -> PdId {
        loop {
            let pd = PdId::new(self.next_pd);
            self.next_pd = self.next_pd.checked_add(1).unwrap_or(1);
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

    /// Stores a new entry in a free index and returns its STag.
    pub(super) fn insert(&mut self, pd: PdId, body: Body) -> Result<STag, TptError> {
        self.check_pd(pd)?;
        let index = match self.free.pop_front() {
            Some(index) => index,
            None if (self.slots.len() as u64) <= u64::from(self.max_index) => {
                self.slots.push(Slot::default());
                u32::try_from(self.slots.len() - 1).map_err(|_| TptError::Exhausted)?
            }
            None => return Err(TptError::Exhausted),
        };
        let slot = self.slot_mut(index).ok_or(TptError::Exhausted)?;
        let instance = slot.next_instance;
        slot.entry = Some(Entry { pd, instance, body });
        *self.pds.entry(pd).or_default() += 1;
        Ok(STag::new(index, instance))
    }

    /// Frees an index: the next entry there answers to a bumped instance, so STags of the
    /// removed entry never match again (until the 8-bit instance wraps).
    pub(super) fn remove(&mut self, index: u32) -> Option<Entry> {
        let slot = self.slot_mut(index)?;
        let entry = slot.entry.take()?;
        slot.next_instance = entry.instance.wrapping_add(1);
        self.free.push_back(index);
        if let Some(count) = self.pds.get_mut(&entry.pd) {
            *count = count.saturating_sub(1);
        }
        Some(entry)
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
    /// instance, bounds, then the region's BIND right and rights no wider than the
    /// region's. Returns what the window will expose.
    pub(super) fn bind_target(
        &self,
        mr: STag,
        pd: PdId,
        to: u64,
        len: u64,
        access: Access,
    ) -> Result<(Span, Arc<Storage>), TptError> {
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
        if !r.access.contains(Access::BIND) {
            return Err(TptError::Rights {
                missing: Access::BIND,
            });
        }
        let missing = access.difference(r.access);
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
        self.slots
            .iter()
            .enumerate()
            .filter_map(|(i, s)| Some((u32::try_from(i).ok()?, s.entry.as_ref()?)))
    }

    /// Number of live entries.
    pub(super) fn len(&self) -> usize {
        self.slots.len() - 1 - self.free.len()
    }

    fn entry_at(&self, index: u32) -> Option<&Entry> {
        self.slots.get(usize::try_from(index).ok()?)?.entry.as_ref()
    }

    pub(super) fn entry_at_mut(&mut self, index: u32) -> Option<&mut Entry> {
        self.slot_mut(index)?.entry.as_mut()
    }

    fn slot_mut(&mut self, index: u32) -> Option<&mut Slot> {
        if index == 0 {
            return None;
        }
        self.slots.get_mut(usize::try_from(index).ok()?)
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

    #[test]
    fn indices_start_at_one_and_reuse_bumps_the_instance() {
        let mut t = Table::new(STag::MAX_INDEX);
        let pd = t.alloc_pd();
        let a = t.insert(pd, window()).unwrap();
        let b = t.insert(pd, window()).unwrap();
        assert_eq!((a.index(), a.instance()), (1, 0));
        assert_eq!((b.index(), b.instance()), (2, 0));
        assert!(t.entry(STag::new(0, 0)).is_none());
        assert_eq!(t.len(), 2);
        t.remove(a.index()).unwrap();
        assert!(t.remove(a.index()).is_none());
        let c = t.insert(pd, window()).unwrap();
        assert_eq!((c.index(), c.instance()), (1, 1));
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
