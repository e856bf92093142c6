//! A shared receive queue's ring: receive entries the client writes and the daemon takes
//! one at a time, when a Send arrives for a queue pair whose own receive queue is empty.
//!
//! The daemon creates the segment and the client maps it, as with [`qpseg`](crate::qpseg):
//! a header page with the producer index (the client's) and the consumer index (the
//! daemon's) on cache lines of their own, then `depth` entries of [`RQE_SIZE`] octets.
//! Being read only when a buffer is needed, a receive the client published before it
//! posted the Send that answers the peer is always there for the peer's next message.

use std::io;
use std::os::fd::BorrowedFd;

use shm::Segment;

use crate::qpseg::{Garbage, MAX_DEPTH, RQE_SIZE};
use crate::ring::Ring;

/// Octets of the header page; the entries follow it.
const HEADER_LEN: usize = 4096;

/// The header page's words, little-endian u32s, each on a cache line of its own.
mod field {
    use crate::layout::Field;

    /// Entries published (the client's).
    pub(crate) const PROD: Field = 0..4;
    /// Entries taken (the daemon's).
    pub(crate) const CONS: Field = 64..68;
}

/// A shared receive queue's segment, seen from one side.
#[derive(Debug)]
pub struct SrqSegment {
    seg: Segment,
    depth: u32,
}

impl SrqSegment {
    /// The depth a request for `wanted` entries gets: a power of two, at least 1 and at
    /// most [`MAX_DEPTH`].
    pub fn depth_for(wanted: usize) -> u32 {
        (wanted.clamp(1, MAX_DEPTH as usize) as u32).next_power_of_two()
    }

    /// Creates the segment (the daemon does); `depth` must come from
    /// [`depth_for`](Self::depth_for).
    pub fn create(depth: u32) -> io::Result<Self> {
        Self::check(depth)?;
        Ok(Self {
            seg: Segment::create("iwarp-srq", Self::len(depth))?,
            depth,
        })
    }

    /// Maps a segment the daemon sent.
    pub fn map(file: std::fs::File, depth: u32) -> io::Result<Self> {
        Self::check(depth)?;
        Ok(Self {
            seg: Segment::map(file, Self::len(depth))?,
            depth,
        })
    }

    fn check(depth: u32) -> io::Result<()> {
        if depth.is_power_of_two() && depth <= MAX_DEPTH {
            Ok(())
        } else {
            Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("shared receive queue depth {depth}"),
            ))
        }
    }

    fn len(depth: u32) -> usize {
        HEADER_LEN + depth as usize * RQE_SIZE
    }

    /// Octets of the segment of a ring of `depth` entries.
    pub fn size_for(depth: u32) -> usize {
        Self::len(depth)
    }

    /// The memory file, to send.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.seg.fd()
    }

    /// Entries the ring holds.
    pub fn depth(&self) -> u32 {
        self.depth
    }

    fn ring(&self) -> Ring {
        Ring {
            prod: field::PROD,
            cons: field::CONS,
            base: HEADER_LEN,
            depth: self.depth,
        }
    }

    /// Client: writes and publishes one entry; false if the ring is full.
    pub fn push(&self, entry: &[u8; RQE_SIZE]) -> bool {
        self.ring().push(&self.seg, entry)
    }

    /// Daemon: takes the next entry, if any.
    pub fn pop(&self) -> Result<Option<[u8; RQE_SIZE]>, Garbage> {
        self.ring().pop(&self.seg)
    }

    /// Entries waiting (garbage indices count as none).
    pub fn len_waiting(&self) -> usize {
        self.ring().pending(&self.seg).unwrap_or(0) as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_indices_and_the_entries_are_where_the_abi_puts_them() {
        assert_eq!(SrqSegment::size_for(2), 4096 + 2 * 256);
        let d = SrqSegment::create(2).unwrap();
        let file = std::fs::File::from(d.fd().try_clone_to_owned().unwrap());
        let c = SrqSegment::map(file, 2).unwrap();
        assert!(c.push(&[1; RQE_SIZE]));
        assert!(c.push(&[2; RQE_SIZE]));
        assert_eq!(d.pop(), Ok(Some([1; RQE_SIZE])));
        assert!(c.push(&[3; RQE_SIZE]));
        let octets = |at: usize, n: usize| {
            let mut b = vec![0u8; n];
            d.seg.read(at, &mut b);
            b
        };
        // Produced at 0, consumed at 64, entry i at 4096 + (i % 2) * 256.
        assert_eq!(octets(0, 4), [3, 0, 0, 0]);
        assert_eq!(octets(64, 4), [1, 0, 0, 0]);
        assert!(octets(4, 60).iter().all(|&b| b == 0));
        assert!(octets(68, 4096 - 68).iter().all(|&b| b == 0));
        assert_eq!(octets(4096, RQE_SIZE), [3; RQE_SIZE]);
        assert_eq!(octets(4096 + 256, RQE_SIZE), [2; RQE_SIZE]);
    }

    #[test]
    fn entries_cross_two_mappings_in_order_and_the_ring_fills() {
        let d = SrqSegment::create(SrqSegment::depth_for(3)).unwrap();
        assert_eq!(d.depth(), 4);
        let file = std::fs::File::from(d.fd().try_clone_to_owned().unwrap());
        let c = SrqSegment::map(file, d.depth()).unwrap();
        for round in 0u8..5 {
            for i in 0..4 {
                assert!(c.push(&[round * 4 + i; RQE_SIZE]));
            }
            assert!(!c.push(&[0; RQE_SIZE]), "full");
            assert_eq!(c.len_waiting(), 4);
            for i in 0..4 {
                assert_eq!(d.pop().unwrap(), Some([round * 4 + i; RQE_SIZE]));
            }
            assert_eq!(d.pop().unwrap(), None);
        }
    }

    #[test]
    fn a_producer_index_more_than_a_ring_ahead_is_garbage() {
        let d = SrqSegment::create(4).unwrap();
        crate::layout::seg_u32(&d.seg, field::PROD).store(5, std::sync::atomic::Ordering::Release);
        assert_eq!(d.pop(), Err(Garbage));
        assert_eq!(d.len_waiting(), 0);
        assert!(SrqSegment::create(3).is_err() && SrqSegment::create(1 << 17).is_err());
    }
}
