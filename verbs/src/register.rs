//! Memory registration: the [`Pd`] verbs that make a region ([`Mr`]) of application
//! memory or of memory they allocate, embedded or through iwarpd.

use std::sync::Arc;

use ipc::control::{Reply, Request};
use rdmap::{Access, Base, STag};
use shm::Region;

use crate::daemon::DaemonError;
use crate::device::Backend;
use crate::error::MemError;
use crate::mr::Mr;
use crate::pd::Pd;

impl Pd {
    /// Registers memory the application already has as a **zero-based** region (tagged
    /// offsets `0..len`) with `access`, **without copying it**: a `Vec<u8>`, a `Box<[u8]>`,
    /// a `BytesMut`, an array, or an aligned allocation of the application's own (any owner
    /// whose [`AsMut`] names the same octets for as long as it lives). The region keeps the
    /// owner and drops it when the last [`Mr`] clone is dropped; the octets are reached in
    /// place with [`Mr::view`] and [`Mr::view_mut`].
    ///
    /// [`Access::LOCAL_READ`] is always added (as in every verbs API, local read is
    /// implied). Add [`Access::LOCAL_WRITE`] for regions that receive data (receive
    /// buffers, Read sinks, Atomic results) or that [`Mr::write`] fills.
    ///
    /// [`alloc_mr`](Self::alloc_mr) allocates shared memory instead, which a local daemon
    /// can map as well.
    pub fn register<B>(&self, data: B, access: Access) -> Result<Mr, MemError>
    where
        B: AsMut<[u8]> + Send + Sync + 'static,
    {
        self.register_at(Region::adopt(data), Base::ZeroBased, access)
    }

    /// Registers `data` (without copying it, as [`register`](Self::register)) as a region
    /// whose first octet has tagged offset `va` (virtual address based, as hardware RNICs
    /// use by default): tagged offsets `va..va + len`.
    pub fn register_va<B>(&self, data: B, va: u64, access: Access) -> Result<Mr, MemError>
    where
        B: AsMut<[u8]> + Send + Sync + 'static,
    {
        self.register_at(Region::adopt(data), Base::Va(va), access)
    }

    /// Registers `mem`, memory the application prepared as a [`Region`] itself, with
    /// `access`: from tagged offset `va` (virtual address based), or zero-based for
    /// `None`. A region in a memory file ([`Region::fd`], for example one
    /// [adopted in a file](Region::adopt_in_file), as the C library moves a program's
    /// buffer) is registered through iwarpd without a copy: the daemon maps the same
    /// octets of the file. Other memory is copied once, as [`register`](Self::register)'s.
    pub fn register_region(
        &self,
        mem: Region,
        va: Option<u64>,
        access: Access,
    ) -> Result<Mr, MemError> {
        self.register_at(mem, va.map_or(Base::ZeroBased, Base::Va), access)
    }

    /// Allocates and registers a zero-based region of `len` zeroed octets: a page-aligned
    /// mapping of anonymous shared memory (memfd), returned to the system when the region
    /// is deregistered or its last [`Mr`] clone is dropped.
    pub fn alloc_mr(&self, len: usize, access: Access) -> Result<Mr, MemError> {
        self.register_at(alloc(len)?, Base::ZeroBased, access)
    }

    /// Allocates a region of `max_len` zeroed octets for fast registration. It is invalid
    /// until a fast registration posted on a queue pair of this domain arms it
    /// ([`Qp::fast_register`](crate::Qp::fast_register), or
    /// [`Mr::fast_reg_op`] and [`Qp::post_send`](crate::Qp::post_send)).
    pub fn alloc_fast_reg_mr(&self, max_len: usize) -> Result<Mr, MemError> {
        const OP: &str = "alloc_fast_reg_mr";
        let mem = Arc::new(alloc(max_len)?);
        let stag = match self.home().backend() {
            #[cfg(feature = "embedded")]
            Backend::Embedded(e) => e
                .tpt()
                .alloc_fast_reg_region(self.engine_id(), mem.clone())
                .map_err(|e| MemError::tpt(OP, STag::default(), e))?,
            Backend::Daemon(_) => {
                let req = Request::AllocFastRegMr {
                    pd: self.id().0,
                    len: mem.len() as u64,
                };
                let fds: Vec<_> = mem.fd().into_iter().collect();
                self.daemon_stag(OP, &req, &fds)?
            }
        };
        Ok(Mr::new_fast_reg(self.clone(), stag, mem))
    }

