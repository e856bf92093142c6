//! [`Mw`]: a memory window, a remotely accessible view of part of a region.

use std::fmt;
use std::ops::RangeBounds;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use crate::types::MwType;
use rdmap::{Access, Bind, RemoteBuf, STag, SendOp, Sge};

use crate::device::Backend;
use crate::error::MemError;
use crate::mr::Mr;
use crate::pd::Pd;
use ipc::control::Request;

#[derive(Debug)]
struct State {
    /// The STag the window answers to (after the latest bind).
    stag: STag,
    /// The region of the latest bind, kept alive while the window may be bound to it.
    bound: Option<Mr>,
    /// What the latest bind exposed.
    remote: Option<RemoteBuf>,
}

impl State {
    /// Records a bind of `sge` of `mr` under `stag`; returns the window as the peer names it.
    fn bind(&mut self, stag: STag, mr: &Mr, sge: &Sge) -> RemoteBuf {
        let remote = RemoteBuf {
            stag,
            to: sge.to,
            len: sge.len,
        };
        *self = Self {
            stag,
            bound: Some(mr.clone()),
            remote: Some(remote),
        };
        remote
    }
}

struct Inner {
    pd: Pd,
    ty: MwType,
    state: Mutex<State>,
    /// Later binds are one-touch.
    one_touch: AtomicBool,
}

impl Inner {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        let stag = self.lock().stag;
        match self.pd.home().backend() {
            #[cfg(feature = "embedded")]
            Backend::Embedded(e) => {
                if let Err(e) = e.tpt().dealloc_mw(stag) {
                    tracing::debug!(%stag, error = %e, "window not deallocated on drop");
                }
            }
            Backend::Daemon(c) => c.tell(&Request::DeallocMw {
                stag: stag.to_u32(),
            }),
        }
        // `bound` drops after this: the region is released only once the window is gone.
    }
}

/// A memory window. Cheap to clone; clones share the window; the last drop deallocates it.
///
/// A window exposes part of a region (which must carry [`Access::BIND`], and
/// [`Access::LOCAL_WRITE`] for a window the peer may write: [`Access::needed_to_bind`])
/// under its own STag, so the peer can be handed exactly that part
/// and the grant revoked later without deregistering the region.
///
/// A **one-touch** window ([`set_one_touch`](Self::set_one_touch), seed 001) serves
/// exactly one inbound RDMA Write message per bind: once that message's last segment is
/// placed the window invalidates itself, with no message from the peer; a second message
/// through it is refused with a Terminate (DDP tagged, invalid STag) and nothing of it is
/// placed. Segments before a message's last are placed as usual. RDMA Read Requests and
/// Atomics do not use a one-touch window up. Over TCP, segments arrive in order, so seed
/// 001's rows for a last segment that arrives out of order (stored sequence number) or
/// outside the window (dropped for retransmission) cannot occur: TCP has already put every
/// segment in order before DDP sees it.
#[derive(Clone)]
pub struct Mw {
    inner: Arc<Inner>,
}

impl fmt::Debug for Mw {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = self.inner.lock();
        f.debug_struct("Mw")
            .field("type", &self.inner.ty)
            .field("stag", &s.stag)
            .field("remote", &s.remote)
            .finish()
    }
}

impl Mw {
    /// Makes this window's later binds one-touch (`true`) or multiple-touch (`false`, the
    /// default). A bind already made keeps what it was made with.
    pub fn set_one_touch(&self, on: bool) {
        self.inner.one_touch.store(on, Ordering::Relaxed);
    }

    /// True if later binds are one-touch.
    pub fn one_touch(&self) -> bool {
        self.inner.one_touch.load(Ordering::Relaxed)
    }

    pub(crate) fn new(pd: Pd, stag: STag, ty: MwType) -> Self {
        Self {
            inner: Arc::new(Inner {
                pd,
                ty,
                state: Mutex::new(State {
                    stag,
                    bound: None,
                    remote: None,
                }),
                one_touch: AtomicBool::new(false),
            }),
        }
    }

    /// The STag the window answers to now (a bind moves it to the next tag instance).
    pub fn stag(&self) -> STag {
        self.inner.lock().stag
    }

    /// Type 1 or type 2.
    pub fn kind(&self) -> MwType {
        self.inner.ty
    }

    /// Its protection domain.
    pub fn pd(&self) -> &Pd {
        &self.inner.pd
    }

    /// What the latest bind exposed, as the peer names it (`None` before the first bind
    /// and after [`invalidate`](Self::invalidate)).
    pub fn remote(&self) -> Option<RemoteBuf> {
        self.inner.lock().remote
    }

