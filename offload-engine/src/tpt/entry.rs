//! One TPT entry (a region or a window) and the ordered access checks.

use std::sync::Arc;

use ddp::{Access, STag};
use rdmap::AccessError;

use super::error::TptError;
use super::ids::{Base, MwType, PdId, QpId};
use shm::Region;

/// What kind of object an entry is.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum EntryKind {
    /// A region registered by [`Tpt::register`](super::Tpt::register).
    Region,
    /// A region allocated by [`Tpt::alloc_fast_reg`](super::Tpt::alloc_fast_reg), armed by
    /// fast registration work requests.
    FastReg {
        /// The longest registration it takes.
        max_len: u64,
    },
    /// A memory window.
    Window(MwType),
}

/// A snapshot of one entry, from [`Tpt::info`](super::Tpt::info).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct EntryInfo {
    /// The STag the entry answers to now.
    pub stag: STag,
    /// Region, fast-registration region or window.
    pub kind: EntryKind,
    /// The protection domain.
    pub pd: PdId,
    /// True while the entry may be accessed (a window: while it is bound).
    pub valid: bool,
    /// Tagged offset of the first octet (a window: in its region's tagged offsets).
    pub to: u64,
    /// True for a zero-based region (tagged offsets start at 0).
    pub zero_based: bool,
    /// Length in octets (0 for an unbound window).
    pub len: u64,
    /// Rights granted.
    pub access: Access,
    /// The queue pair a bound type 2 window is tied to.
    pub bound_qp: Option<QpId>,
    /// The region a bound window lies in.
    pub parent: Option<STag>,
    /// The window invalidates itself after the first RDMA message that targets it.
    pub one_touch: bool,
    /// A one-touch window was used up by its message (reset by the next bind).
    pub touched: bool,
    /// Number of windows bound to a region.
    pub windows: usize,
}

/// The part of a storage an entry exposes: tagged offsets `[to, to + len)` map to storage
/// octets `[offset, offset + len)`. `to + len` never wraps and `offset + len` never exceeds
/// the storage (checked when the span is made).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(super) struct Span {
    pub(super) to: u64,
    pub(super) len: u64,
    pub(super) offset: usize,
}

impl Span {
    /// Check (e) for an access of `len` octets at `to`: the storage offset of `to`
    /// (DDP's one tagged-bounds check, [`ddp::tagged_offset`]).
    pub(super) fn locate(&self, to: u64, len: u64) -> Result<usize, AccessError> {
        let rel = ddp::tagged_offset(to, len, self.to, self.len).map_err(AccessError::range)?;
        usize::try_from(rel)
            .ok()
            .and_then(|rel| self.offset.checked_add(rel))
            .ok_or(AccessError::Bounds)
    }

    /// The sub-span `[to, to + len)`, for a window bound inside this region.
    pub(super) fn sub(&self, to: u64, len: u64) -> Result<Self, TptError> {
        let offset = self
            .locate(to, len)
            .map_err(|_| TptError::Bounds { start: to, len })?;
        Ok(Self { to, len, offset })
    }
}

/// A memory region: registered storage, or a fast-registration region.
#[derive(Debug)]
pub(super) struct MrEntry {
    pub(super) storage: Arc<Region>,
    pub(super) span: Span,
    pub(super) zero_based: bool,
    pub(super) access: Access,
    pub(super) valid: bool,
    /// `Some(max_len)` for a region allocated for fast registration.
    pub(super) fast_reg: Option<u64>,
    /// Indices of the windows bound to this region.
    pub(super) windows: Vec<u32>,
}

/// What a bound window exposes.
#[derive(Debug)]
pub(super) struct Binding {
    pub(super) parent: STag,
    pub(super) storage: Arc<Region>,
    pub(super) span: Span,
    pub(super) access: Access,
    pub(super) one_touch: bool,
    /// The queue pair of a type 2 window.
    pub(super) qp: Option<QpId>,
}

