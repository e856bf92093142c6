//! [`Mr`]: a registered memory region whose octets the engine owns.

use std::fmt;
use std::ops::{Bound, RangeBounds};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use rdmap::{Access, FastReg, RemoteBuf, STag, SendOp, Sge};
use shm::Region;
use shm::{View, ViewMut};

use crate::device::Backend;
use crate::error::MemError;
use crate::pd::Pd;
use ipc::control::Request;

/// What a region answers to now (a fast-registration region changes it on every
/// registration).
#[derive(Copy, Clone, Debug)]
struct State {
    stag: STag,
    to: u64,
    len: usize,
    access: Access,
}

struct Inner {
    pd: Pd,
    /// The octets, which the application reaches in place.
    mem: Arc<Region>,
    state: Mutex<State>,
    /// `Some(max_len)` for a region allocated for fast registration.
    fast_reg: Option<usize>,
    /// Deregistered already (by [`Mr::deregister`]).
    gone: AtomicBool,
    /// Through iwarpd, a queued registration not yet answered.
    registration: tokio::sync::Mutex<Option<crate::daemon::Registration>>,
}

impl Inner {
    fn state(&self) -> State {
        *self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        if self.gone.load(Ordering::Acquire) {
            return;
        }
        let stag = self.state().stag;
        // The storage is freed once work in flight lets go of it.
        match self.pd.home().backend() {
            #[cfg(feature = "embedded")]
            Backend::Embedded(e) => {
                if let Err(e) = e.tpt().deregister(stag) {
                    tracing::debug!(%stag, error = %e, "region not deregistered on drop");
                }
            }
            // Two-phase: once iwarpd answers, it no longer touches the memory, and this
            // process's mapping goes with the last reference.
            Backend::Daemon(c) => {
                if let Err(e) = c.call(&Request::DeregMr {
                    stag: stag.to_u32(),
                }) {
                    tracing::debug!(%stag, error = %e, "region not deregistered on drop");
                }
            }
        }
    }
}

/// A registered memory region. Cheap to clone; clones share the region.
///
/// The octets are the application's, reached in place: [`view`](Self::view) borrows them
/// shared (`&[u8]`), [`view_mut`](Self::view_mut) exclusively (`&mut [u8]`); no copy is
/// made either way. [`read`](Self::read) and [`write`](Self::write) copy out and in. Local
/// work requests name them with [`local`](Self::local) ([`Sge`]), and the peer with
/// [`remote`](Self::remote) ([`RemoteBuf`]). Offsets and ranges are octets from the start
/// of the region, whatever its tagged offsets are.
///
/// # Memory under remote access
///
/// RDMA memory can change at any moment: a peer's Write (or a Read Response, or a Send
/// into a posted receive) lands whenever the connection delivers it. What Rust guarantees
/// here: a view holds the region's lock, so while it lives nothing in this process changes
/// the octets under it (a placement into the region waits for the view to be dropped), and
/// nothing reads them while a `view_mut` lives. Keep views short, and never hold one
/// across an `.await` that needs the engine to place into the same region (views are not
/// `Send`, so a spawned future cannot). What RDMA leaves to the application: knowing when
/// the peer's data is complete (a completion, a Send after the Write), and not changing a
/// buffer under a posted Send or Write until it has completed.
///
/// Dropping the last clone deregisters the region (a window bound to it keeps a clone, so
/// the region lives while the window is bound) and returns its memory to the system.
/// [`deregister`](Self::deregister) does it explicitly.
#[derive(Clone)]
pub struct Mr {
    inner: Arc<Inner>,
}

impl fmt::Debug for Mr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = self.inner.state();
        f.debug_struct("Mr")
            .field("stag", &s.stag)
            .field("to", &s.to)
            .field("len", &s.len)
            .field("access", &s.access)
            .finish()
    }
}

impl Mr {
    pub(crate) fn new(pd: Pd, stag: STag, to: u64, access: Access, mem: Arc<Region>) -> Self {
        let state = State {
            stag,
            to,
            len: mem.len(),
            access,
        };
        Self::with(pd, state, None, mem)
    }

    pub(crate) fn new_fast_reg(pd: Pd, stag: STag, mem: Arc<Region>) -> Self {
        let state = State {
            stag,
            to: 0,
            len: 0,
            access: Access::NONE,
        };
        let max_len = mem.len();
        Self::with(pd, state, Some(max_len), mem)
    }

