//! Registered memory: the octets of one memory region, shared by the application that owns
//! them and the engine that places into them and sends from them. With `cverbs` (the C
//! boundary of rdma-core's ABI), the one crate of the workspace with `unsafe` code; every
//! other crate forbids it.
//!
//! A [`Region`] is either
//! - **allocated** ([`Region::alloc`]): a page-aligned `MAP_SHARED` mapping of an anonymous
//!   memory file (memfd). Its file descriptor ([`Region::fd`]) lets a second process (a
//!   local `iwarpd`) map the same pages. The pages go back to the system when the last
//!   [`Region`] handle is dropped (the mapping is unmapped and the memfd closed); or
//! - **adopted** ([`Region::adopt`]): memory the application already has (`Vec<u8>`,
//!   `Box<[u8]>`, `BytesMut`, an aligned allocation of its own), taken over without a copy
//!   and dropped with the last handle; [`Region::adopt_in_file`] when those octets are
//!   also a memory file's (a C program's buffer moved onto the [`arena`]), so that a
//!   daemon maps them from the file.
//!
//! # The access rule, and what Rust guarantees
//!
//! RDMA memory can change at any moment: a peer's RDMA Write lands whenever it arrives,
//! and a Read Response or a Send whenever the connection delivers it. The application does
//! not own a region's octets in Rust's sense while remote access is granted. This crate
//! keeps Rust's aliasing rules all the same, inside one process:
//!
//! - Every access goes through a view: [`Region::view`] (shared, `&[u8]`) or
//!   [`Region::view_mut`] (exclusive, `&mut [u8]`). A view holds the region's lock, a
//!   reader-writer lock, for as long as it lives. The engine's placements take an
//!   exclusive view for the duration of one copy; its reads (a Send's gather list, a Read
//!   Response) a shared one.
//! - So while an application holds a view, nothing in this process changes the octets
//!   under it: a placement into the region waits until the view is dropped. Views are
//!   meant to be short (read a message, fill a buffer); a view held across an `.await` that
//!   waits for the engine to place into the same region deadlocks, which is why views are
//!   not `Send` (a spawned future cannot hold one across an `.await`).
//! - The RDMA rule remains the application's: the octets a view shows are whatever the
//!   last placement left. A region the peer may write can hold new data the next time it
//!   is viewed; a buffer under a posted Send or Write must not be changed until the request
//!   has completed, or the peer may get either version.
//! - A second process that maps the memfd (daemon mode) is outside Rust's model: it writes
//!   with its own copies, and this process sees them as it would see a DMA by hardware.
//!   Only copies made here, under the lock, touch the octets from this process.
//!
//! # Audit
//!
//! The `unsafe` code is: the `Send`/`Sync` impls of [`Region`] and [`Segment`] (raw
//! pointers to memory they own), the two slice constructions in the views (under the
//! lock, bounds checked), taking over and dropping an adopted owner, the three atomic
//! references into a segment and the slice of atomic words its copies go through (bounds
//! and alignment checked), the slice a segment lends
//! as `Bytes` ([`Segment::bytes`]: a part where this process never stores), marking the octets a read wrote
//! into a buffer's spare capacity as its own ([`read_spare`]: the engine's socket reads),
//! and (with the `tokio` feature) registering an owned descriptor with tokio's reactor
//! ([`register_readable`]), and [`arena`]'s remapping of a C program's buffer onto a
//! memory file in place (`mmap` with `MAP_FIXED`, `mremap`, and the kernel's copies at
//! raw addresses, for the C library through a daemon). Each block has its `SAFETY:`
//! comment.
//!
//! Memory files cross process boundaries sealed: [`Region::alloc`] and
//! [`Segment::create`] seal theirs against resizing, and [`Region::map`] and
//! [`Segment::map`] refuse a received file without those seals, so that no process can
//! truncate pages out from under another's mapping (which would raise `SIGBUS` there).