/// A memory window, bound or not.
#[derive(Debug)]
pub(super) struct Window {
    pub(super) ty: MwType,
    pub(super) binding: Option<Binding>,
    pub(super) touched: bool,
}

/// Region or window.
#[derive(Debug)]
pub(super) enum Body {
    Region(MrEntry),
    Window(Window),
}

/// One slot's content.
#[derive(Debug)]
pub(super) struct Entry {
    pub(super) pd: PdId,
    pub(super) instance: u8,
    pub(super) body: Body,
}

/// Who asks for an access: a queue pair of a domain, or the application itself (`qp`
/// `None`, local access only).
#[derive(Copy, Clone, Debug)]
pub(super) struct Requester {
    pub(super) pd: PdId,
    pub(super) qp: Option<QpId>,
}

const LOCAL: Access = Access::LOCAL_READ.union(Access::LOCAL_WRITE);

impl Entry {
    /// True while the entry may be accessed.
    pub(super) fn is_valid(&self) -> bool {
        match &self.body {
            Body::Region(r) => r.valid,
            Body::Window(w) => w.binding.is_some(),
        }
    }

    /// The ordered checks for an access of `len` octets at `to` with `access`: (a) valid,
    /// (b) kind (windows serve remote access only), (c) protection domain and queue pair
    /// association, (d) tag instance, (e) wrap and bounds, (f) rights. The first failure
    /// decides the error. Returns the storage and the offset of `to` in it.
    pub(super) fn check(
        &self,
        stag: STag,
        who: Requester,
        to: u64,
        len: u64,
        access: Access,
    ) -> Result<(&Arc<Region>, usize), AccessError> {
        let local = !access.intersection(LOCAL).is_empty();
        let (storage, span, rights, bound_qp) = match &self.body {
            Body::Region(r) if r.valid => (&r.storage, r.span, r.access, None),
            Body::Window(w) if !local => match &w.binding {
                Some(b) => (&b.storage, b.span, b.access, b.qp),
                None => return Err(AccessError::InvalidStag),
            },
            _ => return Err(AccessError::InvalidStag),
        };
        if self.pd != who.pd || bound_qp.is_some_and(|qp| who.qp != Some(qp)) {
            return Err(AccessError::NotAssociated);
        }
        if stag.instance() != self.instance {
            return Err(AccessError::InvalidStag);
        }
        let offset = span.locate(to, len)?;
        let missing = access.difference(rights);
        if !missing.is_empty() {
            return Err(AccessError::Rights { missing });
        }
        Ok((storage, offset))
    }

    /// A snapshot for [`Tpt::info`](super::Tpt::info).
    pub(super) fn info(&self, stag: STag) -> EntryInfo {
        let mut info = EntryInfo {
            stag,
            kind: EntryKind::Region,
            pd: self.pd,
            valid: self.is_valid(),
            to: 0,
            zero_based: false,
            len: 0,
            access: Access::NONE,
            bound_qp: None,
            parent: None,
            one_touch: false,
            touched: false,
            windows: 0,
        };
        match &self.body {
            Body::Region(r) => {
                if let Some(max_len) = r.fast_reg {
                    info.kind = EntryKind::FastReg { max_len };
                }
                info.to = r.span.to;
                info.zero_based = r.zero_based;
                info.len = r.span.len;
                info.access = r.access;
                info.windows = r.windows.len();
            }
            Body::Window(w) => {
                info.kind = EntryKind::Window(w.ty);
                info.touched = w.touched;
                if let Some(b) = &w.binding {
                    info.to = b.span.to;
                    info.len = b.span.len;
                    info.access = b.access;
                    info.bound_qp = b.qp;
                    info.parent = Some(b.parent);
                    info.one_touch = b.one_touch;
                }
            }
        }
        info
    }
}

