//! [`Pd`]: a protection domain. The verbs that create memory in it are with what they
//! create: registration in `register`, windows in `mw`.

use std::fmt;
use std::sync::{Arc, PoisonError, RwLock, RwLockReadGuard};

use ipc::control::{Reply, Request};
use rdmap::STag;

use crate::daemon::DaemonError;
use crate::device::{Backend, Device};
use crate::error::MemError;
use crate::types::PdId;

struct Inner {
    /// The device it is on now ([`Pd::migrate`] moves it).
    device: RwLock<Device>,
    id: u32,
    /// Through iwarpd: the domain's push region (seed 000), if the daemon gave one.
    push: Option<Arc<ipc::push::PushRegion>>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        // Every region, window and queue pair of the domain holds a `Pd`, so none is left.
        match self
            .device
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner)
            .backend()
        {
            #[cfg(feature = "embedded")]
            Backend::Embedded(e) => {
                if let Err(e) = e.tpt().dealloc_pd(offload_engine::tpt::PdId::new(self.id)) {
                    tracing::debug!(pd = %self.id, error = %e, "protection domain not deallocated");
                }
            }
            Backend::Daemon(c) => c.tell(&Request::DeallocPd { pd: self.id }),
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
    /// Allocates a domain on `device`; through iwarpd, an error with the daemon's reason
    /// if it refuses (a limit, no memory).
    pub(crate) fn new(device: Device) -> Result<Self, MemError> {
        let (id, push) = match device.backend() {
            #[cfg(feature = "embedded")]
            Backend::Embedded(e) => (e.alloc_pd().get(), None),
            Backend::Daemon(c) => match c.call_with(&Request::AllocPd, &[]) {
                Ok((Reply::Pd { pd, push_slots }, mut fds)) => {
                    let push = fds.pop().and_then(|fd| {
                        ipc::push::PushRegion::map(std::fs::File::from(fd), push_slots)
                            .map_err(|e| tracing::warn!(error = %e, "push region not mapped"))
                            .ok()
                    });
                    (pd, push.map(Arc::new))
                }
                Ok((other, _)) => {
                    let e = DaemonError::Refused(format!(
                        "iwarpd answered AllocPd with {other:?}: is it an older daemon?"
                    ));
                    return Err(device.daemon_mem_error("alloc_pd", &e));
                }
                Err(e) => return Err(device.daemon_mem_error("alloc_pd", &e)),
            },
        };
        Ok(Self {
            inner: Arc::new(Inner {
                device: RwLock::new(device),
                id,
                push,
            }),
        })
    }

    /// The domain's number, unique within its device.
    pub fn id(&self) -> PdId {
        PdId(self.inner.id)
    }

    /// Through iwarpd, the domain's push region.
    pub(crate) fn push_region(&self) -> Option<&Arc<ipc::push::PushRegion>> {
        self.inner.push.as_ref()
    }

    /// The domain as the embedded engine names it.
    #[cfg(feature = "embedded")]
    pub(crate) fn engine_id(&self) -> offload_engine::tpt::PdId {
        offload_engine::tpt::PdId::new(self.inner.id)
    }

    /// The device it belongs to (another one after [`migrate`](Self::migrate)).
    pub fn device(&self) -> Device {
        self.home().clone()
    }

    /// The device it belongs to, held: a migration waits until this is dropped, so a
    /// memory verb holding it acts on the table the domain is in.
    pub(crate) fn home(&self) -> RwLockReadGuard<'_, Device> {
        self.inner
            .device
            .read()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Its device, for a migration to change.
    #[cfg(feature = "embedded")]
    pub(crate) fn home_mut(&self) -> std::sync::RwLockWriteGuard<'_, Device> {
        self.inner
            .device
            .write()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Through iwarpd: runs `req`, whose reply is an STag.
    pub(crate) fn daemon_stag(
        &self,
        op: &'static str,
        req: &Request,
        fds: &[std::os::fd::BorrowedFd<'_>],
    ) -> Result<STag, MemError> {
        let device = self.home();
        let Backend::Daemon(c) = device.backend() else {
            unreachable!("daemon_stag on an embedded device")
        };
        match c.call_with(req, fds) {
            Ok((Reply::Id(stag), _)) => Ok(STag::from_u32(stag)),
            Ok(_) => Err(device.daemon_mem_error(
                op,
                &DaemonError::Refused("iwarpd answered with no STag".into()),
            )),
            Err(e) => Err(device.daemon_mem_error(op, &e)),
        }
    }

    /// True if `other` is this domain (or a clone of it).
    pub(crate) fn same(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }
}

impl Device {
    /// Allocates a protection domain: regions, windows and queue pairs of one domain can
    /// reach each other; across domains every access fails.
    ///
    /// # Errors
    ///
    /// Through iwarpd, if the daemon cannot be reached or refuses (its reason: a limit of
    /// this application's or the daemon's, no memory); embedded, never.
    pub fn alloc_pd(&self) -> Result<Pd, MemError> {
        Pd::new(self.clone())
    }
}
