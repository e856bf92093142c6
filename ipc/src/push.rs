//! Seed 000's push region: one shared-memory segment per protection domain, created by
//! the daemon and handed to the client that owns the domain only. It holds fixed,
//! 64-octet-aligned slots, as many as writers are expected to push at once (a
//! configuration value, not the send queue depth). A slot is a **message**: a 64-octet
//! header naming the queue pair and the position of its twin send queue entry, then that
//! entry itself with its payload inline ([`SQE_SIZE`] octets).
//!
//! ```text
//! slot header
//! 0   u32  state: generation << 2 | FREE 0, WRITING 1, READY 2; stored last, Release
//! 4   u32  queue pair (the client's handle)
//! 8   u32  send queue index of the twin entry
//! 12  52   zero
//! 64  256  the send queue entry (payload inline)
//! ```
//!
//! The library claims a FREE slot with a compare-and-swap to WRITING (so writers need no
//! lock), writes it, and publishes it READY with a new generation. The daemon copies a
//! READY slot out, checks that its state did not change meanwhile (a torn or rewritten
//! slot is discarded), decides, and frees it (FREE, generation + 1).

use std::io;
use std::os::fd::BorrowedFd;
use std::sync::atomic::{AtomicU32, Ordering};

use shm::Segment;

use crate::layout::{Field, seg_u32, shifted};
pub use crate::qpseg::SQE_SIZE;

/// A slot: its header's fields, little-endian, then the entry.
mod field {
    use super::SQE_SIZE;
    use crate::layout::Field;

    /// The state word: generation and FREE, WRITING or READY (u32).
    pub(crate) const STATE: Field = 0..4;
    /// The queue pair (u32, the client's handle).
    pub(crate) const QP: Field = 4..8;
    /// The send queue index of the twin entry (u32).
    pub(crate) const SQ_INDEX: Field = 8..12;
    /// The send queue entry, its payload inline.
    pub(crate) const ENTRY: Field = 64..64 + SQE_SIZE;
}

/// Octets of a slot.
pub const SLOT_SIZE: usize = field::ENTRY.end;
/// Slots in a region unless configured otherwise: concurrent writers of one domain.
pub const DEFAULT_SLOTS: u32 = 32;
/// The most slots a region may have.
pub const MAX_SLOTS: u32 = 1024;

/// The state word's two low bits: what the slot holds. The generation is above them.
const KIND: u32 = 0b11;
const FREE: u32 = 0;
const WRITING: u32 = 1;
const READY: u32 = 2;

/// The state word after `word` of the next generation, of kind `kind`.
fn next_generation(word: u32, kind: u32) -> u32 {
    ((word >> 2).wrapping_add(1) << 2) | kind
}

/// `field` of slot `slot`.
fn of_slot(slot: u32, field: Field) -> Field {
    shifted(field, slot as usize * SLOT_SIZE)
}

/// A slot copied out of the region by the daemon.
#[derive(Clone, Debug)]
pub struct Snapshot {
    /// The slot's number.
    pub slot: u32,
    /// The state word it was read under (to free exactly that message).
    pub state: u32,
    /// The queue pair it names.
    pub qp: u32,
    /// The twin entry's send queue index.
    pub sq_index: u32,
    /// The entry.
    pub entry: [u8; SQE_SIZE],
}

/// A protection domain's push region, seen from either side.
#[derive(Debug)]
pub struct PushRegion {
    seg: Segment,
    slots: u32,
}

impl PushRegion {
    /// Creates a region of `slots` slots (the daemon does).
    pub fn create(slots: u32) -> io::Result<Self> {
        let slots = slots.clamp(1, MAX_SLOTS);
        Ok(Self {
            seg: Segment::create("iwarp-push", slots as usize * SLOT_SIZE)?,
            slots,
        })
    }

