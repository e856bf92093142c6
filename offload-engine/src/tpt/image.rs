//! A protection domain's entries as plain data, to cross to another process (migration
//! between processes): every region and window under its STag, with each region's octets
//! named by a memory file that crosses beside the image (`SCM_RIGHTS`), so both processes
//! map the same pages and nothing is copied.

use std::collections::HashMap;
use std::os::fd::OwnedFd;
use std::sync::Arc;

use ddp::{Access, STag};

use super::entry::{Binding, Body, Entry, MrEntry, Span, Window};
use super::error::TptError;
use super::ids::{MwType, PdId, QpId};
use super::space;
use super::table::{Table, TakenPd};
use shm::Region;

/// One region or window of a domain.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub(crate) struct EntryImage {
    index: u32,
    instance: u8,
    body: BodyImage,
}

#[derive(Debug, serde::Serialize, serde::Deserialize)]
enum BodyImage {
    Region {
        /// Which of the domain's memory files holds its octets.
        storage: u32,
        span: SpanImage,
        zero_based: bool,
        access: Access,
        valid: bool,
        fast_reg: Option<u64>,
        windows: Vec<u32>,
    },
    Window {
        ty: MwType,
        binding: Option<BindingImage>,
        touched: bool,
    },
}

#[derive(Copy, Clone, Debug, serde::Serialize, serde::Deserialize)]
struct SpanImage {
    to: u64,
    len: u64,
    offset: u64,
}

#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct BindingImage {
    parent: STag,
    storage: u32,
    span: SpanImage,
    access: Access,
    one_touch: bool,
    /// The queue pair of a type 2 window, by its number in the sending process.
    qp: Option<u32>,
}

/// A domain's entries and the memory files they name (`files[i]` is storage `i`, with
/// where it starts in the file and its length).
#[derive(Debug)]
pub(crate) struct PdImage {
    pub(crate) entries: Vec<EntryImage>,
    pub(crate) files: Vec<(OwnedFd, u64, u64)>,
}

impl From<Span> for SpanImage {
    fn from(s: Span) -> Self {
        Self {
            to: s.to,
            len: s.len,
            offset: s.offset as u64,
        }
    }
}

impl TakenPd {
    /// The domain as plain data: each storage once, as a duplicate of its memory file.
    /// Fails for memory that is not in a file (a buffer the application handed over).
    pub(crate) fn image(&self) -> Result<PdImage, String> {
        let mut files: Vec<(OwnedFd, u64, u64)> = Vec::new();
        let mut seen: HashMap<*const Region, u32> = HashMap::new();
        let mut file_of = |st: &Arc<Region>| -> Result<u32, String> {
            if let Some(&i) = seen.get(&Arc::as_ptr(st)) {
                return Ok(i);
            }
            let fd = st.fd().ok_or_else(|| {
                "a region of the domain is memory the application handed over, not a memory \
                 file: it cannot be mapped by another process (register it with a memory \
                 file instead)"
                    .to_owned()
            })?;
            let fd = fd
                .try_clone_to_owned()
                .map_err(|e| format!("cannot duplicate a memory file: {e}"))?;
            let i = files.len() as u32;
            files.push((fd, st.file_offset(), st.len() as u64));
            seen.insert(Arc::as_ptr(st), i);
            Ok(i)
        };
        let mut entries = Vec::with_capacity(self.entries.len());
        for (index, e) in &self.entries {
            let body = match &e.body {
                Body::Region(r) => BodyImage::Region {
                    storage: file_of(&r.storage)?,
                    span: r.span.into(),
                    zero_based: r.zero_based,
                    access: r.access,
                    valid: r.valid,
                    fast_reg: r.fast_reg,
                    windows: r.windows.clone(),
                },
                Body::Window(w) => BodyImage::Window {
                    ty: w.ty,
                    binding: match &w.binding {
                        None => None,
                        Some(b) => Some(BindingImage {
                            parent: b.parent,
                            storage: file_of(&b.storage)?,
                            span: b.span.into(),
                            access: b.access,
                            one_touch: b.one_touch,
                            qp: b.qp.map(u32::from),
                        }),
                    },
                    touched: w.touched,
                },
            };
            entries.push(EntryImage {
                index: *index,
                instance: e.instance,
                body,
            });
        }
        Ok(PdImage { entries, files })
    }
}

impl Table {
    /// Puts a domain that crossed from another process into this table as a new domain
    /// (returned), every entry under the STag it had there, over `storages` (the image's memory
    /// files, mapped); `qp` renumbers the queue pairs type 2 windows are bound to. Fails,
    /// with nothing entered, if an index is taken here or an entry does not fit its
    /// memory.
    pub(super) fn put_image(
        &mut self,
        entries: Vec<EntryImage>,
        storages: &[Arc<Region>],
        qp: impl Fn(u32) -> Option<QpId>,
    ) -> Result<PdId, TptError> {
        if self.live + entries.len() > self.max_entries {
            return Err(TptError::Exhausted);
        }
        // A number of this process's, entered with the entries below.
        let pd = self.alloc_pd();
        self.pds.remove(&pd);
        let storage = |i: u32| storages.get(i as usize).cloned().ok_or(TptError::Exhausted);
        let span = |s: SpanImage, st: &Arc<Region>| -> Result<Span, TptError> {
            let bad = TptError::Bounds {
                start: s.to,
                len: s.len,
            };
            let offset = usize::try_from(s.offset).map_err(|_| bad)?;
            let end = s.offset.checked_add(s.len).ok_or(bad)?;
            if end > st.len() as u64 || s.to.checked_add(s.len).is_none() {
                return Err(bad);
            }
            Ok(Span {
                to: s.to,
                len: s.len,
                offset,
            })
        };
        let mut built = Vec::with_capacity(entries.len());
        for e in entries {
            let body = match e.body {
                BodyImage::Region {
                    storage: i,
                    span: s,
                    zero_based,
                    access,
                    valid,
                    fast_reg,
                    windows,
                } => {
                    let storage = storage(i)?;
                    Body::Region(MrEntry {
                        span: span(s, &storage)?,
                        storage,
                        zero_based,
                        access,
                        valid,
                        fast_reg,
                        windows,
                    })
                }
                BodyImage::Window {
                    ty,
                    binding,
                    touched,
                } => Body::Window(Window {
                    ty,
                    binding: match binding {
                        None => None,
                        Some(b) => {
                            let storage = storage(b.storage)?;
                            Some(Binding {
                                parent: b.parent,
                                span: span(b.span, &storage)?,
                                storage,
                                access: b.access,
                                one_touch: b.one_touch,
                                qp: match b.qp {
                                    None => None,
                                    Some(n) => Some(qp(n).ok_or(TptError::Exhausted)?),
                                },
                            })
                        }
                    },
                    touched,
                }),
            };
            built.push((
                e.index,
                Entry {
                    pd,
                    instance: e.instance,
                    body,
                },
            ));
        }
        // Every index, or none.
        let mut claimed = Vec::with_capacity(built.len());
        {
            let mut space = space::lock(self.space);
            for (index, e) in &built {
                if !space.claim(*index) {
                    for (i, instance) in claimed {
                        space.release(i, instance);
                    }
                    return Err(TptError::InUse {
                        what: "an STag index of the domain",
                        count: 1,
                    });
                }
                claimed.push((*index, e.instance));
            }
        }
        self.put_pd(TakenPd { pd, entries: built })
            .map_err(|(e, _)| e)?;
        Ok(pd)
    }
}
