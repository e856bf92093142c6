//! [`QpMemory`]: one queue pair's view of the TPT, the [`rdmap::Memory`] its stream uses.

use std::sync::Arc;

use bytes::BytesMut;
use ddp::{Access, STag};
use rdmap::{AccessError, Bind, FastReg, LocalOps, Memory};

use super::entry::{Binding, Body, Entry, MrEntry, Requester, Window};
use super::error::TptError;
use super::ids::{MwType, PdId, QpId};
use super::octets::bounds;
use super::{Tpt, fast_reg_span};
use shm::Region;

/// The remote rights, any of which makes a fast-registration region remotely invalidatable.
const REMOTE: Access = Access::REMOTE_READ
    .union(Access::REMOTE_WRITE)
    .union(Access::REMOTE_ATOMIC);

/// One queue pair's view of the TPT: it knows the queue pair's protection domain and
/// number, so every access runs the association checks. Cheap to create
/// ([`Tpt::view`]); the stream of the queue pair owns it.
#[derive(Debug)]
pub struct QpMemory {
    tpt: Arc<Tpt>,
    pd: PdId,
    qp: QpId,
}

impl QpMemory {
    /// A view for queue pair `qp` of domain `pd`.
    pub fn new(tpt: Arc<Tpt>, pd: PdId, qp: QpId) -> Self {
        Self { tpt, pd, qp }
    }

    /// The protection domain of the queue pair.
    pub fn pd(&self) -> PdId {
        self.pd
    }

    /// The queue pair.
    pub fn qp(&self) -> QpId {
        self.qp
    }

    /// The TPT behind the view.
    pub fn tpt(&self) -> &Arc<Tpt> {
        &self.tpt
    }

    fn requester(&self) -> Requester {
        Requester {
            pd: self.pd,
            qp: Some(self.qp),
        }
    }

    fn resolve(
        &self,
        stag: STag,
        to: u64,
        len: u64,
        access: Access,
    ) -> Result<(Arc<Region>, usize), AccessError> {
        self.tpt.resolve(self.requester(), stag, to, len, access)
    }

    /// The association check shared by the invalidations: the entry's domain, and the
    /// queue pair of a bound type 2 window.
    fn associated(&self, e: &Entry) -> Result<(), AccessError> {
        let other_qp = match &e.body {
            Body::Window(Window {
                binding: Some(b), ..
            }) => b.qp.is_some_and(|qp| qp != self.qp),
            _ => false,
        };
        if e.pd != self.pd || other_qp {
            return Err(AccessError::NotAssociated);
        }
        Ok(())
    }

    /// True if `stag` names a bound one-touch window this view may use up.
    fn is_one_touch(&self, e: &Entry, stag: STag) -> bool {
        e.instance == stag.instance()
            && self.associated(e).is_ok()
            && matches!(&e.body, Body::Window(Window { binding: Some(b), .. }) if b.one_touch)
    }
}

impl Memory for QpMemory {
    fn check(&self, stag: STag, to: u64, len: u32, access: Access) -> Result<(), AccessError> {
        self.resolve(stag, to, len.into(), access).map(|_| ())
    }

    fn write(
        &mut self,
        stag: STag,
        to: u64,
        data: &[u8],
        access: Access,
    ) -> Result<(), AccessError> {
        let (storage, off) = self.resolve(stag, to, data.len() as u64, access)?;
        storage.write_at(off, data).map_err(bounds)
    }

    fn read(
        &mut self,
        stag: STag,
        to: u64,
        dst: &mut [u8],
        access: Access,
    ) -> Result<(), AccessError> {
        let (storage, off) = self.resolve(stag, to, dst.len() as u64, access)?;
        storage.read_at(off, dst).map_err(bounds)
    }

    fn read_append(
        &mut self,
        stag: STag,
        to: u64,
        len: usize,
        dst: &mut BytesMut,
        access: Access,
    ) -> Result<(), AccessError> {
        let (storage, off) = self.resolve(stag, to, len as u64, access)?;
        storage.append_to(off, len, dst).map_err(bounds)
    }

    fn in_place(
        &mut self,
        stag: STag,
        to: u64,
        len: usize,
        access: Access,
    ) -> Result<Option<(Arc<Region>, usize)>, AccessError> {
        self.resolve(stag, to, len as u64, access).map(Some)
    }

    fn atomic(
        &mut self,
        stag: STag,
        to: u64,
        op: &mut dyn FnMut(u64) -> u64,
    ) -> Result<u64, AccessError> {
        let (storage, off) = self.resolve(stag, to, 8, Access::REMOTE_ATOMIC)?;
        storage.update_u64(off, op).map_err(bounds)
    }

    /// Send with Invalidate. In order: the entry is valid ([`AccessError::InvalidStag`]),
    /// of this queue pair's domain and, for a type 2 window, bound to this queue pair
    /// ([`AccessError::NotAssociated`]), answers to the STag's instance (`InvalidStag`),
    /// and may be invalidated remotely: a type 2 window, or a fast-registration region
    /// with a remote right (without one: [`AccessError::Rights`]). Ordinary regions and
    /// type 1 windows fail with [`AccessError::CannotInvalidate`].
    fn invalidate(&mut self, stag: STag) -> Result<(), AccessError> {
        let mut t = self.tpt.table_mut();
        let e = t
            .entry(stag)
            .filter(|e| e.is_valid())
            .ok_or(AccessError::InvalidStag)?;
        self.associated(e)?;
        if e.instance != stag.instance() {
            return Err(AccessError::InvalidStag);
        }
        match &e.body {
            Body::Region(MrEntry { fast_reg: None, .. })
            | Body::Window(Window {
                ty: MwType::One, ..
            }) => return Err(AccessError::CannotInvalidate),
            Body::Region(r) if !r.access.is_remote() => {
                return Err(AccessError::Rights { missing: REMOTE });
            }
            _ => {}
        }
        t.invalidate(stag.index());
        tracing::debug!(qp = %self.qp, %stag, "remotely invalidated");
        Ok(())
    }

