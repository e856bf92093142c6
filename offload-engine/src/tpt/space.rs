//! The process's STag index space. Every TPT of the process draws its tag indices from one
//! allocator, so an index names at most one entry in the whole process: a protection
//! domain can then move from one engine's table to another's with every STag unchanged
//! (live migration, seed 003 §3.1: the peer knows only STags, and they must stay valid).
//!
//! An index also keeps its next instance (the STag's 8-bit key) here, process-wide: a
//! freed index is reused oldest first, by whichever table asks next. Keys are random (RFC
//! 5040 §8 asks for STags a peer cannot guess: with sequential indices, the key is what
//! an attacker must guess, one Terminate per wrong guess), and an index's next key always
//! differs from its last one, so a stale STag never names the entry that reuses its
//! index next.

use std::collections::VecDeque;
use std::sync::{Mutex, PoisonError};

use ddp::STag;

/// Tag indices `1..=max` (index 0 is never handed out, so neither STag 0 nor STag 1, the
/// RTR zero-length Write's, names an entry).
#[derive(Debug)]
pub(super) struct IndexSpace {
    /// Per index, the instance its next entry answers to (`[0]` unused).
    next_instance: Vec<u8>,
    /// Random octets for keys, and how many of them are used.
    random: [u8; 64],
    used: usize,
    /// Freed indices, reused oldest first so an index rests as long as possible.
    free: VecDeque<u32>,
    /// Ranges of indices another process may still hand over (see
    /// [`Self::hold_through`]): never handed out here, only claimed, once each.
    held: Vec<std::ops::Range<u32>>,
    /// The held indices claimed so far.
    claimed: std::collections::BTreeSet<u32>,
    max: u32,
}

/// The one space of this process.
static PROCESS: Mutex<IndexSpace> = Mutex::new(IndexSpace::new(STag::MAX_INDEX));

impl IndexSpace {
    /// An empty space of indices `1..=max` (capped at `STag::MAX_INDEX`).
    pub(super) const fn new(max: u32) -> Self {
        Self {
            next_instance: Vec::new(),
            random: [0; 64],
            used: 64,
            free: VecDeque::new(),
            held: Vec::new(),
            claimed: std::collections::BTreeSet::new(),
            max: if max < STag::MAX_INDEX {
                max
            } else {
                STag::MAX_INDEX
            },
        }
    }

    /// A random key.
    fn key(&mut self) -> u8 {
        if self.used == self.random.len() {
            self.random = random_octets();
            self.used = 0;
        }
        self.used += 1;
        self.random[self.used - 1]
    }

    /// A random key other than `last`.
    fn key_after(&mut self, last: u8) -> u8 {
        // One of the 255 others, evenly.
        let mut k = self.key();
        while k == 0xff {
            k = self.key();
        }
        last.wrapping_add(1).wrapping_add(k)
    }

    /// The process's space.
    pub(super) fn process() -> &'static Mutex<Self> {
        &PROCESS
    }

    /// A free index and the instance its entry answers to; `None` when all are taken.
    pub(super) fn take(&mut self) -> Option<STag> {
        let index = match self.free.pop_front() {
            Some(index) => index,
            None => {
                if self.next_instance.is_empty() {
                    self.next_instance.push(0);
                }
                let index = u32::try_from(self.next_instance.len()).ok()?;
                if index > self.max {
                    return None;
                }
                let key = self.key();
                self.next_instance.push(key);
                index
            }
        };
        let instance = self.next_instance.get(index as usize).copied()?;
        Some(STag::new(index, instance))
    }

    /// Takes `index` itself, if it is free: for an entry that keeps the STag it had in
    /// another process (migration between processes). False if it is taken or out of
    /// range.
    pub(super) fn claim(&mut self, index: u32) -> bool {
        if index == 0 || index > self.max {
            return false;
        }
        if self.next_instance.is_empty() {
            self.next_instance.push(0);
        }
        let known = self.next_instance.len();
        if (index as usize) < known {
            if let Some(at) = self.free.iter().position(|&i| i == index) {
                self.free.remove(at);
                return true;
            }
            // Held and not claimed before (once released, a claimed one is a free one).
            return self.held.iter().any(|r| r.contains(&index)) && self.claimed.insert(index);
        }
        // Never handed out: the indices below it become free ones.
        for i in known..index as usize {
            self.next_instance.push(0);
            self.free.push_back(i as u32);
        }
        self.next_instance.push(0);
        true
    }

    /// The highest index handed out or claimed so far (0 if none).
    pub(super) fn high_water(&self) -> u32 {
        self.next_instance.len().saturating_sub(1) as u32
    }

    /// Indices `1..=last` that were never handed out here are held for entries that move
    /// in from another process (which handed them out): [`Self::take`] skips them, and
    /// only [`Self::claim`] takes them.
    pub(super) fn hold_through(&mut self, last: u32) {
        let last = last.min(self.max);
        if self.next_instance.is_empty() {
            self.next_instance.push(0);
        }
        let first = self.next_instance.len() as u32;
        if first <= last {
            self.next_instance.resize(last as usize + 1, 0);
            self.held.push(first..last + 1);
        }
    }

    /// Gives back an index whose last entry answered to `last_instance`.
    pub(super) fn release(&mut self, index: u32, last_instance: u8) {
        if (index as usize) < self.next_instance.len() {
            let next = self.key_after(last_instance);
            self.next_instance[index as usize] = next;
            self.free.push_back(index);
        }
    }
}

