//! The engine-owned bytes of one region, aliased by the windows bound to it.

use std::fmt;
use std::sync::{Arc, PoisonError, RwLock};

use bytes::BytesMut;
use rdmap::AccessError;

/// The storage of one memory region: the registered octets, owned by the engine.
///
/// A region and every window bound to it share one `Arc<Storage>`. An access clones the
/// `Arc` while the TPT's checks run, then copies without holding the table lock, so the
/// strong count tells how much work is still in flight. [`Tpt::deregister`] hands the
/// caller its `Arc` back at once; the caller waits until it holds the last one (see
/// [`Storage::try_into_vec`]) before it takes the octets.
///
/// [`Tpt::deregister`]: super::Tpt::deregister
pub struct Storage {
    bytes: RwLock<Box<[u8]>>,
    len: usize,
}

impl Storage {
    /// Wraps `data` as region storage.
    pub fn new(data: Vec<u8>) -> Self {
        let len = data.len();
        Self {
            bytes: RwLock::new(data.into_boxed_slice()),
            len,
        }
    }

    /// Length in octets.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True for an empty region.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// A copy of every octet.
    pub fn to_vec(&self) -> Vec<u8> {
        self.with_bytes(<[u8]>::to_vec)
    }

    /// Runs `f` on the octets under the read lock (placements wait meanwhile).
    pub fn with_bytes<R>(&self, f: impl FnOnce(&[u8]) -> R) -> R {
        let guard = self.bytes.read().unwrap_or_else(PoisonError::into_inner);
        f(&guard)
    }

    /// The number of `Arc`s that still reference this storage: 1 once the caller's is the
    /// only one, that is once no work is in flight and no entry points here any more.
    pub fn in_flight(this: &Arc<Self>) -> usize {
        Arc::strong_count(this)
    }

    /// Takes the octets back if `this` is the last reference; otherwise returns `this`
    /// unchanged so the caller can wait for the work in flight and try again.
    pub fn try_into_vec(this: Arc<Self>) -> Result<Vec<u8>, Arc<Self>> {
        Arc::try_unwrap(this).map(|s| {
            s.bytes
                .into_inner()
                .unwrap_or_else(PoisonError::into_inner)
                .into_vec()
        })
    }

    /// Copies `[off, off + dst.len())` into `dst`. The TPT has checked the range already;
    /// a range outside the storage still fails cleanly as [`AccessError::Bounds`].
    pub(super) fn read_at(&self, off: usize, dst: &mut [u8]) -> Result<(), AccessError> {
        let guard = self.bytes.read().unwrap_or_else(PoisonError::into_inner);
        let src = off
            .checked_add(dst.len())
            .and_then(|end| guard.get(off..end))
            .ok_or(AccessError::Bounds)?;
        dst.copy_from_slice(src);
        Ok(())
    }

    /// Appends `[off, off + len)` to `dst` (one copy, no zero-fill first).
    pub(super) fn append_at(
        &self,
        off: usize,
        len: usize,
        dst: &mut BytesMut,
    ) -> Result<(), AccessError> {
        let guard = self.bytes.read().unwrap_or_else(PoisonError::into_inner);
        let src = off
            .checked_add(len)
            .and_then(|end| guard.get(off..end))
            .ok_or(AccessError::Bounds)?;
        dst.extend_from_slice(src);
        Ok(())
    }

    /// Copies `src` to `[off, off + src.len())`: the one copy of a placement.
    pub(super) fn write_at(&self, off: usize, src: &[u8]) -> Result<(), AccessError> {
        let mut guard = self.bytes.write().unwrap_or_else(PoisonError::into_inner);
        let dst = off
            .checked_add(src.len())
            .and_then(|end| guard.get_mut(off..end))
            .ok_or(AccessError::Bounds)?;
        dst.copy_from_slice(src);
        Ok(())
    }

    /// Replaces the little-endian `u64` at `off` with `op(original)` under the write lock
    /// (atomic with respect to every other access to this storage) and returns the original.
    pub(super) fn update_u64(
        &self,
        off: usize,
        op: &mut dyn FnMut(u64) -> u64,
    ) -> Result<u64, AccessError> {
        let mut guard = self.bytes.write().unwrap_or_else(PoisonError::into_inner);
        let word: &mut [u8; 8] = off
            .checked_add(8)
            .and_then(|end| guard.get_mut(off..end))
            .and_then(|w| w.try_into().ok())
            .ok_or(AccessError::Bounds)?;
        let orig = u64::from_le_bytes(*word);
        *word = op(orig).to_le_bytes();
        Ok(orig)
    }
}

impl fmt::Debug for Storage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Storage").field("len", &self.len).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn read_write_update() {
        let s = Storage::new(vec![0; 16]);
        assert_eq!(s.len(), 16);
        assert!(!s.is_empty());
        s.write_at(2, &[1, 2, 3]).unwrap();
        let mut out = [0u8; 4];
        s.read_at(1, &mut out).unwrap();
        assert_eq!(out, [0, 1, 2, 3]);
        s.write_at(8, &5u64.to_le_bytes()).unwrap();
        assert_eq!(s.update_u64(8, &mut |v| v + 10).unwrap(), 5);
        assert_eq!(s.to_vec()[8..16], 15u64.to_le_bytes());
    }

    #[test]
    fn out_of_range_fails_without_panicking() {
        let s = Storage::new(vec![7; 8]);
        assert_eq!(s.write_at(6, &[0; 3]), Err(AccessError::Bounds));
        assert_eq!(s.write_at(usize::MAX, &[0; 2]), Err(AccessError::Bounds));
        let mut out = [0u8; 2];
        assert_eq!(s.read_at(7, &mut out), Err(AccessError::Bounds));
        assert_eq!(s.update_u64(1, &mut |v| v), Err(AccessError::Bounds));
        assert_eq!(s.to_vec(), vec![7; 8]);
    }

    #[test]
    fn try_into_vec_waits_for_the_last_reference() {
        let s = Arc::new(Storage::new(vec![1, 2, 3]));
        let in_flight = Arc::clone(&s);
        assert_eq!(Storage::in_flight(&s), 2);
        let s = Storage::try_into_vec(s).unwrap_err();
        drop(in_flight);
        assert_eq!(Storage::try_into_vec(s).unwrap(), vec![1, 2, 3]);
    }
}