    /// The last segment of an RDMA Write to `stag` was placed: a one-touch window is used
    /// up now (Table D row 4; see the module docs for why it is the only row that occurs).
    fn message_placed(&mut self, stag: STag) {
        let hit = {
            let t = self.tpt.table();
            t.entry(stag).is_some_and(|e| self.is_one_touch(e, stag))
        };
        if !hit {
            return;
        }
        let mut t = self.tpt.table_mut();
        // Re-check under the write lock: another thread may have changed the entry.
        if !t.entry(stag).is_some_and(|e| self.is_one_touch(e, stag)) {
            return;
        }
        t.unbind(stag.index());
        if let Some(Entry {
            body: Body::Window(w),
            ..
        }) = t.entry_mut(stag)
        {
            w.touched = true;
        }
        tracing::debug!(qp = %self.qp, %stag, "one-touch window used up");
    }
}

impl LocalOps for QpMemory {
    /// Local Invalidate work request. In order: the index has an entry
    /// ([`AccessError::InvalidStag`]), it is a fast-registration region or a type 2 window
    /// ([`AccessError::CannotInvalidate`]; ordinary regions are deregistered, type 1
    /// windows unbound by the verb), of this domain and (type 2 window) bound to this
    /// queue pair if bound ([`AccessError::NotAssociated`]), and answers to the STag's
    /// instance (`InvalidStag`). An entry that is invalid already stays so.
    fn local_invalidate(&mut self, stag: STag) -> Result<(), AccessError> {
        let mut t = self.tpt.table_mut();
        let e = t.entry(stag).ok_or(AccessError::InvalidStag)?;
        if let Body::Region(MrEntry { fast_reg: None, .. })
        | Body::Window(Window {
            ty: MwType::One, ..
        }) = e.body
        {
            return Err(AccessError::CannotInvalidate);
        }
        self.associated(e)?;
        if e.instance != stag.instance() {
            return Err(AccessError::InvalidStag);
        }
        t.invalidate(stag.index());
        Ok(())
    }

    /// Fast registration work request. In order: the index holds a fast-registration
    /// region ([`AccessError::InvalidStag`]) of this domain
    /// ([`AccessError::NotAssociated`]) that is invalid now (a valid one must be
    /// invalidated first: `InvalidStag`), `to + len` does not wrap
    /// ([`AccessError::ToWrap`]) and `len` is at most the allocated length
    /// ([`AccessError::Bounds`]). The region then answers to `fr.stag`'s instance.
    fn fast_register(&mut self, fr: &FastReg) -> Result<(), AccessError> {
        let mut t = self.tpt.table_mut();
        let e = t.entry_mut(fr.stag).ok_or(AccessError::InvalidStag)?;
        let pd = e.pd;
        let Body::Region(r) = &mut e.body else {
            return Err(AccessError::InvalidStag);
        };
        let Some(max_len) = r.fast_reg else {
            return Err(AccessError::InvalidStag);
        };
        if pd != self.pd {
            return Err(AccessError::NotAssociated);
        }
        if r.valid {
            return Err(AccessError::InvalidStag);
        }
        r.span = fast_reg_span(fr.to, fr.len, max_len)?;
        r.access = fr.access;
        r.valid = true;
        e.instance = fr.stag.instance();
        Ok(())
    }

    /// Bind work request for a type 2 window. In order: the index holds a type 2 window
    /// (`InvalidStag`) of this domain (`NotAssociated`) that is unbound (`InvalidStag`);
    /// then the region: valid, a region, of this domain, instance, wrap and bounds, the
    /// rights the window's need (`Access::needed_to_bind`). The window is tied to this queue pair
    /// and answers to `bind.mw`'s instance.
    /// A region registered through the control queue whose registration is not done
    /// (see `cqp`): the control queue wakes the domain's queue pairs when it is.
    fn registration_pending(&self, stag: STag) -> bool {
        self.tpt.has_pending() && self.tpt.is_pending(stag)
    }

    fn bind(&mut self, bind: &Bind) -> Result<(), AccessError> {
        let mut t = self.tpt.table_mut();
        let e = t.entry(bind.mw).ok_or(AccessError::InvalidStag)?;
        let Body::Window(w) = &e.body else {
            return Err(AccessError::InvalidStag);
        };
        if w.ty != MwType::Two {
            return Err(AccessError::InvalidStag);
        }
        if e.pd != self.pd {
            return Err(AccessError::NotAssociated);
        }
        if w.binding.is_some() {
            return Err(AccessError::InvalidStag);
        }
        let (span, storage) = t
            .bind_target(bind.mr, self.pd, bind.to, bind.len, bind.access)
            .map_err(TptError::to_access)?;
        let binding = Binding {
            parent: bind.mr,
            storage,
            span,
            access: bind.access,
            one_touch: bind.one_touch,
            qp: Some(self.qp),
        };
        t.attach(bind.mw.index(), binding, bind.mw.instance());
        Ok(())
    }
}