    /// Maps a region the daemon sent; `slots` from its reply (checked).
    pub fn map(file: std::fs::File, slots: u32) -> io::Result<Self> {
        if slots == 0 || slots > MAX_SLOTS {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "push region size",
            ));
        }
        Ok(Self {
            seg: Segment::map(file, slots as usize * SLOT_SIZE)?,
            slots,
        })
    }

    /// The memory file, to send.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.seg.fd()
    }

    /// How many slots.
    pub fn slots(&self) -> u32 {
        self.slots
    }

    fn word(&self, slot: u32, field: Field) -> &AtomicU32 {
        seg_u32(&self.seg, of_slot(slot, field))
    }

    fn state(&self, slot: u32) -> &AtomicU32 {
        self.word(slot, field::STATE)
    }

    /// Library: claims a free slot, starting the search at `hint` (so that writers spread
    /// out); `None` when every slot is taken.
    pub fn claim(&self, hint: u32) -> Option<u32> {
        for i in 0..self.slots {
            let slot = (hint.wrapping_add(i)) % self.slots;
            let w = self.state(slot);
            let cur = w.load(Ordering::Relaxed);
            if cur & KIND == FREE
                && w.compare_exchange(
                    cur,
                    (cur & !KIND) | WRITING,
                    Ordering::Acquire,
                    Ordering::Relaxed,
                )
                .is_ok()
            {
                return Some(slot);
            }
        }
        None
    }

    /// Library: writes the message into a claimed slot and publishes it READY.
    pub fn publish(&self, slot: u32, qp: u32, sq_index: u32, entry: &[u8; SQE_SIZE]) {
        self.word(slot, field::QP).store(qp, Ordering::Relaxed);
        self.word(slot, field::SQ_INDEX)
            .store(sq_index, Ordering::Relaxed);
        self.seg.write(of_slot(slot, field::ENTRY).start, entry);
        let w = self.state(slot);
        let cur = w.load(Ordering::Relaxed);
        w.store(next_generation(cur, READY), Ordering::Release);
    }

    /// Daemon: the slots that are READY now and name a queue pair `want` accepts, copied
    /// out; a slot whose state changed while it was copied (a torn write) is skipped this
    /// time.
    pub fn ready(&self, want: impl Fn(u32) -> bool, mut f: impl FnMut(Snapshot)) {
        for slot in 0..self.slots {
            let w = self.state(slot);
            let state = w.load(Ordering::Acquire);
            if state & KIND != READY {
                continue;
            }
            let qp = self.word(slot, field::QP).load(Ordering::Relaxed);
            if !want(qp) {
                continue;
            }
            let sq_index = self.word(slot, field::SQ_INDEX).load(Ordering::Relaxed);
            let mut entry = [0u8; SQE_SIZE];
            self.seg.read(of_slot(slot, field::ENTRY).start, &mut entry);
            std::sync::atomic::fence(Ordering::Acquire);
            if w.load(Ordering::Relaxed) != state {
                continue;
            }
            f(Snapshot {
                slot,
                state,
                qp,
                sq_index,
                entry,
            });
        }
    }

    /// Daemon: frees the slot read under `state` (nothing if it changed since).
    pub fn free(&self, slot: u32, state: u32) {
        let next = next_generation(state, FREE);
        let _ =
            self.state(slot)
                .compare_exchange(state, next, Ordering::Release, Ordering::Relaxed);
    }

    /// True if any slot is READY (a cheap check before [`ready`](Self::ready)).
    pub fn any_ready(&self) -> bool {
        (0..self.slots).any(|s| self.state(s).load(Ordering::Relaxed) & KIND == READY)
    }

    /// True if a READY slot names queue pair `qp`.
    pub fn any_ready_for(&self, qp: u32) -> bool {
        (0..self.slots).any(|s| {
            self.state(s).load(Ordering::Acquire) & KIND == READY
                && self.word(s, field::QP).load(Ordering::Relaxed) == qp
        })
    }
}

/// The library's side of seed 000's push rules for one queue pair, the same embedded and
/// through iwarpd: push while allowed; stop after a discard or when the region is full;
/// resume once the send queue is empty. It also spreads writers over the slots.
#[derive(Debug)]
pub struct PushPolicy {
    pushing: bool,
    /// Where the next slot search starts.
    hint: u32,
}

impl PushPolicy {
    /// Pushing, with the first slot search starting at `hint`.
    pub fn new(hint: u32) -> Self {
        Self {
            pushing: true,
            hint,
        }
    }

    /// Applies the stop and resume rules before a post: `discarded` if a pushed message
    /// of this queue pair was discarded since the last look, `sq_empty` if every request
    /// posted before has retired. True if this post may push.
    pub fn may_push(&mut self, discarded: bool, sq_empty: bool) -> bool {
        if discarded {
            self.pushing = false;
        }
        if !self.pushing && sq_empty {
            self.pushing = true;
        }
        self.pushing
    }

    /// The stop rule after a discard seen at once (embedded, where the engine side runs
    /// on the posting thread).
    pub fn discarded(&mut self) {
        self.pushing = false;
    }

