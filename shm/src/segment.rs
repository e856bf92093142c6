//! [`Segment`]: a small shared-memory segment two processes use to talk without system
//! calls: ring indices, doorbell words and fixed-size slots (the split driver's data
//! channel, the push region).
//!
//! Unlike a [`Region`](crate::Region), a segment has no lock: the other process writes it
//! whenever it likes. Every access from this process is therefore atomic: words are
//! [`AtomicU32`]/[`AtomicU64`] references, and [`read`](Segment::read) and
//! [`write`](Segment::write) copy with relaxed atomic loads and stores. Two processes can
//! then race on a slot (a client scribbling over its own ring while the daemon reads it)
//! without undefined behaviour in either: the reader gets some octets, which it
//! validates. Ordering between a payload and the word that publishes it is the caller's:
//! write the octets, then store the word with `Release`; load the word with `Acquire`,
//! then read the octets.

use std::fmt;
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, BorrowedFd};
use std::ptr::NonNull;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, AtomicU32, AtomicU64, Ordering};

use bytes::Bytes;
use memmap2::{MmapOptions, MmapRaw};

use crate::held::Held;
use crate::sealed;

/// A shared-memory segment: a sealed memfd mapped `MAP_SHARED`, reached only with atomic
/// accesses.
pub struct Segment {
    ptr: NonNull<u8>,
    len: usize,
    /// Octets from here on are the other process's to write: this process only reads
    /// them, and may lend them ([`bytes`](Self::bytes)). `len` when none are.
    lent_from: usize,
    file: File,
    _map: MmapRaw,
    _held: Held,
}

// SAFETY: the segment owns its mapping; every access through `&Segment` is atomic, so
// sharing it between threads creates no data race.
unsafe impl Send for Segment {}
// SAFETY: as above.
unsafe impl Sync for Segment {}

impl Segment {
    /// A new zero-filled segment of `len` octets (rounded up to 8), named `name`, sealed
    /// against resizing, to be sent to another process with [`fd`](Self::fd).
    pub fn create(name: &str, len: usize) -> io::Result<Self> {
        let len = len.max(8).next_multiple_of(8);
        let file = sealed::create(name, len)?;
        Self::with(file, len)
    }

    /// Maps `len` octets of a segment another process created and sent. The file must be
    /// sealed against resizing and at least `len` octets long.
    pub fn map(file: File, len: usize) -> io::Result<Self> {
        let len = len.max(8).next_multiple_of(8);
        sealed::check(&file, len)?;
        Self::with(file, len)
    }

    fn with(file: File, len: usize) -> io::Result<Self> {
        let map = MmapOptions::new().len(len).map_raw(&file)?;
        let ptr = NonNull::new(map.as_mut_ptr()).ok_or_else(|| io::Error::other("null mapping"))?;
        Ok(Self {
            ptr,
            len,
            lent_from: len,
            file,
            _map: map,
            _held: Held::new(),
        })
    }

    /// Makes the octets from `from` on the other process's to write: from now on this
    /// process may only read them, with [`read`](Self::read) or as [`bytes`](Self::bytes)
    /// lent without a copy, and [`write`](Self::write), [`u32`](Self::u32) and
    /// [`u64`](Self::u64) panic there.
    ///
    /// # Panics
    ///
    /// If `from` lies beyond the segment.
    pub fn lending(mut self, from: usize) -> Self {
        assert!(
            from <= self.len,
            "lending from {from} in a segment of {}",
            self.len
        );
        self.lent_from = from;
        self
    }

    /// `len` octets at `offset`, in the part [`lending`](Self::lending) set aside, as
    /// [`Bytes`] without a copy: a payload the other process put there, which this
    /// process hands on (a socket write, a checksum) instead of copying it out first. The
    /// `Bytes` keeps the mapping alive.
    ///
    /// The other process can still write those octets. This process sees such a write as
    /// it sees a DMA into a registered region ([the access rule](crate#the-access-rule-and-what-rust-guarantees)):
    /// what it reads is whatever the other process left, trusted for nothing. Keeping
    /// the octets unchanged until this process is done with them is the other
    /// process's side of the protocol, as a buffer under a posted Send is the
    /// application's.
    ///
    /// # Panics
    ///
    /// If the range is not inside the lent part.
    pub fn bytes(self: &Arc<Self>, offset: usize, len: usize) -> Bytes {
        self.check(offset, len, 1);
        assert!(
            offset >= self.lent_from,
            "segment octets {offset}..+{len} are not lent (from {})",
            self.lent_from
        );
        Bytes::from_owner(Lent {
            seg: self.clone(),
            offset,
            len,
        })
    }

    /// Length in octets.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Never true (a segment has at least 8 octets).
    pub fn is_empty(&self) -> bool {
        false
    }

