//! The objects this library handed to C, by address: a pointer C passes back is used
//! only if it is one of them, still alive. A destroyed object (or one never ours) is an
//! error, not a use after free; and an object another thread is using when C destroys it
//! lives until that use ends (each use holds an `Arc`).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

/// The live objects of one kind.
#[derive(Debug)]
pub(crate) struct Live<T> {
    map: Mutex<BTreeMap<usize, Arc<T>>>,
}

impl<T> Live<T> {
    /// None yet.
    pub(crate) const fn new() -> Self {
        Self {
            map: Mutex::new(BTreeMap::new()),
        }
    }

    fn map(&self) -> std::sync::MutexGuard<'_, BTreeMap<usize, Arc<T>>> {
        self.map.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Keeps `obj` alive; its address, which C gets (`T` is `repr(C)` with the C
    /// structure first, so this is also the C structure's address).
    pub(crate) fn add(&self, obj: T) -> *mut T {
        let obj = Arc::new(obj);
        let ptr = Arc::as_ptr(&obj).cast_mut();
        self.map().insert(ptr as usize, obj);
        ptr
    }

    /// The object at `ptr`, if it is alive.
    pub(crate) fn get<U>(&self, ptr: *const U) -> Option<Arc<T>> {
        self.map().get(&(ptr as usize)).cloned()
    }

    /// Lets the object at `ptr` go (freed once no use holds it); `None` if it was not
    /// alive.
    pub(crate) fn remove<U>(&self, ptr: *const U) -> Option<Arc<T>> {
        self.map().remove(&(ptr as usize))
    }

    /// Lets it go only if `keep` is false for it (an object still in use by others, such
    /// as a domain with regions, stays); `Err(true)` if it was kept, `Err(false)` if it
    /// was not alive.
    pub(crate) fn remove_unless<U>(
        &self,
        ptr: *const U,
        keep: impl FnOnce(&T) -> bool,
    ) -> Result<Arc<T>, bool> {
        let mut map = self.map();
        let key = ptr as usize;
        match map.get(&key) {
            None => Err(false),
            Some(obj) if keep(obj) => Err(true),
            Some(_) => Ok(map.remove(&key).expect("present")),
        }
    }
}