    fn with(pd: Pd, state: State, fast_reg: Option<usize>, mem: Arc<Region>) -> Self {
        Self {
            inner: Arc::new(Inner {
                pd,
                mem,
                state: Mutex::new(state),
                fast_reg,
                gone: AtomicBool::new(false),
                registration: tokio::sync::Mutex::new(None),
            }),
        }
    }

    /// The STag naming the region (local and remote key in one).
    pub fn stag(&self) -> STag {
        self.inner.state().stag
    }

    /// Its length in octets (of a fast-registration region: of the current registration).
    pub fn len(&self) -> usize {
        self.inner.state().len
    }

    /// True for a region of no octets.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The rights it was registered with.
    pub fn access(&self) -> Access {
        self.inner.state().access
    }

    /// The tagged offset of its first octet: 0 for a zero-based region, the virtual
    /// address for one registered with [`Pd::register_va`].
    pub fn to(&self) -> u64 {
        self.inner.state().to
    }

    /// Its protection domain.
    pub fn pd(&self) -> &Pd {
        &self.inner.pd
    }

    /// For a fast-registration region, the longest registration it takes.
    pub fn fast_reg_max_len(&self) -> Option<usize> {
        self.inner.fast_reg
    }

    /// The whole region as the peer names it (hand it over in private data or a Send with
    /// [`RemoteBuf::encode`]). A region over 4 GiB is cut to its first 2^32 - 1 octets.
    pub fn remote(&self) -> RemoteBuf {
        let s = self.inner.state();
        RemoteBuf {
            stag: s.stag,
            to: s.to,
            len: u32::try_from(s.len).unwrap_or(u32::MAX),
        }
    }

    /// Octets `range` of the region as the peer names them.
    ///
    /// # Panics
    ///
    /// If `range` does not lie inside the region or is 4 GiB or longer (like slicing).
    pub fn remote_slice(&self, range: impl RangeBounds<usize>) -> RemoteBuf {
        let sge = self.local(range);
        RemoteBuf {
            stag: sge.stag,
            to: sge.to,
            len: sge.len,
        }
    }

    /// Octets `range` of the region as a local work request names them: a receive
    /// buffer, a gather entry, a Read sink.
    ///
    /// # Panics
    ///
    /// If `range` does not lie inside the region or is 4 GiB or longer (like slicing);
    /// [`try_local`](Self::try_local) returns an error instead.
    pub fn local(&self, range: impl RangeBounds<usize>) -> Sge {
        self.try_local(range)
            .unwrap_or_else(|e| panic!("Mr::local: {e}"))
    }

    /// Octets `range` of the region as a local work request names them, or
    /// [`MemError::OutOfBounds`].
    pub fn try_local(&self, range: impl RangeBounds<usize>) -> Result<Sge, MemError> {
        let s = self.inner.state();
        let (start, end) = span(&range, s.len);
        let oob = MemError::OutOfBounds {
            stag: s.stag,
            offset: start as u64,
            len: end.saturating_sub(start) as u64,
            region_len: s.len as u64,
        };
        if start > end || end > s.len {
            return Err(oob);
        }
        let len = u32::try_from(end - start).map_err(|_| oob)?;
        Ok(Sge {
            stag: s.stag,
            to: s.to.wrapping_add(start as u64),
            len,
        })
    }

