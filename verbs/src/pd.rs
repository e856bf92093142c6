//! [`Pd`]: a protection domain, and the verbs that create memory in it.

use std::fmt;
use std::sync::Arc;

use offload_engine::tpt::{Base, MwType, PdId};
use rdmap::{Access, STag};

use crate::device::Device;
use crate::error::MemError;
use crate::mr::Mr;
use crate::mw::Mw;

struct Inner {
    device: Device,
    id: PdId,
}

impl Drop for Inner {
    fn drop(&mut self) {
        // Every region, window and queue pair of the domain holds a `Pd`, so none is left.
        if let Err(e) = self.device.engine().tpt().dealloc_pd(self.id) {
            tracing::debug!(pd = %self.id, error = %e, "protection domain not deallocated");
        }
    }
}

/// A protection domain. Cheap to clone; clones share it. It is deallocated when the last
/// clone, and the last region, window and queue pair created in it, are dropped.
#[derive(Clone)]
pub struct Pd {
    inner: Arc<Inner>,
}

impl fmt::Debug for Pd {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Pd").field(&self.inner.id).finish()
    }
}

impl Pd {
    pub(crate) fn new(device: Device) -> Self {
        let id = device.engine().alloc_pd();
        Self {
            inner: Arc::new(Inner { device, id }),
        }
    }

    /// The domain's number in the engine.
    pub fn id(&self) -> PdId {
        self.inner.id
    }

    /// The device it belongs to.
    pub fn device(&self) -> &Device {
        &self.inner.device
    }

    /// Registers `data` as a **zero-based** region (tagged offsets `0..len`) with
    /// `access`. The engine owns the octets from now on; [`Mr::read`], [`Mr::write`] and
    /// [`Mr::deregister`] reach them.
    ///
    /// [`Access::LOCAL_READ`] is always added (as in every verbs API, local read is
    /// implied). Add [`Access::LOCAL_WRITE`] for regions that receive data (receive
    /// buffers, Read sinks, Atomic results) or that [`Mr::write`] fills.
    pub fn register(&self, data: impl Into<Vec<u8>>, access: Access) -> Result<Mr, MemError> {
        self.register_at(data.into(), Base::ZeroBased, access)
    }

    /// Registers `data` as a region whose first octet has tagged offset `va` (virtual
    /// address based, as hardware RNICs use by default): tagged offsets `va..va + len`.
    pub fn register_va(
        &self,
        data: impl Into<Vec<u8>>,
        va: u64,
        access: Access,
    ) -> Result<Mr, MemError> {
        self.register_at(data.into(), Base::Va(va), access)
    }

    /// Allocates and registers a zero-based region of `len` zeroed octets.
    pub fn alloc_mr(&self, len: usize, access: Access) -> Result<Mr, MemError> {
        self.register_at(vec![0; len], Base::ZeroBased, access)
    }

    /// Allocates a region of `max_len` zeroed octets for fast registration. It is invalid
    /// until a fast registration posted on a queue pair of this domain arms it
    /// ([`Qp::fast_register`](crate::Qp::fast_register), or
    /// [`Mr::fast_reg_op`] and [`Qp::post_send`](crate::Qp::post_send)).
    pub fn alloc_fast_reg_mr(&self, max_len: usize) -> Result<Mr, MemError> {
        let tpt = self.inner.device.engine().tpt();
        let stag = tpt
            .alloc_fast_reg(self.id(), max_len)
            .map_err(|e| MemError::tpt("alloc_fast_reg_mr", STag::default(), e))?;
        Ok(Mr::new_fast_reg(self.clone(), stag, max_len))
    }

    /// Allocates an unbound memory window of type `ty`.
    ///
    /// Type 1 windows are bound by [`Mw::bind`] and usable by every queue pair of the
    /// domain. Type 2 windows are bound by a work request on one queue pair
    /// ([`Qp::bind_mw`](crate::Qp::bind_mw)), usable only through it, and may be
    /// invalidated by the peer's Send with Invalidate.
    pub fn alloc_mw(&self, ty: MwType) -> Result<Mw, MemError> {
        let tpt = self.inner.device.engine().tpt();
        let stag = tpt
            .alloc_mw(self.id(), ty)
            .map_err(|e| MemError::tpt("alloc_mw", STag::default(), e))?;
        Ok(Mw::new(self.clone(), stag, ty))
    }

    fn register_at(&self, data: Vec<u8>, base: Base, access: Access) -> Result<Mr, MemError> {
        let access = access | Access::LOCAL_READ;
        let len = data.len();
        let tpt = self.inner.device.engine().tpt();
        let stag = tpt
            .register(self.id(), data, base, access)
            .map_err(|e| MemError::tpt("register", STag::default(), e))?;
        Ok(Mr::new(self.clone(), stag, base.start(), len, access))
    }

    /// True if `other` is this domain (or a clone of it).
    pub(crate) fn same(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }
}
