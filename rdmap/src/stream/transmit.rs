//! [`Transmit`]: the octets a stream wants sent, as a chain of `Bytes` for vectored writes.

use std::collections::VecDeque;
use std::io::IoSlice;

use bytes::{Buf, Bytes, BytesMut};

/// Payloads at least this long are chained by reference instead of copied.
pub(super) const ZERO_COPY_MIN: usize = 512;
/// Room reserved in the arena at a time, so small FPDUs do not allocate one by one.
const ARENA_CHUNK: usize = 64 * 1024;

/// Octets produced by [`Stream::poll_transmit`](super::Stream::poll_transmit), in order.
///
/// Small FPDUs and FPDU headers and trailers are copied into an internal arena; large
/// payloads handed to the stream as [`Bytes`] are chained by reference, so they reach the
/// socket without a user-space copy. It implements [`Buf`] (with `chunks_vectored`), so a
/// driver can write it with `write_buf` or vectored writes and then report the accepted
/// count with [`Stream::handle_written`](super::Stream::handle_written).
///
/// The arena's space is reused once the octets handed out before are dropped, so a
/// `Transmit` kept across calls does not allocate per FPDU.
#[derive(Debug, Default)]
pub struct Transmit {
    chunks: VecDeque<Bytes>,
    arena: BytesMut,
    /// Octets in `chunks` (the arena's are counted by its own length).
    chained: usize,
}

impl Transmit {
    /// An empty transmit buffer.
    pub fn new() -> Self {
        Self::default()
    }

    /// Octets waiting to be written.
    pub fn len(&self) -> usize {
        self.chained + self.arena.len()
    }

    /// True when nothing waits to be written.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The arena, with room for at least `n` more octets, for copying into. When the room
    /// must be made, the octets already there move to the chain first (by reference), so
    /// growing never copies them.
    pub(super) fn arena(&mut self, n: usize) -> &mut BytesMut {
        if self.arena.capacity() - self.arena.len() < n {
            self.seal();
            self.arena.reserve(n.max(ARENA_CHUNK));
        }
        &mut self.arena
    }

    /// Appends `payload` by reference, after what the arena holds so far.
    pub(super) fn push_chained(&mut self, payload: Bytes) {
        self.seal();
        self.chained += payload.len();
        self.chunks.push_back(payload);
    }

    /// Moves the arena's octets into the chain.
    fn seal(&mut self) {
        if !self.arena.is_empty() {
            let b = self.arena.split().freeze();
            self.chained += b.len();
            self.chunks.push_back(b);
        }
    }
}

impl Buf for Transmit {
    fn remaining(&self) -> usize {
        self.len()
    }

    fn chunk(&self) -> &[u8] {
        self.chunks.front().map_or(&self.arena[..], |c| &c[..])
    }

    fn advance(&mut self, mut cnt: usize) {
        while cnt > 0 {
            let Some(front) = self.chunks.front_mut() else {
                self.arena.advance(cnt);
                return;
            };
            let n = cnt.min(front.len());
            front.advance(n);
            self.chained -= n;
            cnt -= n;
            if front.is_empty() {
                self.chunks.pop_front();
            }
        }
    }

    fn chunks_vectored<'a>(&'a self, dst: &mut [IoSlice<'a>]) -> usize {
        let pieces = self
            .chunks
            .iter()
            .map(|c| &c[..])
            .chain(std::iter::once(&self.arena[..]))
            .filter(|c| !c.is_empty());
        let mut n = 0;
        for (slot, piece) in dst.iter_mut().zip(pieces) {
            *slot = IoSlice::new(piece);
            n += 1;
        }
        n
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chain_keeps_order_and_counts() {
        let mut t = Transmit::new();
        t.arena(3).extend_from_slice(b"abc");
        t.push_chained(Bytes::from_static(b"DEFG"));
        t.arena(2).extend_from_slice(b"hi");
        assert_eq!(t.len(), 9);
        let mut slices = [IoSlice::new(&[]); 8];
        assert_eq!(t.chunks_vectored(&mut slices), 3);
        t.advance(4);
        assert_eq!(t.chunk(), b"EFG");
        assert_eq!(&t.copy_to_bytes(5)[..], b"EFGhi");
        assert!(t.is_empty());
    }
}