use std::any::Any;
use std::fmt;
use std::fs::File;
use std::io;
use std::ops::{Deref, DerefMut};
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::fs::MetadataExt as _;
use std::ptr::NonNull;
use std::sync::{PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};

use bytes::BytesMut;
use memmap2::{MmapOptions, MmapRaw};

pub mod arena;
#[cfg(feature = "tokio")]
mod async_fd;
mod held;
mod read_spare;
mod sealed;
mod segment;

#[cfg(feature = "tokio")]
pub use async_fd::register_readable;
pub use held::memory_files;
pub use read_spare::read_spare;
pub use segment::Segment;

/// An access outside the region.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct OutOfRange {
    /// Offset asked for.
    pub offset: usize,
    /// Length asked for.
    pub len: usize,
    /// The region's length.
    pub region_len: usize,
}

impl fmt::Display for OutOfRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "octets {}..+{} lie outside the region of {} octets",
            self.offset, self.len, self.region_len
        )
    }
}

impl std::error::Error for OutOfRange {}

/// What keeps a region's octets alive.
enum Backing {
    /// A memfd and its shared mapping (unmapped, then closed, on drop).
    Mapped {
        file: File,
        /// Where in `file` the region's first octet is.
        offset: u64,
        map: MmapRaw,
        _held: held::Held,
    },
    /// An owner the application handed over (as [`Backing::Adopted`]) whose octets are
    /// also the octets at `offset` of `file`: memory the C library moved onto a memory
    /// file in place ([`arena`]), which another process maps from that file.
    AdoptedInFile {
        owner: NonNull<dyn Any + Send + Sync>,
        file: std::sync::Arc<File>,
        offset: u64,
    },
    /// An owner the application handed over, leaked with [`Box::into_raw`] so that no
    /// move of a `Box` ever retags the octets behind `Region::ptr`; rebuilt and dropped in
    /// `Region::drop`.
    Adopted(NonNull<dyn Any + Send + Sync>),
    /// No octets (a zero-length region maps nothing).
    Empty,
}

/// The octets of one memory region. See the [crate docs](crate) for the access rule.
pub struct Region {
    ptr: NonNull<u8>,
    len: usize,
    lock: RwLock<()>,
    backing: Backing,
}

// SAFETY: `Region` owns the octets behind `ptr` (a mapping it created, or an owner that is
// `Send + Sync` and was handed over for good); every access to them goes through a view
// holding `lock`, so moving the region or sharing it between threads creates no
// unsynchronized access.
unsafe impl Send for Region {}
// SAFETY: as above: `&Region` only hands out lock-holding views.
unsafe impl Sync for Region {}

impl Region {
    /// A page-aligned, zero-filled region of `len` octets in a new memfd mapping, shareable
    /// with another process through [`fd`](Self::fd). The pages are allocated now (as an
    /// RNIC pins a region's pages at registration) and returned to the system when the
    /// region is dropped.
    pub fn alloc(len: usize) -> io::Result<Self> {
        if len == 0 {
            return Ok(Self::empty());
        }
        let file = sealed::create("iwarp-region", len)?;
        // Faulted in now, as an RNIC pins a region's pages at registration: a transfer
        // into a fresh region then pays no page fault per 4 KiB.
        let map = MmapOptions::new().len(len).populate().map_raw(&file)?;
        Self::mapped(file, 0, map, len)
    }

    /// Maps `len` octets of a memory file another process created and sent (a local
    /// daemon mapping a client's region). The file must be a memfd sealed against
    /// resizing ([`alloc`](Self::alloc) seals its own) and at least `len` octets long, so
    /// that its creator cannot truncate the pages away under this mapping. Its pages are
    /// mapped on first use, or all at once by [`prefault`](Self::prefault).
    pub fn map(file: File, len: usize) -> io::Result<Self> {
        Self::map_at(file, 0, len)
    }