    /// A shared view of octets `range`, in place (`&[u8]` through `Deref`; no copy). See
    /// [Memory under remote access](Self#memory-under-remote-access): placements into the
    /// region wait while the view lives. Of a fast-registration region, every octet it was
    /// allocated with is viewable, registered or not.
    pub fn view(&self, range: impl RangeBounds<usize>) -> Result<View<'_>, MemError> {
        let (start, end) = span(&range, self.inner.mem.len());
        self.inner
            .mem
            .view(start, end.saturating_sub(start))
            .map_err(|e| self.out_of_range(e))
    }

    /// An exclusive view of octets `range`, in place (`&mut [u8]` through `DerefMut`; no
    /// copy): fill a buffer before sending it, or consume a message where it landed.
    /// Every other view of the region, and every placement into it, waits while it lives.
    pub fn view_mut(&self, range: impl RangeBounds<usize>) -> Result<ViewMut<'_>, MemError> {
        let (start, end) = span(&range, self.inner.mem.len());
        self.inner
            .mem
            .view_mut(start, end.saturating_sub(start))
            .map_err(|e| self.out_of_range(e))
    }

    /// True if the region's memory is shared memory (from [`Pd::alloc_mr`](crate::Pd::alloc_mr)),
    /// which another local process can map; false for memory handed over with
    /// [`Pd::register`](crate::Pd::register).
    pub fn is_shared_memory(&self) -> bool {
        self.inner.mem.fd().is_some()
    }

    fn out_of_range(&self, e: shm::OutOfRange) -> MemError {
        MemError::OutOfBounds {
            stag: self.stag(),
            offset: e.offset as u64,
            len: e.len as u64,
            region_len: e.region_len as u64,
        }
    }

    /// A copy of octets `range`.
    pub fn read(&self, range: impl RangeBounds<usize>) -> Result<Vec<u8>, MemError> {
        let s = self.inner.state();
        let (start, end) = span(&range, s.len);
        if start > end {
            return Err(MemError::OutOfBounds {
                stag: s.stag,
                offset: start as u64,
                len: 0,
                region_len: s.len as u64,
            });
        }
        let mut out = vec![0; end - start];
        self.read_into(start, &mut out)?;
        Ok(out)
    }

    /// Fills `dst` from the octets at `offset`.
    pub fn read_into(&self, offset: usize, dst: &mut [u8]) -> Result<(), MemError> {
        let s = self.check(offset, dst.len())?;
        #[cfg(feature = "embedded")]
        if let Some(tpt) = self.table(&s) {
            let to = s.to.wrapping_add(offset as u64);
            return tpt
                .read(self.pd().engine_id(), s.stag, to, dst)
                .map_err(|e| self.access_error(&s, offset, dst.len(), e));
        }
        self.check_live(&s, offset, Access::LOCAL_READ)?;
        self.inner
            .mem
            .read_at(offset, dst)
            .map_err(|e| self.out_of_range(e))
    }

    /// Copies `data` into the region at `offset`. Needs [`Access::LOCAL_WRITE`].
    pub fn write(&self, offset: usize, data: &[u8]) -> Result<(), MemError> {
        let s = self.check(offset, data.len())?;
        #[cfg(feature = "embedded")]
        if let Some(tpt) = self.table(&s) {
            let to = s.to.wrapping_add(offset as u64);
            return tpt
                .write(self.pd().engine_id(), s.stag, to, data)
                .map_err(|e| self.access_error(&s, offset, data.len(), e));
        }
        self.check_live(&s, offset, Access::LOCAL_WRITE)?;
        self.inner
            .mem
            .write_at(offset, data)
            .map_err(|e| self.out_of_range(e))
    }

    /// Deregisters the region and returns its memory to the system.
    ///
    /// The STag is invalid as soon as this future is first polled: every later access,
    /// local or remote, fails. Work that passed its checks before may still be copying;
    /// the future waits for it (yielding to the runtime) and returns once nothing of the
    /// engine holds the memory any more. Other clones of this `Mr` see
    /// [`MemError::Invalid`] from the TPT from then on, and keep the memory (for their
    /// views) until the last of them is dropped. Fails with [`MemError::InUse`] (nothing
    /// changed) while a window is bound to the region: invalidate or drop the window first.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe in the sense that nothing leaks: if the future is dropped after its
    /// first poll, the region is deregistered all the same and its memory is freed once the
    /// work in flight and the last clone let go of it.
    pub async fn deregister(self) -> Result<(), MemError> {
        let s = self.inner.state();
        if self.inner.gone.swap(true, Ordering::AcqRel) {
            return Err(MemError::Invalid { stag: s.stag });
        }
        let backend = self.pd().home().backend().clone();
        match backend {
            Backend::Daemon(c) => {
                let req = Request::DeregMr {
                    stag: s.stag.to_u32(),
                };
                match c.call_async(&req).await {
                    Ok(_) => Ok(()),
                    Err(e) => {
                        self.inner.gone.store(false, Ordering::Release);
                        Err(self.pd().home().daemon_mem_error("deregister", &e))
                    }
                }
            }
            #[cfg(feature = "embedded")]
            Backend::Embedded(e) => {
                if let Err(e) = e.tpt().deregister(s.stag) {
                    self.inner.gone.store(false, Ordering::Release);
                    return Err(MemError::tpt("deregister", s.stag, e));
                }
                quiesce(&self.inner.mem).await;
                Ok(())
            }
        }
    }

    /// A fast registration of this region (allocated by [`Pd::alloc_fast_reg_mr`]) for
    /// `[to, to + len)` with `access` ([`Access::LOCAL_READ`] added), under the next tag
    /// instance: the work request to post, and the region as the peer will name it.
    ///
    /// As with hardware verbs, the region's [`stag`](Self::stag), [`to`](Self::to),
    /// [`len`](Self::len) and [`access`](Self::access) change now, when the request is
    /// built; the region is usable once the request has completed. A valid region must be
    /// invalidated first (Local Invalidate, or the peer's Send with Invalidate).
    pub fn fast_reg_op(
        &self,
        to: u64,
        len: usize,
        access: Access,
    ) -> Result<(SendOp, RemoteBuf), MemError> {
        let (reg, remote) = self.fast_reg(to, len, access)?;
        Ok((SendOp::FastRegister(reg), remote))
    }

    /// [`fast_reg_op`](Self::fast_reg_op)'s registration itself.
    pub(crate) fn fast_reg(
        &self,
        to: u64,
        len: usize,
        access: Access,
    ) -> Result<(FastReg, RemoteBuf), MemError> {
        let mut state = self
            .inner
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let stag = state.stag;
        let Some(max_len) = self.inner.fast_reg else {
            return Err(MemError::WrongKind {
                stag,
                expected: "a fast-registration region (Pd::alloc_fast_reg_mr)",
            });
        };
        let wire_len = u32::try_from(len).ok().filter(|_| len <= max_len);
        let (Some(wire_len), Some(_)) = (wire_len, to.checked_add(len as u64)) else {
            return Err(MemError::OutOfBounds {
                stag,
                offset: 0,
                len: len as u64,
                region_len: max_len as u64,
            });
        };
        let access = access | Access::LOCAL_READ;
        let new = stag.with_instance(stag.instance().wrapping_add(1));
        *state = State {
            stag: new,
            to,
            len,
            access,
        };
        let reg = FastReg {
            stag: new,
            to,
            len: len as u64,
            access,
        };
        let remote = RemoteBuf {
            stag: new,
            to,
            len: wire_len,
        };
        Ok((reg, remote))
    }

    /// Waits until the region's registration is done: at once for a region registered
    /// the ordinary way; for one from [`Pd::register_queued`](crate::Pd::register_queued)
    /// or [`Pd::alloc_mr_queued`](crate::Pd::alloc_mr_queued), until the control queue
    /// has finished it. Hand its STag to the peer after this.
    ///
    /// # Errors
    ///
    /// [`MemError::Invalid`] if the region was deregistered before its registration was
    /// done.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe.
    pub async fn registered(&self) -> Result<(), MemError> {
        #[cfg(feature = "embedded")]
        let engine = self.pd().home().engine().cloned();
        #[cfg(feature = "embedded")]
        if let Some(engine) = engine {
            let stag = self.stag();
            return match engine.registered(stag).await {
                true => Ok(()),
                false => Err(MemError::Invalid { stag }),
            };
        }
        self.daemon_registered().await
    }

    /// [`registered`](Self::registered) through iwarpd: the answer to the registration
    /// request, awaited in place (a cancelled wait leaves it for the next).
    async fn daemon_registered(&self) -> Result<(), MemError> {
        let mut pending = self.inner.registration.lock().await;
        let Some(r) = pending.as_mut() else {
            return match self.inner.gone.load(Ordering::Acquire) {
                true => Err(MemError::Invalid { stag: self.stag() }),
                false => Ok(()),
            };
        };
        let answer = r.done().await;
        *pending = None;
        answer.map_err(|e| {
            self.inner.gone.store(true, Ordering::Release);
            self.pd().device().daemon_mem_error("register", &e)
        })
    }

    /// Through iwarpd: the region's queued registration, sent and not yet answered.
    pub(crate) fn set_registration(&self, r: crate::daemon::Registration) {
        if let Ok(mut pending) = self.inner.registration.try_lock() {
            *pending = Some(r);
        }
    }

    /// True if `other` is this region (or a clone of it).
    pub fn same_region(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    /// The embedded engine's table, when local copies of this region go through it:
    /// always on an embedded device, except while a queued registration of the region is
    /// pending there. `None`: the copy goes straight to the memory (through iwarpd, or
    /// pending), checked here.
    #[cfg(feature = "embedded")]
    fn table(&self, s: &State) -> Option<Arc<offload_engine::tpt::Tpt>> {
        let home = self.pd().home();
        let tpt = home.engine()?.tpt();
        (!(tpt.has_pending() && tpt.is_pending(s.stag))).then(|| Arc::clone(tpt))
    }

    /// Through iwarpd, local copies check what the daemon's table would: the region is
    /// still registered and has `right`.
    fn check_live(&self, s: &State, offset: usize, right: Access) -> Result<(), MemError> {
        if self.inner.gone.load(Ordering::Acquire) {
            return Err(MemError::Invalid { stag: s.stag });
        }
        if !s.access.contains(right) {
            return Err(MemError::MissingRights {
                stag: s.stag,
                offset: offset as u64,
                missing: right,
            });
        }
        Ok(())
    }

    /// The state, after checking that `[offset, offset + len)` lies inside the region.
    fn check(&self, offset: usize, len: usize) -> Result<State, MemError> {
        let s = self.inner.state();
        if offset.checked_add(len).is_none_or(|end| end > s.len) {
            return Err(MemError::OutOfBounds {
                stag: s.stag,
                offset: offset as u64,
                len: len as u64,
                region_len: s.len as u64,
            });
        }
        Ok(s)
    }

    #[cfg(feature = "embedded")]
    fn access_error(
        &self,
        s: &State,
        offset: usize,
        len: usize,
        e: rdmap::AccessError,
    ) -> MemError {
        MemError::access(s.stag, offset as u64, len as u64, s.len as u64, e)
    }
}