    /// Registers memory the application already has, as [`register`](Self::register)
    /// does, **through the control queue** (seed 003's pipelined registration): the
    /// region and its STag come back at once while the registration (checking the memory
    /// and faulting its pages in) finishes in the background, in submission order.
    ///
    /// Work requests may name the region straight away: one that does waits, with every
    /// later request of its queue pair, until the registration is done (other queue pairs
    /// do not wait). The peer's access to a region still being registered is an access to
    /// an invalid STag (a Terminate): advertise it after [`Mr::registered`]. A region
    /// dropped before it is registered withdraws the registration, and the requests
    /// waiting on it fail with a local protection error.
    ///
    /// Through iwarpd the STag was reserved ahead (one reservation is kept under way),
    /// the registration request goes out with the memory file and this returns without
    /// waiting for the answer: no control round trip. The daemon holds the requests
    /// naming the STag until the registration arrives; [`Mr::registered`] waits for its
    /// answer.
    pub fn register_queued<B>(&self, data: B, access: Access) -> Result<Mr, MemError>
    where
        B: AsMut<[u8]> + Send + Sync + 'static,
    {
        self.register_with(Region::adopt(data), Base::ZeroBased, access, true)
    }

    /// Allocates a zero-based region of `len` zeroed octets as [`alloc_mr`](Self::alloc_mr)
    /// does, registered through the control queue as
    /// [`register_queued`](Self::register_queued) is.
    pub fn alloc_mr_queued(&self, len: usize, access: Access) -> Result<Mr, MemError> {
        self.register_with(alloc(len)?, Base::ZeroBased, access, true)
    }

    fn register_at(&self, mem: Region, base: Base, access: Access) -> Result<Mr, MemError> {
        self.register_with(mem, base, access, false)
    }

    fn register_with(
        &self,
        mem: Region,
        base: Base,
        access: Access,
        queued: bool,
    ) -> Result<Mr, MemError> {
        let access = access | Access::LOCAL_READ;
        let mut registration = None;
        let stag = match self.home().backend() {
            #[cfg(feature = "embedded")]
            Backend::Embedded(e) => {
                let mem = Arc::new(mem);
                let pd = self.engine_id();
                let stag = match queued {
                    true => e.register_queued(pd, mem.clone(), base, access),
                    false => e.tpt().register_region(pd, mem.clone(), base, access),
                }
                .map_err(|e| MemError::tpt("register", STag::default(), e))?;
                return Ok(Mr::new(self.clone(), stag, base.start(), access, mem));
            }
            Backend::Daemon(c) => {
                let mem = shared(mem)?;
                let va = match base {
                    Base::Va(va) => Some(va),
                    _ => None,
                };
                let req = Request::RegMr {
                    pd: self.id().0,
                    access: u32::from(access.bits()),
                    va,
                    len: mem.len() as u64,
                    offset: mem.file_offset(),
                };
                let fds: Vec<_> = mem.fd().into_iter().collect();
                let daemon_error = |e| self.home().daemon_mem_error("register", &e);
                if queued {
                    // The STag was reserved ahead; the registration's answer comes later,
                    // and requests naming it wait in the daemon until it is done.
                    let stag = c.reserved_stag().map_err(daemon_error)?;
                    let Request::RegMr {
                        pd,
                        access,
                        va,
                        len,
                        offset,
                    } = req
                    else {
                        unreachable!("built above")
                    };
                    let at = Request::RegMrAt {
                        stag: stag.to_u32(),
                        pd,
                        access,
                        va,
                        len,
                        offset,
                    };
                    registration = Some(c.start_registration(&at, &fds).map_err(daemon_error)?);
                    (stag, mem)
                } else {
                    match c.call_with(&req, &fds) {
                        Ok((Reply::Id(stag), _)) => (STag::from_u32(stag), mem),
                        Ok(_) => {
                            let e = DaemonError::Refused("iwarpd answered with no STag".into());
                            return Err(daemon_error(e));
                        }
                        Err(e) => return Err(daemon_error(e)),
                    }
                }
            }
        };
        let (stag, mem) = stag;
        let mem = Arc::new(mem);
        if let Backend::Daemon(c) = self.home().backend() {
            c.remember_region(stag, &mem, base.start());
        }
        let mr = Mr::new(self.clone(), stag, base.start(), access, mem);
        if let Some(r) = registration {
            mr.set_registration(r);
        }
        Ok(mr)
    }
}

/// Memory iwarpd can map: `mem` itself if it is a memory file, else a copy of it in one
/// (memory handed over with `register` lives in this process only, so through the daemon
/// it is copied once, at registration, and the region is the copy).
fn shared(mem: Region) -> Result<Region, MemError> {
    if mem.fd().is_some() || mem.is_empty() {
        return Ok(mem);
    }
    let copy = alloc(mem.len())?;
    if let (Ok(src), Ok(mut dst)) = (mem.view(0, mem.len()), copy.view_mut(0, mem.len())) {
        dst.copy_from_slice(&src);
    }
    Ok(copy)
}

/// `len` zeroed octets of shared memory.
fn alloc(len: usize) -> Result<Region, MemError> {
    Region::alloc(len).map_err(|_| MemError::NoMemory { len })
}