    /// Maps `len` octets of a memory file another process created and sent, from octet
    /// `offset` of the file (any offset: the mapping starts at the page holding it), with
    /// [`map`](Self::map)'s checks: the file must be sealed against resizing and hold
    /// `offset + len` octets.
    pub fn map_at(file: File, offset: u64, len: usize) -> io::Result<Self> {
        if len == 0 {
            return Ok(Self::empty());
        }
        let end = offset
            .checked_add(len as u64)
            .and_then(|end| usize::try_from(end).ok())
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "region past 2^64"))?;
        sealed::check(&file, end)?;
        // memmap2 maps from the page holding `offset` and points at `offset` itself.
        let map = MmapOptions::new().offset(offset).len(len).map_raw(&file)?;
        Self::mapped(file, offset, map, len)
    }

    fn mapped(file: File, offset: u64, map: MmapRaw, len: usize) -> io::Result<Self> {
        let ptr = NonNull::new(map.as_mut_ptr()).ok_or_else(|| io::Error::other("null mapping"))?;
        Ok(Self {
            ptr,
            len,
            lock: RwLock::new(()),
            backing: Backing::Mapped {
                file,
                offset,
                map,
                _held: held::Held::new(),
            },
        })
    }

    /// Takes over memory the application already has, without copying it: a `Vec<u8>`,
    /// a `Box<[u8]>`, a `BytesMut`, or any owner whose [`AsMut`] names the same octets for
    /// as long as it lives (an aligned allocation of its own). `as_mut` is called once,
    /// here; the owner is dropped with the region.
    pub fn adopt<B>(owner: B) -> Self
    where
        B: AsMut<[u8]> + Send + Sync + 'static,
    {
        Self::take_over(owner, Backing::Adopted)
    }

    /// Takes over memory as [`adopt`](Self::adopt) does, memory whose octets are also the
    /// octets at `offset` of the memory file `file` (the owner's pages are a shared
    /// mapping of that file, as [`arena::share_in_place`] leaves them). Another process
    /// maps the same octets from [`fd`](Self::fd) at [`file_offset`](Self::file_offset).
    pub fn adopt_in_file<B>(owner: B, file: std::sync::Arc<File>, offset: u64) -> Self
    where
        B: AsMut<[u8]> + Send + Sync + 'static,
    {
        Self::take_over(owner, |owner| Backing::AdoptedInFile {
            owner,
            file,
            offset,
        })
    }

    /// Leaks `owner` into a raw pointer kept by the backing `keep` makes of it.
    fn take_over<B>(owner: B, keep: impl FnOnce(NonNull<dyn Any + Send + Sync>) -> Backing) -> Self
    where
        B: AsMut<[u8]> + Send + Sync + 'static,
    {
        let raw: *mut B = Box::into_raw(Box::new(owner));
        // SAFETY: `raw` comes from `Box::into_raw` just above: valid, aligned, and ours
        // alone; the `&mut` lives only for this call.
        let octets: &mut [u8] = unsafe { &mut *raw }.as_mut();
        let (ptr, len) = (octets.as_mut_ptr(), octets.len());
        let erased: *mut (dyn Any + Send + Sync) = raw;
        let Some(owner) = NonNull::new(erased) else {
            unreachable!("Box::into_raw is never null")
        };
        Self {
            ptr: NonNull::new(ptr).unwrap_or(NonNull::dangling()),
            len,
            lock: RwLock::new(()),
            backing: keep(owner),
        }
    }

    /// A region of no octets.
    pub fn empty() -> Self {
        Self {
            ptr: NonNull::dangling(),
            len: 0,
            lock: RwLock::new(()),
            backing: Backing::Empty,
        }
    }

    /// Length in octets.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True for a region of no octets.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Maps every page of a [`map`](Self::map)ped region into this process now (as an
    /// RNIC pins a region at registration), so that transfers through it take no page
    /// fault per 4 KiB; may take a while for a large region, so a caller on an event
    /// loop runs it on a blocking thread. It changes no octet, so transfers may run
    /// meanwhile. True if it did; false, doing nothing, for a region over pages its
    /// creator never wrote (a hole would be allocated here, at this process's expense: a
    /// client could make a daemon take memory it never touched), and for other regions.
    pub fn prefault(&self) -> io::Result<bool> {
        let Backing::Mapped {
            map, file, offset, ..
        } = &self.backing
        else {
            return Ok(false);
        };
        // A memory file's blocks are the pages it holds (512-octet units): all of them,
        // or it has a hole somewhere; then the first hole from the region on must lie
        // past its end (the end of the file counts as a hole).
        let meta = file.metadata()?;
        if meta.blocks().saturating_mul(512) < meta.len() {
            // Only a tmpfs file (a memfd) reports its holes; another (hugetlbfs) is all
            // data to SEEK_HOLE.
            const TMPFS_MAGIC: i64 = 0x0102_1994;
            if rustix::fs::fstatfs(file)?.f_type as i64 != TMPFS_MAGIC {
                return Ok(false);
            }
            let hole = rustix::fs::seek(file, rustix::fs::SeekFrom::Hole(*offset))?;
            if hole < offset.saturating_add(self.len as u64) {
                return Ok(false);
            }
        }
        map.advise(memmap2::Advice::PopulateWrite)?;
        Ok(true)
    }

    /// The memfd behind an [`alloc`](Self::alloc)ated or mapped region (or one adopted
    /// [in a file](Self::adopt_in_file)), which another process can map to reach the same
    /// pages, from [`file_offset`](Self::file_offset); `None` for other adopted memory.
    pub fn fd(&self) -> Option<BorrowedFd<'_>> {
        match &self.backing {
            Backing::Mapped { file, .. } => Some(file.as_fd()),
            Backing::AdoptedInFile { file, .. } => Some(file.as_fd()),
            _ => None,
        }
    }

    /// Where in its [`fd`](Self::fd)'s file the region's first octet is (0 for an
    /// allocated region, and for memory in no file).
    pub fn file_offset(&self) -> u64 {
        match &self.backing {
            Backing::Mapped { offset, .. } | Backing::AdoptedInFile { offset, .. } => *offset,
            _ => 0,
        }
    }

    /// A shared view of `[offset, offset + len)`. Exclusive views (and the engine's
    /// placements) wait while it lives.
    pub fn view(&self, offset: usize, len: usize) -> Result<View<'_>, OutOfRange> {
        self.check(offset, len)?;
        let guard = self.lock.read().unwrap_or_else(PoisonError::into_inner);
        // SAFETY: `check` proved `offset + len <= self.len`, so the range lies inside the
        // `self.len` octets behind `ptr`, which live as long as `self`. The shared lock is
        // held for the slice's whole life, so no `&mut` to these octets exists meanwhile.
        let octets =
            unsafe { std::slice::from_raw_parts(self.ptr.as_ptr().wrapping_add(offset), len) };
        Ok(View {
            octets,
            _guard: guard,
        })
    }

    /// An exclusive view of `[offset, offset + len)`: every other view of the region (and
    /// every placement into it) waits while it lives.
    pub fn view_mut(&self, offset: usize, len: usize) -> Result<ViewMut<'_>, OutOfRange> {
        self.check(offset, len)?;
        let guard = self.lock.write().unwrap_or_else(PoisonError::into_inner);
        // SAFETY: the range lies inside the region (`check`), and the exclusive lock is held
        // for the slice's whole life, so no other reference to these octets exists.
        let start = self.ptr.as_ptr().wrapping_add(offset);
        // SAFETY: (continued) `start` is `offset` octets into the region, inside it.
        let octets = unsafe { std::slice::from_raw_parts_mut(start, len) };
        Ok(ViewMut {
            octets,
            _guard: guard,
        })
    }

    /// Copies `[offset, offset + dst.len())` into `dst`.
    pub fn read_at(&self, offset: usize, dst: &mut [u8]) -> Result<(), OutOfRange> {
        dst.copy_from_slice(&self.view(offset, dst.len())?);
        Ok(())
    }

    /// Appends `[offset, offset + len)` to `dst` (one copy, no zero-fill first).
    pub fn append_to(
        &self,
        offset: usize,
        len: usize,
        dst: &mut BytesMut,
    ) -> Result<(), OutOfRange> {
        dst.extend_from_slice(&self.view(offset, len)?);
        Ok(())
    }

    /// Copies `src` to `[offset, offset + src.len())`.
    pub fn write_at(&self, offset: usize, src: &[u8]) -> Result<(), OutOfRange> {
        self.view_mut(offset, src.len())?.copy_from_slice(src);
        Ok(())
    }

    /// Replaces the little-endian `u64` at `offset` with `op(original)` under the exclusive
    /// lock (atomic with respect to every other access from this process) and returns the
    /// original.
    pub fn update_u64(
        &self,
        offset: usize,
        op: &mut dyn FnMut(u64) -> u64,
    ) -> Result<u64, OutOfRange> {
        let mut view = self.view_mut(offset, 8)?;
        let word: &mut [u8; 8] = match (&mut *view).try_into() {
            Ok(w) => w,
            Err(_) => unreachable!("a view of 8 octets"),
        };
        let orig = u64::from_le_bytes(*word);
        *word = op(orig).to_le_bytes();
        Ok(orig)
    }

    fn check(&self, offset: usize, len: usize) -> Result<(), OutOfRange> {
        match offset.checked_add(len) {
            Some(end) if end <= self.len => Ok(()),
            _ => Err(OutOfRange {
                offset,
                len,
                region_len: self.len,
            }),
        }
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        if let Backing::Adopted(owner) | Backing::AdoptedInFile { owner, .. } = self.backing {
            // SAFETY: `owner` came from `Box::into_raw` in `take_over` and is rebuilt
            // exactly once, here; no view can exist (they borrow `self`).
            drop(unsafe { Box::from_raw(owner.as_ptr()) });
        }
        // A mapping is unmapped by `MmapRaw`'s drop, then the memfd closed by `File`'s.
    }
}