impl MrEntry {
    /// A region over `storage` with the given addressing (it may end exactly at 2^64).
    pub(super) fn new(storage: Arc<Region>, base: Base, access: Access) -> Result<Self, TptError> {
        let len = storage.len() as u64;
        let to = base.start();
        if ddp::tagged_offset(to, len, to, len).is_err() {
            return Err(TptError::Bounds { start: to, len });
        }
        Ok(Self {
            storage,
            span: Span { to, len, offset: 0 },
            zero_based: base == Base::ZeroBased,
            access,
            valid: true,
            fast_reg: None,
            windows: Vec::new(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn region(base: Base, len: usize, access: Access) -> Entry {
        let storage = Arc::new(Region::adopt(vec![0u8; len]));
        Entry {
            pd: PdId::new(1),
            instance: 3,
            body: Body::Region(MrEntry::new(storage, base, access).unwrap()),
        }
    }

    const ME: Requester = Requester {
        pd: PdId::new(1),
        qp: Some(QpId::new(9)),
    };

    #[test]
    fn span_locate() {
        let s = Span {
            to: 0x1000,
            len: 0x100,
            offset: 8,
        };
        assert_eq!(s.locate(0x1000, 0x100), Ok(8));
        assert_eq!(s.locate(0x10ff, 1), Ok(8 + 0xff));
        assert_eq!(s.locate(0x1100, 0), Ok(8 + 0x100));
        assert_eq!(s.locate(0x10ff, 2), Err(AccessError::Bounds));
        assert_eq!(s.locate(0xfff, 1), Err(AccessError::Bounds));
        assert_eq!(s.locate(u64::MAX, 2), Err(AccessError::ToWrap));
        assert_eq!(
            s.sub(0x1010, 0x10),
            Ok(Span {
                to: 0x1010,
                len: 0x10,
                offset: 0x18
            })
        );
        assert!(s.sub(0x10f0, 0x11).is_err());
    }

    #[test]
    fn check_order_on_a_region() {
        let e = region(Base::Va(0x1000), 16, Access::LOCAL_READ);
        let stag = STag::new(5, 3);
        assert!(e.check(stag, ME, 0x1000, 16, Access::LOCAL_READ).is_ok());
        let other = Requester {
            pd: PdId::new(2),
            qp: None,
        };
        // Every later check fails too: the first failing one decides.
        assert_eq!(
            e.check(stag.with_instance(4), other, u64::MAX, 2, Access::ALL)
                .unwrap_err(),
            AccessError::NotAssociated
        );
        assert_eq!(
            e.check(stag.with_instance(4), ME, u64::MAX, 2, Access::ALL)
                .unwrap_err(),
            AccessError::InvalidStag
        );
        assert_eq!(
            e.check(stag, ME, u64::MAX, 2, Access::ALL).unwrap_err(),
            AccessError::ToWrap
        );
        assert_eq!(
            e.check(stag, ME, 0x1001, 16, Access::ALL).unwrap_err(),
            AccessError::Bounds
        );
        assert_eq!(
            e.check(
                stag,
                ME,
                0x1000,
                16,
                Access::LOCAL_READ | Access::REMOTE_WRITE
            )
            .unwrap_err(),
            AccessError::Rights {
                missing: Access::REMOTE_WRITE
            }
        );
    }

    #[test]
    fn region_addressing_cannot_wrap() {
        let storage = Arc::new(Region::adopt(vec![0u8; 16]));
        assert_eq!(
            MrEntry::new(storage, Base::Va(u64::MAX - 8), Access::NONE).unwrap_err(),
            TptError::Bounds {
                start: u64::MAX - 8,
                len: 16
            }
        );
    }

    #[test]
    fn info_of_a_region() {
        let e = region(Base::ZeroBased, 32, Access::REMOTE_READ);
        let info = e.info(STag::new(5, 3));
        assert_eq!(info.kind, EntryKind::Region);
        assert!(info.valid && info.zero_based);
        assert_eq!(
            (info.to, info.len, info.access),
            (0, 32, Access::REMOTE_READ)
        );
    }
}
