//! The data channel of one queue pair (seed 002's channel 1, no per-message framing): a
//! shared-memory segment the daemon creates and the client maps, holding
//!
//! - the **send queue** ring of [`SQE_SIZE`]-octet entries and the **receive queue** ring
//!   of [`RQE_SIZE`]-octet entries, written by the client;
//! - the **completion** ring of [`CQE_SIZE`]-octet entries, written by the daemon;
//! - a **staging** area where the client puts payloads it owns (`Bytes`) too long to be
//!   inline in an entry. The daemon sends them from there without a copy
//!   ([`QpSegment::staged`]), so the client reuses a request's staged octets only once
//!   the request is retired;
//! - the indices, each on its own cache line: `sq_prod`, `rq_prod`, `cq_cons` written by
//!   the client; `sq_cons` (entries the daemon has taken, so the slot can be reused),
//!   `sq_done` (requests retired: what "the send queue is empty" is measured against,
//!   and when staged octets can be reused; a send completion names the same index for
//!   its request, [`crate::wqe::sq_done`], so the client frees both as it reads the
//!   completion, before the word moves), `rq_cons`, `cq_prod` written by the daemon;
//! - the two **parked** words: a side that is about to sleep sets its word, and the other
//!   side rings that side's doorbell (an eventfd) only if it finds the word set.
//!
//! Indices run freely (wrapping u32); an entry lives at `index % depth`, depths are powers
//! of two. Each side validates what the other wrote: a producer index more than a depth
//! ahead is garbage, and the daemon then ends that queue pair alone.

use std::io;
use std::os::fd::BorrowedFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering, fence};

use bytes::Bytes;
use shm::Segment;

pub use crate::doorbell::{AsyncDoorbell, Doorbell};
use crate::layout::{Field, nth, seg_u32, seg_u64};
use crate::ring::{Ring, pending};

mod counters;
mod geometry;
mod tx_share;

pub use counters::{Discard, PushCounters};
pub use geometry::{Geometry, MAX_DEPTH, MAX_STAGING};
pub use tx_share::{DaemonLock, TxCounts, TxFraming, TxPoint, TxShare, now_ns};

/// Octets of a send queue entry.
pub const SQE_SIZE: usize = 256;
/// Octets of a receive queue entry.
pub const RQE_SIZE: usize = 256;
/// Octets of a completion entry.
pub const CQE_SIZE: usize = 64;

/// Octets of the header page; the rings and the staging area follow it (see
/// [`Geometry`]).
const HEADER_LEN: usize = 4096;

/// The header page's words, little-endian, each on a cache line (64 octets) of its own
/// but the push counters, which only the daemon writes.
mod field {
    use crate::layout::Field;

    /// Send queue entries published (u32, the client's).
    pub(crate) const SQ_PROD: Field = 0..4;
    /// Send queue entries taken, their slots and staged octets free again (the daemon's).
    pub(crate) const SQ_CONS: Field = 64..68;
    /// Send requests retired, completed signaled or not (the daemon's).
    pub(crate) const SQ_DONE: Field = 128..132;
    /// Receive queue entries published (the client's).
    pub(crate) const RQ_PROD: Field = 192..196;
    /// Receive queue entries taken (the daemon's).
    pub(crate) const RQ_CONS: Field = 256..260;
    /// Completions published (the daemon's).
    pub(crate) const CQ_PROD: Field = 320..324;
    /// Completions taken (the client's).
    pub(crate) const CQ_CONS: Field = 384..388;
    /// Nonzero while the daemon sleeps.
    pub(crate) const DAEMON_PARKED: Field = 448..452;
    /// Times the daemon went to sleep (u64, the daemon's).
    pub(crate) const DAEMON_PARKS: Field = 456..464;
    /// Times the daemon read the peer's input itself while it spun (u64, the daemon's).
    pub(crate) const DAEMON_READS: Field = 464..472;
    /// Nonzero while the client sleeps.
    pub(crate) const CLIENT_PARKED: Field = 512..516;
    /// Push discards so far (u32; the library's stop rule watches it).
    pub(crate) const PUSH_DISCARDS: Field = 576..580;
    /// Requests executed from pushed messages (u64).
    pub(crate) const PUSH_EXECUTED: Field = 640..648;
    /// Requests executed from the send queue, pushed or not (u64).
    pub(crate) const PUSH_SQ_PATH: Field = 648..656;
    /// Pushed messages discarded for the first reason of `Discard::ALL` (u64); the
    /// others' counts follow, in that order.
    pub(crate) const PUSH_DISCARD: Field = 656..664;
}

