//! A ring of fixed-size entries in a shared-memory segment: one producer and one consumer,
//! each on its own side, and an index word of each (free-running, wrapping u32s; an entry
//! lives at `index % depth`). The queue pair segment's three rings and a shared receive
//! queue are rings.

use std::sync::atomic::{AtomicU32, Ordering};

use shm::Segment;

use crate::layout::{Field, seg_u32};

/// Too many entries claimed: the other side wrote an index more than a ring ahead.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Garbage;

/// Where one ring of a segment lives: its two index words and its entries.
#[derive(Clone, Debug)]
pub(crate) struct Ring {
    /// The producer's index word.
    pub(crate) prod: Field,
    /// The consumer's index word.
    pub(crate) cons: Field,
    /// The offset of the first entry.
    pub(crate) base: usize,
    /// Entries (a power of two).
    pub(crate) depth: u32,
}

impl Ring {
    fn prod<'a>(&self, seg: &'a Segment) -> &'a AtomicU32 {
        seg_u32(seg, self.prod.clone())
    }

    fn cons<'a>(&self, seg: &'a Segment) -> &'a AtomicU32 {
        seg_u32(seg, self.cons.clone())
    }

    /// The offset of the entry of index `i` (entries of `N` octets).
    pub(crate) fn at<const N: usize>(&self, i: u32) -> usize {
        self.base + (i % self.depth) as usize * N
    }

    /// Producer: writes and publishes one entry; false if the ring is full.
    pub(crate) fn push<const N: usize>(&self, seg: &Segment, entry: &[u8; N]) -> bool {
        let prod = self.prod(seg).load(Ordering::Relaxed);
        let cons = self.cons(seg).load(Ordering::Acquire);
        // A consumer that moved its index past ours gets no more entries.
        if prod.wrapping_sub(cons) >= self.depth {
            return false;
        }
        seg.write(self.at::<N>(prod), entry);
        self.prod(seg)
            .store(prod.wrapping_add(1), Ordering::Release);
        true
    }

    /// Consumer: copies out and consumes the next entry, if any.
    pub(crate) fn pop<const N: usize>(&self, seg: &Segment) -> Result<Option<[u8; N]>, Garbage> {
        let cons = self.cons(seg).load(Ordering::Relaxed);
        if self.pending(seg)? == 0 {
            return Ok(None);
        }
        let mut e = [0u8; N];
        seg.read(self.at::<N>(cons), &mut e);
        self.cons(seg)
            .store(cons.wrapping_add(1), Ordering::Release);
        Ok(Some(e))
    }

    /// Entries published and not yet consumed, as the consumer sees them.
    pub(crate) fn pending(&self, seg: &Segment) -> Result<u32, Garbage> {
        let cons = self.cons(seg).load(Ordering::Relaxed);
        pending(self.prod(seg).load(Ordering::Acquire), cons, self.depth)
    }
}

/// Entries between a consumer index and a producer index, or [`Garbage`] if the producer
/// claims more than a ring.
pub(crate) fn pending(prod: u32, cons: u32, depth: u32) -> Result<u32, Garbage> {
    let n = prod.wrapping_sub(cons);
    if n > depth { Err(Garbage) } else { Ok(n) }
}