    /// Claims a slot of `region` for the next message; `None` (and the stop rule) when
    /// every slot is taken.
    pub fn claim(&mut self, region: &PushRegion) -> Option<u32> {
        match region.claim(self.hint) {
            Some(slot) => {
                self.hint = slot.wrapping_add(1);
                Some(slot)
            }
            None => {
                self.pushing = false;
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slot_is_its_header_then_the_entry_at_the_abis_offsets() {
        assert_eq!(SLOT_SIZE, 320);
        let d = PushRegion::create(3).unwrap();
        let file = std::fs::File::from(d.fd().try_clone_to_owned().unwrap());
        let c = PushRegion::map(file, 3).unwrap();
        let octets = |at: usize, n: usize| {
            let mut b = vec![0u8; n];
            d.seg.read(at, &mut b);
            b
        };
        // Slot 1 from octet 320: claimed, WRITING (generation 0).
        assert_eq!(c.claim(1), Some(1));
        assert_eq!(octets(320, 4), [1, 0, 0, 0]);
        // Published: generation 1, READY; the queue pair at 4, the index at 8, the entry
        // at 64.
        c.publish(1, 0x0a0b_0c0d, 0x0102_0304, &[0xee; SQE_SIZE]);
        #[rustfmt::skip]
        let head: &[u8] = &[
            0x06, 0, 0, 0,
            0x0d, 0x0c, 0x0b, 0x0a,
            0x04, 0x03, 0x02, 0x01,
        ];
        assert_eq!(octets(320, 12), head);
        assert!(octets(320 + 12, 52).iter().all(|&b| b == 0));
        assert_eq!(octets(320 + 64, SQE_SIZE), [0xee; SQE_SIZE]);
        assert!(octets(0, 320).iter().all(|&b| b == 0));
        assert!(octets(640, 320).iter().all(|&b| b == 0));
        let mut seen = Vec::new();
        d.ready(|_| true, |s| seen.push((s.slot, s.state, s.qp, s.sq_index)));
        assert_eq!(seen, [(1, 0x06, 0x0a0b_0c0d, 0x0102_0304)]);
        assert!(d.any_ready() && d.any_ready_for(0x0a0b_0c0d) && !d.any_ready_for(1));
        // Freed: generation 2, FREE; claimed again: generation 2, WRITING.
        d.free(1, 0x06);
        assert_eq!(octets(320, 4), [0x08, 0, 0, 0]);
        assert_eq!(c.claim(1), Some(1));
        assert_eq!(octets(320, 4), [0x09, 0, 0, 0]);
    }

    #[test]
    fn slots_are_claimed_once_published_read_and_freed() {
        let d = PushRegion::create(2).unwrap();
        let file = std::fs::File::from(d.fd().try_clone_to_owned().unwrap());
        let c = PushRegion::map(file, 2).unwrap();
        let a = c.claim(0).unwrap();
        let b = c.claim(0).unwrap();
        assert_ne!(a, b);
        assert_eq!(
            c.claim(0),
            None,
            "every slot taken: the library stops pushing"
        );
        // A WRITING slot is not READY: the daemon does not see it.
        let mut seen = Vec::new();
        d.ready(|_| true, |s| seen.push(s));
        assert!(seen.is_empty());
        c.publish(a, 7, 41, &[0xab; SQE_SIZE]);
        d.ready(|_| true, |s| seen.push(s));
        assert_eq!(seen.len(), 1);
        let s = &seen[0];
        assert_eq!((s.slot, s.qp, s.sq_index), (a, 7, 41));
        assert_eq!(s.entry, [0xab; SQE_SIZE]);
        assert_eq!(s.state, (1 << 2) | READY);
        let mut other = Vec::new();
        d.ready(|qp| qp != 7, |s| other.push(s));
        assert!(other.is_empty(), "filtered by queue pair before the copy");
        d.free(s.slot, s.state);
        assert_eq!(c.claim(a), Some(a), "freed, claimable again");
        // A stale free (an older generation) changes nothing.
        d.free(a, s.state);
        assert_eq!(c.state(a).load(Ordering::Relaxed) & 3, WRITING);
        assert!(
            PushRegion::map(
                std::fs::File::from(d.fd().try_clone_to_owned().unwrap()),
                MAX_SLOTS + 1
            )
            .is_err()
        );
    }

    /// Seed 000's rules, the same for both backends: a discard or a full region stops
    /// pushing, an empty send queue resumes it, and claims spread over the slots.
    #[test]
    fn the_policy_stops_on_a_discard_or_a_full_region_and_resumes_on_an_empty_queue() {
        let region = PushRegion::create(2).unwrap();
        let mut p = PushPolicy::new(1);
        assert!(p.may_push(false, false));
        assert_eq!(p.claim(&region), Some(1), "from the hint");
        assert_eq!(p.claim(&region), Some(0), "then the next slot");
        assert_eq!(p.claim(&region), None, "full");
        assert!(!p.may_push(false, false), "stopped by the full region");
        assert!(p.may_push(false, true), "resumed: the send queue is empty");
        assert!(!p.may_push(true, false), "a discard stops it");
        assert!(!p.may_push(false, false), "until the send queue is empty");
        assert!(p.may_push(false, true));
        p.discarded();
        assert!(!p.may_push(false, false));
    }
}