/// Which side of the segment this process is.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Side {
    /// The application's library.
    Client,
    /// iwarpd.
    Daemon,
}

pub use crate::ring::Garbage;

/// A queue pair's segment, seen from one side.
#[derive(Debug)]
pub struct QpSegment {
    seg: Arc<Segment>,
    geo: Geometry,
}

impl QpSegment {
    /// Creates the segment (the daemon does). Its staging area is the client's to write:
    /// the daemon lends payloads out of it ([`staged`](Self::staged)).
    pub fn create(geo: Geometry) -> io::Result<Self> {
        let seg = Segment::create("iwarp-qp", geo.len())?;
        Ok(Self::daemon_side(seg, geo))
    }

    /// Maps a segment another daemon created, to serve its queue pair (a handover), as
    /// [`create`](Self::create) makes one.
    pub fn take_over(file: std::fs::File, geo: Geometry) -> io::Result<Self> {
        let seg = Segment::map(file, geo.len())?;
        Ok(Self::daemon_side(seg, geo))
    }

    fn daemon_side(seg: Segment, geo: Geometry) -> Self {
        Self {
            seg: Arc::new(seg.lending(geo.staging_at())),
            geo,
        }
    }

    /// Maps a segment the daemon sent (the client does).
    pub fn map(file: std::fs::File, geo: Geometry) -> io::Result<Self> {
        Ok(Self {
            seg: Arc::new(Segment::map(file, geo.len())?),
            geo,
        })
    }