/// Octets from the kernel's random source; if it cannot be read (it always can on Linux
/// 3.17 and later), from the clock and the address space's layout, which still differ
/// from run to run.
fn random_octets() -> [u8; 64] {
    let mut out = [0u8; 64];
    if rustix::rand::getrandom(&mut out, rustix::rand::GetRandomFlags::empty())
        .is_ok_and(|n| n == out.len())
    {
        return out;
    }
    use std::hash::{BuildHasher as _, Hasher as _};
    for chunk in out.chunks_mut(8) {
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u128(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos()),
        );
        chunk.copy_from_slice(&h.finish().to_le_bytes()[..chunk.len()]);
    }
    out
}

/// Locks `space`, whatever a panicking holder left (its state is a plain free list).
pub(super) fn lock(space: &Mutex<IndexSpace>) -> std::sync::MutexGuard<'_, IndexSpace> {
    space.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn indices_start_at_one_and_reuse_changes_the_instance() {
        let mut s = IndexSpace::new(3);
        let a = s.take().unwrap();
        let b = s.take().unwrap();
        assert_eq!((a.index(), b.index()), (1, 2));
        s.release(1, a.instance());
        s.release(2, b.instance());
        let c = s.take().unwrap();
        assert_eq!(c.index(), 1, "oldest freed first");
        assert_ne!(c.instance(), a.instance(), "a stale STag never names it");
        let d = s.take().unwrap();
        assert_eq!(d.index(), 2);
        assert_ne!(d.instance(), b.instance());
        assert_eq!(s.take().unwrap().index(), 3);
        assert_eq!(s.take(), None, "all three taken");
    }

    /// Keys are random (RFC 5040 §8): over many indices every key value turns up, none
    /// far more often than the others, and a reused index never gets its last key back.
    #[test]
    fn keys_are_random_and_never_repeat_on_reuse() {
        let mut s = IndexSpace::new(1 << 16);
        let mut seen = [0u32; 256];
        let first: Vec<STag> = (0..(1 << 14)).map(|_| s.take().unwrap()).collect();
        for t in &first {
            seen[t.instance() as usize] += 1;
        }
        // 64 expected per key: a counter far off means the keys are not random.
        assert!(seen.iter().all(|&n| (16..=160).contains(&n)), "{seen:?}");
        let sequential = first
            .windows(2)
            .filter(|w| w[1].instance() == w[0].instance().wrapping_add(1))
            .count();
        assert!(
            sequential < 1 << 8,
            "{sequential} consecutive keys in a row"
        );
        for t in &first {
            s.release(t.index(), t.instance());
        }
        for t in &first {
            let again = s.take().unwrap();
            assert_eq!(again.index(), t.index());
            assert_ne!(again.instance(), t.instance());
        }
    }

    #[test]
    fn an_index_is_claimed_only_while_free() {
        let mut s = IndexSpace::new(10);
        assert!(s.claim(4), "never handed out");
        assert!(!s.claim(4), "taken now");
        assert!(!s.claim(0) && !s.claim(11), "out of range");
        // The indices below it are free ones, handed out first.
        assert_eq!(s.take().unwrap().index(), 1);
        assert!(s.claim(2));
        assert_eq!(s.take().unwrap().index(), 3);
        assert_eq!(s.take().unwrap().index(), 5);
        s.release(2, 0);
        assert!(s.claim(2), "freed again");
    }

    #[test]
    fn held_indices_are_only_claimed() {
        let mut s = IndexSpace::new(10);
        assert_eq!(s.take().unwrap().index(), 1);
        s.hold_through(4);
        assert_eq!(s.high_water(), 4);
        assert_eq!(s.take().unwrap().index(), 5, "2 to 4 are held");
        assert!(s.claim(3) && !s.claim(3), "claimed once");
        assert!(!s.claim(1), "1 was handed out here");
        s.hold_through(2);
        assert_eq!(
            s.take().unwrap().index(),
            6,
            "holding below the mark changes nothing"
        );
    }
}