    /// Binds this **type 1** window to octets `range` of `mr` with `access` (rebinding it
    /// if it is bound), and returns the window as the peer names it, under a new tag
    /// instance. Every queue pair of the domain can then use it.
    pub fn bind(
        &self,
        mr: &Mr,
        range: impl RangeBounds<usize>,
        access: Access,
    ) -> Result<RemoteBuf, MemError> {
        let mut state = self.inner.lock();
        let sge = self.check(&state, MwType::One, mr, range, access)?;
        let pd = &self.inner.pd;
        let stag = match pd.home().backend() {
            #[cfg(feature = "embedded")]
            Backend::Embedded(e) => e
                .tpt()
                .bind_mw(
                    state.stag,
                    sge.stag,
                    sge.to,
                    sge.len.into(),
                    access,
                    self.one_touch(),
                    None,
                )
                .map_err(|e| MemError::tpt("bind", state.stag, e))?,
            Backend::Daemon(_) => {
                let req = Request::BindMw {
                    mw: state.stag.to_u32(),
                    mr: sge.stag.to_u32(),
                    to: sge.to,
                    len: sge.len.into(),
                    access: u32::from(access.bits()),
                    one_touch: self.one_touch(),
                };
                pd.daemon_stag("bind", &req, &[])?
            }
        };
        Ok(state.bind(stag, mr, &sge))
    }

    /// The bind work request for this **type 2** window over octets `range` of `mr` with
    /// `access`, under the next tag instance, and the window as the peer will name it.
    /// Post it on the queue pair the window is to belong to
    /// ([`Qp::bind_mw`](crate::Qp::bind_mw) does both and waits).
    ///
    /// As with hardware verbs, [`stag`](Self::stag) and [`remote`](Self::remote) change
    /// now, when the request is built; the window is usable once it has completed. The
    /// window must be unbound (never bound, or invalidated).
    pub fn bind_op(
        &self,
        mr: &Mr,
        range: impl RangeBounds<usize>,
        access: Access,
    ) -> Result<(SendOp, RemoteBuf), MemError> {
        let mut state = self.inner.lock();
        let sge = self.check(&state, MwType::Two, mr, range, access)?;
        let stag = state
            .stag
            .with_instance(state.stag.instance().wrapping_add(1));
        let op = SendOp::Bind(Bind {
            mw: stag,
            mr: sge.stag,
            to: sge.to,
            len: sge.len.into(),
            access,
            one_touch: self.one_touch(),
        });
        Ok((op, state.bind(stag, mr, &sge)))
    }

    /// Unbinds the window (type 1 or 2): every later access through its STag fails, and
    /// it can be bound again. Unbinding an unbound window is not an error.
    pub fn invalidate(&self) -> Result<(), MemError> {
        let mut state = self.inner.lock();
        let device = self.inner.pd.home();
        match device.backend() {
            #[cfg(feature = "embedded")]
            Backend::Embedded(e) => e
                .tpt()
                .invalidate_local(state.stag)
                .map_err(|e| MemError::tpt("invalidate", state.stag, e))?,
            Backend::Daemon(c) => {
                let req = Request::Invalidate {
                    stag: state.stag.to_u32(),
                };
                c.call(&req)
                    .map_err(|e| device.daemon_mem_error("invalidate", &e))?;
            }
        }
        state.bound = None;
        state.remote = None;
        Ok(())
    }

    /// The checks every bind starts with, done here so that a bad request fails with a
    /// precise error instead of failing the queue pair: the window's type, the region's
    /// domain, the range, and the region's rights.
    fn check(
        &self,
        state: &State,
        ty: MwType,
        mr: &Mr,
        range: impl RangeBounds<usize>,
        access: Access,
    ) -> Result<Sge, MemError> {
        if self.inner.ty != ty {
            return Err(MemError::WrongKind {
                stag: state.stag,
                expected: match ty {
                    MwType::One => "a type 1 window (type 2 windows are bound by Qp::bind_mw)",
                    MwType::Two => "a type 2 window (type 1 windows are bound by Mw::bind)",
                },
            });
        }
        if !mr.pd().same(&self.inner.pd) {
            return Err(MemError::WrongDomain { stag: mr.stag() });
        }
        let sge = mr.try_local(range)?;
        let missing = access.needed_to_bind().difference(mr.access());
        if !missing.is_empty() {
            return Err(MemError::MissingRights {
                stag: sge.stag,
                offset: sge.to.wrapping_sub(mr.to()),
                missing,
            });
        }
        Ok(sge)
    }
}

impl Pd {
    /// Allocates an unbound memory window of type `ty`.
    ///
    /// Type 1 windows are bound by [`Mw::bind`] and usable by every queue pair of the
    /// domain. Type 2 windows are bound by a work request on one queue pair
    /// ([`Qp::bind_mw`](crate::Qp::bind_mw)), usable only through it, and may be
    /// invalidated by the peer's Send with Invalidate.
    pub fn alloc_mw(&self, ty: MwType) -> Result<Mw, MemError> {
        let stag = match self.home().backend() {
            #[cfg(feature = "embedded")]
            Backend::Embedded(e) => e
                .tpt()
                .alloc_mw(self.engine_id(), ty.into())
                .map_err(|e| MemError::tpt("alloc_mw", STag::default(), e))?,
            Backend::Daemon(_) => {
                let kind = match ty {
                    MwType::One => 1,
                    MwType::Two => 2,
                };
                let req = Request::AllocMw {
                    pd: self.id().0,
                    kind,
                };
                self.daemon_stag("alloc_mw", &req, &[])?
            }
        };
        Ok(Mw::new(self.clone(), stag, ty))
    }
}