    /// The memory file, to send.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.seg.fd()
    }

    /// Its geometry.
    pub fn geometry(&self) -> Geometry {
        self.geo
    }

    fn word(&self, field: Field) -> &AtomicU32 {
        seg_u32(&self.seg, field)
    }

    fn counter(&self, field: Field) -> &AtomicU64 {
        seg_u64(&self.seg, field)
    }

    // ---- send queue ----

    fn sq(&self) -> Ring {
        Ring {
            prod: field::SQ_PROD,
            cons: field::SQ_CONS,
            base: self.geo.sq_at(),
            depth: self.geo.sq_depth,
        }
    }

    /// Client: room for another send queue entry?
    pub fn sq_room(&self) -> u32 {
        let prod = self.word(field::SQ_PROD).load(Ordering::Relaxed);
        let cons = self.word(field::SQ_CONS).load(Ordering::Acquire);
        self.geo.sq_depth - prod.wrapping_sub(cons).min(self.geo.sq_depth)
    }

    /// Client: writes the entry at the producer index (after checking [`sq_room`](Self::sq_room)) and
    /// returns its index; [`sq_publish`](Self::sq_publish) makes it visible.
    pub fn sq_write(&self, offset: u32, entry: &[u8; SQE_SIZE]) -> u32 {
        let prod = self
            .word(field::SQ_PROD)
            .load(Ordering::Relaxed)
            .wrapping_add(offset);
        self.seg.write(self.sq().at::<SQE_SIZE>(prod), entry);
        prod
    }

    /// Client: publishes `n` entries written with [`sq_write`](Self::sq_write).
    pub fn sq_publish(&self, n: u32) {
        let w = self.word(field::SQ_PROD);
        w.store(w.load(Ordering::Relaxed).wrapping_add(n), Ordering::Release);
    }

    /// Client: the producer index (the next entry's).
    pub fn sq_prod(&self) -> u32 {
        self.word(field::SQ_PROD).load(Ordering::Relaxed)
    }

    /// Daemon: entries published and not yet taken.
    pub fn sq_pending(&self) -> Result<u32, Garbage> {
        pending(
            self.word(field::SQ_PROD).load(Ordering::Acquire),
            self.word(field::SQ_CONS).load(Ordering::Relaxed),
            self.geo.sq_depth,
        )
    }

    /// Daemon: copies the next entry out (validate it before use) and its index.
    pub fn sq_peek(&self) -> (u32, [u8; SQE_SIZE]) {
        let cons = self.word(field::SQ_CONS).load(Ordering::Relaxed);
        let mut e = [0u8; SQE_SIZE];
        self.seg.read(self.sq().at::<SQE_SIZE>(cons), &mut e);
        (cons, e)
    }

    /// Daemon: the entry (and its staged octets) was taken; the client may reuse them.
    pub fn sq_take(&self) {
        let w = self.word(field::SQ_CONS);
        w.store(w.load(Ordering::Relaxed).wrapping_add(1), Ordering::Release);
    }

    /// Daemon: the send requests retired so far, as an index (its own word).
    pub fn sq_retired(&self) -> u32 {
        self.word(field::SQ_DONE).load(Ordering::Relaxed)
    }

    /// Daemon: one more send request retired (completed, signaled or not).
    pub fn sq_retire(&self, n: u32) {
        let w = self.word(field::SQ_DONE);
        w.store(w.load(Ordering::Relaxed).wrapping_add(n), Ordering::Release);
    }

    /// Client: requests taken by the daemon and requests retired, as indices.
    pub fn sq_cons_done(&self) -> (u32, u32) {
        (
            self.word(field::SQ_CONS).load(Ordering::Acquire),
            self.word(field::SQ_DONE).load(Ordering::Acquire),
        )
    }

    // ---- receive and completion queues (one producer, one consumer each) ----

    fn rq(&self) -> Ring {
        Ring {
            prod: field::RQ_PROD,
            cons: field::RQ_CONS,
            base: self.geo.rq_at(),
            depth: self.geo.rq_depth,
        }
    }

    fn cq(&self) -> Ring {
        Ring {
            prod: field::CQ_PROD,
            cons: field::CQ_CONS,
            base: self.geo.cq_at(),
            depth: self.geo.cq_depth,
        }
    }

    /// Client: writes and publishes one receive entry; false if the ring is full.
    pub fn rq_push(&self, entry: &[u8; RQE_SIZE]) -> bool {
        self.rq().push(&self.seg, entry)
    }

    /// Daemon: receive entries published and not yet taken.
    pub fn rq_pending(&self) -> Result<u32, Garbage> {
        self.rq().pending(&self.seg)
    }

    /// Daemon: takes the next receive entry, if any.
    pub fn rq_pop(&self) -> Result<Option<[u8; RQE_SIZE]>, Garbage> {
        self.rq().pop(&self.seg)
    }

    /// Daemon: writes and publishes one completion; false if the ring is full (the
    /// client has not consumed; the daemon retries later).
    pub fn cq_push(&self, entry: &[u8; CQE_SIZE]) -> bool {
        self.cq().push(&self.seg, entry)
    }

    /// Client: takes the next completion, if any.
    pub fn cq_pop(&self) -> Result<Option<[u8; CQE_SIZE]>, Garbage> {
        self.cq().pop(&self.seg)
    }

    // ---- staging ----

    /// True if `len` octets at `offset` lie inside the staging area: what a claim read
    /// from shared memory is checked against before anything is allocated for it.
    pub fn staged_fits(&self, offset: u32, len: u64) -> bool {
        u64::from(offset)
            .checked_add(len)
            .is_some_and(|end| end <= u64::from(self.geo.staging))
    }

    /// Client: copies `src` into the staging area at `offset`.
    pub fn stage(&self, offset: u32, src: &[u8]) {
        self.seg.write(self.geo.staging_at() + offset as usize, src);
    }

    /// Daemon: the `len` staged octets at `offset`, without a copy (the segment stays
    /// mapped while they are held); `None` if the range lies outside the area. The client
    /// may still write them: they are a payload to send, trusted for nothing, as a
    /// registered region's octets are. An honest client leaves them alone until the
    /// request that named them is retired (`sq_done`).
    pub fn staged(&self, offset: u32, len: u32) -> Option<Bytes> {
        if !self.staged_fits(offset, u64::from(len)) {
            return None;
        }
        let at = self.geo.staging_at() + offset as usize;
        Some(self.seg.bytes(at, len as usize))
    }

    // ---- push counters ----

    /// Daemon: counts a discard (and moves the word the library's stop rule watches).
    pub fn count_discard(&self, why: Discard) {
        self.word(field::PUSH_DISCARDS)
            .fetch_add(1, Ordering::Release);
        self.counter(nth(field::PUSH_DISCARD, why.index()))
            .fetch_add(1, Ordering::Relaxed);
    }

    /// Daemon: counts requests executed from pushed messages and from the send queue.
    pub fn count_executed(&self, pushed: u64, sq_path: u64) {
        self.counter(field::PUSH_EXECUTED)
            .fetch_add(pushed, Ordering::Relaxed);
        self.counter(field::PUSH_SQ_PATH)
            .fetch_add(sq_path, Ordering::Relaxed);
    }

    /// Discards so far (the library's stop rule).
    pub fn push_discards(&self) -> u32 {
        self.word(field::PUSH_DISCARDS).load(Ordering::Acquire)
    }

    /// The push counters.
    pub fn push_counters(&self) -> PushCounters {
        let get = |field: Field| self.counter(field).load(Ordering::Relaxed);
        let mut c = PushCounters {
            executed: get(field::PUSH_EXECUTED),
            sq_path: get(field::PUSH_SQ_PATH),
            discards: [0; 6],
            daemon_sleeps: get(field::DAEMON_PARKS),
            daemon_reads: get(field::DAEMON_READS),
        };
        for (i, d) in c.discards.iter_mut().enumerate() {
            *d = get(nth(field::PUSH_DISCARD, i));
        }
        c
    }

    /// Daemon: the index of the next send queue entry it will take (the head).
    pub fn sq_head(&self) -> u32 {
        self.word(field::SQ_CONS).load(Ordering::Relaxed)
    }

    // ---- parking ----

    /// `side` is about to sleep: set its parked word. Re-check the rings after this and
    /// before sleeping, or a ring just before it is missed.
    pub fn park(&self, side: Side) {
        self.parked(side).store(1, Ordering::SeqCst);
    }

    /// Daemon: it goes to sleep on its doorbell now (after [`park`](Self::park) and the
    /// re-check); counted in [`PushCounters::daemon_sleeps`].
    pub fn count_daemon_sleep(&self) {
        self.counter(field::DAEMON_PARKS)
            .fetch_add(1, Ordering::Relaxed);
    }

    /// Daemon: it read the peer's input itself while it spun; counted in
    /// [`PushCounters::daemon_reads`].
    pub fn count_daemon_read(&self) {
        self.counter(field::DAEMON_READS)
            .fetch_add(1, Ordering::Relaxed);
    }

    /// `side` is awake again.
    pub fn unpark(&self, side: Side) {
        self.parked(side).store(0, Ordering::Relaxed);
    }

    /// After publishing: true if `side` sleeps and must be rung (clears its word).
    pub fn must_wake(&self, side: Side) -> bool {
        fence(Ordering::SeqCst);
        let w = self.parked(side);
        w.load(Ordering::Relaxed) != 0 && w.swap(0, Ordering::SeqCst) != 0
    }

    fn parked(&self, side: Side) -> &AtomicU32 {
        self.word(match side {
            Side::Client => field::CLIENT_PARKED,
            Side::Daemon => field::DAEMON_PARKED,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair(geo: Geometry) -> (QpSegment, QpSegment) {
        let d = QpSegment::create(geo).unwrap();
        let file = std::fs::File::from(d.fd().try_clone_to_owned().unwrap());
        let c = QpSegment::map(file, geo).unwrap();
        (c, d)
    }

    /// `N` octets of `seg` from `at`.
    fn octets<const N: usize>(seg: &Segment, at: usize) -> [u8; N] {
        let mut b = [0u8; N];
        seg.read(at, &mut b);
        b
    }

    #[test]
    fn the_header_words_and_the_rings_are_where_the_abi_puts_them() {
        let geo = Geometry {
            sq_depth: 2,
            rq_depth: 2,
            cq_depth: 4,
            staging: 64,
        };
        assert_eq!(geo.len(), 4096 + 2 * 256 + 2 * 256 + 4 * 64 + 64);
        let (c, d) = pair(geo);
        // Send queue: produced at 0, taken at 64, retired at 128; entry i at
        // 4096 + (i % 2) * 256.
        c.sq_write(0, &[0xa1; SQE_SIZE]);
        c.sq_write(1, &[0xa2; SQE_SIZE]);
        c.sq_publish(2);
        d.sq_take();
        d.sq_retire(1);
        c.sq_write(0, &[0xa3; SQE_SIZE]);
        c.sq_publish(1);
        assert_eq!(octets::<4>(&d.seg, 0), [3, 0, 0, 0]);
        assert_eq!(octets::<4>(&d.seg, 64), [1, 0, 0, 0]);
        assert_eq!(octets::<4>(&d.seg, 128), [1, 0, 0, 0]);
        assert_eq!(octets::<SQE_SIZE>(&d.seg, 4096), [0xa3; SQE_SIZE]);
        assert_eq!(octets::<SQE_SIZE>(&d.seg, 4096 + 256), [0xa2; SQE_SIZE]);
        // Receive queue: produced at 192, consumed at 256, entries from 4096 + 512.
        assert!(c.rq_push(&[0xb1; RQE_SIZE]));
        assert!(c.rq_push(&[0xb2; RQE_SIZE]));
        assert_eq!(d.rq_pop(), Ok(Some([0xb1; RQE_SIZE])));
        assert_eq!(octets::<4>(&d.seg, 192), [2, 0, 0, 0]);
        assert_eq!(octets::<4>(&d.seg, 256), [1, 0, 0, 0]);
        assert_eq!(
            octets::<RQE_SIZE>(&c.seg, 4096 + 512 + 256),
            [0xb2; RQE_SIZE]
        );
        // Completion queue: produced at 320, consumed at 384, entries from 4096 + 1024.
        for v in 1..=3u8 {
            assert!(d.cq_push(&[v; CQE_SIZE]));
        }
        assert_eq!(c.cq_pop(), Ok(Some([1; CQE_SIZE])));
        assert_eq!(octets::<4>(&c.seg, 320), [3, 0, 0, 0]);
        assert_eq!(octets::<4>(&c.seg, 384), [1, 0, 0, 0]);
        assert_eq!(octets::<CQE_SIZE>(&c.seg, 4096 + 1024 + 128), [3; CQE_SIZE]);
        // Staging from 4096 + 1024 + 256.
        c.stage(8, b"staged");
        assert_eq!(&octets::<6>(&d.seg, 4096 + 1280 + 8), b"staged");
        // Parked: the daemon's word at 448, the client's at 512.
        d.park(Side::Daemon);
        c.park(Side::Client);
        assert_eq!(octets::<4>(&c.seg, 448), [1, 0, 0, 0]);
        assert_eq!(octets::<4>(&c.seg, 512), [1, 0, 0, 0]);
        // Push counters: discards so far at 576 (u32); from 640, u64 each: executed, send
        // queue path, then discards in Discard::ALL order.
        d.count_discard(Discard::Security);
        d.count_discard(Discard::Security);
        d.count_discard(Discard::NotAtHead);
        d.count_executed(5, 0x0102);
        assert_eq!(octets::<4>(&c.seg, 576), [3, 0, 0, 0]);
        let mut want = [0u8; 64];
        want[0] = 5;
        want[8..10].copy_from_slice(&[0x02, 0x01]);
        want[16] = 1;
        want[16 + 4 * 8] = 2;
        assert_eq!(octets::<64>(&c.seg, 640), want);
        // Nothing else of the header page was written.
        let mut header = octets::<4096>(&c.seg, 0);
        for at in [0, 64, 128, 192, 256, 320, 384, 448, 512, 576] {
            header[at..at + 4].fill(0);
        }
        header[640..704].fill(0);
        assert!(header.iter().all(|&b| b == 0));
    }

    #[test]
    fn rings_move_entries_across_two_mappings_and_wrap() {
        let geo = Geometry {
            sq_depth: 4,
            rq_depth: 2,
            cq_depth: 2,
            staging: 128,
        };
        let (c, d) = pair(geo);
        for round in 0u8..10 {
            assert_eq!(c.sq_room(), 4);
            for i in 0..4u8 {
                c.sq_write(u32::from(i), &[round ^ i; SQE_SIZE]);
            }
            c.sq_publish(4);
            assert_eq!(c.sq_room(), 0);
            assert_eq!(d.sq_pending(), Ok(4));
            for i in 0..4u8 {
                let (idx, e) = d.sq_peek();
                assert_eq!(idx, u32::from(round) * 4 + u32::from(i));
                assert_eq!(e, [round ^ i; SQE_SIZE]);
                d.sq_take();
            }
            d.sq_retire(4);
            assert_eq!(
                c.sq_cons_done(),
                ((u32::from(round) + 1) * 4, (u32::from(round) + 1) * 4)
            );
            assert!(c.rq_push(&[round; RQE_SIZE]));
            assert!(c.rq_push(&[round; RQE_SIZE]));
            assert!(!c.rq_push(&[0; RQE_SIZE]));
            assert_eq!(d.rq_pop().unwrap(), Some([round; RQE_SIZE]));
            assert_eq!(d.rq_pop().unwrap(), Some([round; RQE_SIZE]));
            assert_eq!(d.rq_pop().unwrap(), None);
            assert!(d.cq_push(&[round; CQE_SIZE]));
            assert!(d.cq_push(&[round; CQE_SIZE]));
            assert!(!d.cq_push(&[0; CQE_SIZE]));
            assert_eq!(c.cq_pop().unwrap(), Some([round; CQE_SIZE]));
            assert_eq!(c.cq_pop().unwrap(), Some([round; CQE_SIZE]));
            assert_eq!(c.cq_pop().unwrap(), None);
        }
        c.stage(120, b"12345678");
        let got = d.staged(120, 8).unwrap();
        assert_eq!(&got[..], b"12345678");
        assert_eq!(d.staged(121, 8), None);
        assert_eq!(d.staged(u32::MAX, 2), None);
        // Lent, not copied: the client's next write shows through (an honest client
        // waits until the request is retired).
        c.stage(120, b"abcdefgh");
        assert_eq!(&got[..], b"abcdefgh");
    }

    #[test]
    #[should_panic(expected = "into the part lent")]
    fn the_daemon_never_stores_into_the_staging_area_it_lends() {
        let (_c, d) = pair(Geometry::default());
        d.stage(0, b"x");
    }

    #[test]
    fn a_producer_index_beyond_a_ring_is_garbage() {
        let (c, d) = pair(Geometry::default());
        c.sq_write(0, &[0; SQE_SIZE]);
        c.sq_publish(257);
        assert_eq!(d.sq_pending(), Err(Garbage));
        c.word(field::RQ_PROD).store(u32::MAX, Ordering::Release);
        assert_eq!(d.rq_pop(), Err(Garbage));
    }

    #[test]
    fn a_parked_side_is_woken_once() {
        let (c, d) = pair(Geometry::default());
        assert!(!c.must_wake(Side::Daemon));
        d.park(Side::Daemon);
        assert!(c.must_wake(Side::Daemon));
        assert!(!c.must_wake(Side::Daemon));
        let bell = Doorbell::new().unwrap();
        bell.ring();
        bell.ring();
        bell.drain();
        bell.drain();
    }
}