impl Default for Region {
    fn default() -> Self {
        Self::empty()
    }
}

impl fmt::Debug for Region {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = match self.backing {
            Backing::Mapped { .. } => "memfd",
            Backing::Adopted(_) => "adopted",
            Backing::AdoptedInFile { .. } => "adopted, in a memfd",
            Backing::Empty => "empty",
        };
        f.debug_struct("Region")
            .field("len", &self.len)
            .field("backing", &kind)
            .finish()
    }
}

/// A shared view of part of a [`Region`] (derefs to `&[u8]`). Not `Send`: drop it before
/// awaiting anything that may need the engine to place into the same region.
pub struct View<'a> {
    octets: &'a [u8],
    _guard: RwLockReadGuard<'a, ()>,
}

impl Deref for View<'_> {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        self.octets
    }
}

impl fmt::Debug for View<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("View")
            .field("len", &self.octets.len())
            .finish()
    }
}

/// An exclusive view of part of a [`Region`] (derefs to `&mut [u8]`). Not `Send`.
pub struct ViewMut<'a> {
    octets: &'a mut [u8],
    _guard: RwLockWriteGuard<'a, ()>,
}

impl Deref for ViewMut<'_> {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        self.octets
    }
}

impl DerefMut for ViewMut<'_> {
    fn deref_mut(&mut self) -> &mut [u8] {
        self.octets
    }
}

impl fmt::Debug for ViewMut<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ViewMut")
            .field("len", &self.octets.len())
            .finish()
    }
}

#[cfg(test)]
mod tests;