impl From<&Mr> for Sge {
    /// The whole region (cut to 2^32 - 1 octets).
    fn from(mr: &Mr) -> Self {
        let r = mr.remote();
        Self {
            stag: r.stag,
            to: r.to,
            len: r.len,
        }
    }
}

impl From<&Mr> for RemoteBuf {
    /// The whole region (see [`Mr::remote`]).
    fn from(mr: &Mr) -> Self {
        mr.remote()
    }
}

/// `range` as `(start, end)` over a region of `len` octets (not checked: `start > end` or
/// `end > len` mean out of bounds).
pub(crate) fn span(range: &impl RangeBounds<usize>, len: usize) -> (usize, usize) {
    let start = match range.start_bound() {
        Bound::Included(&s) => s,
        Bound::Excluded(&s) => s.saturating_add(1),
        Bound::Unbounded => 0,
    };
    let end = match range.end_bound() {
        Bound::Included(&e) => e.saturating_add(1),
        Bound::Excluded(&e) => e,
        Bound::Unbounded => len,
    };
    (start, end)
}

/// Waits until `mem` has no reference but the region's own (the work in flight that had
/// passed the TPT's checks is done). Yields to the runtime between tries, then backs off to
/// short sleeps.
#[cfg(feature = "embedded")]
async fn quiesce(mem: &Arc<Region>) {
    let mut tries = 0u32;
    while Arc::strong_count(mem) > 1 {
        tries = tries.saturating_add(1);
        if tries < 64 {
            tokio::task::yield_now().await;
        } else {
            tokio::time::sleep(std::time::Duration::from_millis(1)).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn span_forms() {
        assert_eq!(span(&(..), 10), (0, 10));
        assert_eq!(span(&(2..5), 10), (2, 5));
        assert_eq!(span(&(2..=5), 10), (2, 6));
        assert_eq!(span(&(3..), 10), (3, 10));
        assert_eq!(span(&(..=usize::MAX), 10), (0, usize::MAX));
    }

    #[tokio::test]
    async fn quiesce_waits_for_work_in_flight() {
        let storage = Arc::new(Region::adopt(vec![1u8, 2, 3]));
        let in_flight = Arc::clone(&storage);
        let waiter = tokio::spawn(async move { quiesce(&storage).await });
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
        assert!(!waiter.is_finished(), "returned while work was in flight");
        drop(in_flight);
        waiter.await.unwrap();
    }
}