    /// The memory file, to send to the other process.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.file.as_fd()
    }

    /// The 32-bit word at `offset`.
    ///
    /// # Panics
    ///
    /// If `offset` is not a multiple of 4, or the word lies outside the segment or in its
    /// [lent](Self::lending) part: offsets come from the caller's layout, never from the
    /// other process.
    pub fn u32(&self, offset: usize) -> &AtomicU32 {
        self.check(offset, 4, 4);
        self.check_own(offset, 4);
        // SAFETY: `check` proved the 4 octets at `offset` lie inside the mapping, which
        // lives as long as `self`, and that `offset` (and so the page-aligned mapping's
        // address plus it) is 4-aligned. The octets are only ever accessed atomically
        // from this process.
        unsafe { AtomicU32::from_ptr(self.ptr.as_ptr().wrapping_add(offset).cast()) }
    }

    /// The 64-bit word at `offset` (see [`u32`](Self::u32) for the panics).
    pub fn u64(&self, offset: usize) -> &AtomicU64 {
        let w = self.word64(offset);
        self.check_own(offset, 8);
        w
    }

    /// The 64-bit word at `offset`, lent or not: for copies.
    fn word64(&self, offset: usize) -> &AtomicU64 {
        self.check(offset, 8, 8);
        // SAFETY: as in `u32`, with 8 octets and 8-alignment. In the lent part (reached
        // only by `read`, which loads) the octets are also read through lent slices;
        // this process stores nothing there, and reads do not race with reads.
        unsafe { AtomicU64::from_ptr(self.ptr.as_ptr().wrapping_add(offset).cast()) }
    }

    fn u8(&self, offset: usize) -> &AtomicU8 {
        self.check(offset, 1, 1);
        // SAFETY: as in `word64`, with one octet (stores go through `write`, which
        // refuses the lent part).
        unsafe { AtomicU8::from_ptr(self.ptr.as_ptr().wrapping_add(offset)) }
    }

    /// Copies `dst.len()` octets from `offset` (relaxed atomic loads; the other process
    /// may be writing them, so validate what comes out).
    ///
    /// # Panics
    ///
    /// If the range lies outside the segment.
    pub fn read(&self, offset: usize, dst: &mut [u8]) {
        let (head, words, tail) = self.split(offset, dst.len());
        let (dst_head, rest) = dst.split_at_mut(head);
        let (dst_words, dst_tail) = rest.split_at_mut(words.len() * 8);
        for (i, d) in dst_head.iter_mut().enumerate() {
            *d = self.u8(offset + i).load(Ordering::Relaxed);
        }
        for (w, d) in words.iter().zip(dst_words.chunks_exact_mut(8)) {
            d.copy_from_slice(&w.load(Ordering::Relaxed).to_ne_bytes());
        }
        for (i, d) in dst_tail.iter_mut().enumerate() {
            *d = self.u8(tail + i).load(Ordering::Relaxed);
        }
    }

    /// Copies `src` to `offset` (relaxed atomic stores; publish them with a `Release`
    /// store of the word the other process checks first).
    ///
    /// # Panics
    ///
    /// If the range lies outside the segment, or reaches into the part this process
    /// [lends](Self::lending).
    pub fn write(&self, offset: usize, src: &[u8]) {
        let (head, words, tail) = self.split(offset, src.len());
        self.check_own(offset, src.len());
        let (src_head, rest) = src.split_at(head);
        let (src_words, src_tail) = rest.split_at(words.len() * 8);
        for (i, &b) in src_head.iter().enumerate() {
            self.u8(offset + i).store(b, Ordering::Relaxed);
        }
        for (w, b) in words.iter().zip(src_words.chunks_exact(8)) {
            let mut word = [0u8; 8];
            word.copy_from_slice(b);
            w.store(u64::from_ne_bytes(word), Ordering::Relaxed);
        }
        for (i, &b) in src_tail.iter().enumerate() {
            self.u8(tail + i).store(b, Ordering::Relaxed);
        }
    }

    /// `offset..+len` as its unaligned head's length, the 64-bit words after it, and where
    /// the unaligned tail after those starts: a copy goes word by word with one check, not
    /// one per word.
    ///
    /// # Panics
    ///
    /// If the range lies outside the segment.
    fn split(&self, offset: usize, len: usize) -> (usize, &[AtomicU64], usize) {
        self.check(offset, len, 1);
        let head = (offset.next_multiple_of(8) - offset).min(len);
        let n = (len - head) / 8;
        let at = offset + head;
        if n == 0 {
            return (head, &[], at);
        }
        // SAFETY: `check` proved that `offset..+len` lies inside the mapping, which
        // lives as long as `self`; the `n` words from `at` lie within it, and `at` is
        // 8-aligned (the mapping is page-aligned). The octets are only ever accessed
        // atomically from this process, except in the lent part through lent slices,
        // where this process only loads (stores there are refused by `check_own`).
        let words = unsafe {
            std::slice::from_raw_parts(
                self.ptr
                    .as_ptr()
                    .wrapping_add(at)
                    .cast::<AtomicU64>()
                    .cast_const(),
                n,
            )
        };
        (head, words, at + n * 8)
    }

    /// Panics if `offset..+len` reaches into the lent part: this process does not store
    /// there (a store under a lent `Bytes` would race with its readers).
    fn check_own(&self, offset: usize, len: usize) {
        assert!(
            offset.saturating_add(len) <= self.lent_from,
            "segment store {offset}..+{len} into the part lent from {}",
            self.lent_from
        );
    }

    fn check(&self, offset: usize, len: usize, align: usize) {
        let inside = offset.checked_add(len).is_some_and(|end| end <= self.len);
        assert!(
            inside && offset.is_multiple_of(align),
            "segment access {offset}..+{len} (align {align}) outside a segment of {} octets",
            self.len
        );
    }
}

/// The owner behind a [`Segment::bytes`]: the segment, kept mapped, and the range.
struct Lent {
    seg: Arc<Segment>,
    offset: usize,
    len: usize,
}

impl AsRef<[u8]> for Lent {
    fn as_ref(&self) -> &[u8] {
        // SAFETY: `Segment::bytes` checked that the range lies inside the mapping, which
        // `seg` keeps alive as long as this owner, and inside the lent part, where this
        // process makes no store (`check_own` refuses every store there): in this
        // process the octets are only read while the slice lives. The other process's
        // stores are outside Rust's model, as a DMA is (see `Segment::bytes`).
        unsafe {
            std::slice::from_raw_parts(self.seg.ptr.as_ptr().wrapping_add(self.offset), self.len)
        }
    }
}

impl fmt::Debug for Segment {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Segment").field("len", &self.len).finish()
    }
}
