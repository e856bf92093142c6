//! One direction of a TCP connection, reassembled by sequence number (sans-IO).
//!
//! Segments go in with [`Reassembler::push`] in capture order; in-order octets come out as
//! [`StreamEvent::Data`] tagged with the frame that delivered them. Retransmitted octets
//! are dropped, out-of-order segments wait in a buffer, and octets that never show up are
//! reported as a [`StreamEvent::Gap`] (when too much is buffered behind them, or at
//! [`Reassembler::finish`]).

use std::collections::BTreeMap;

use serde::Serialize;

/// Default bound on octets buffered behind a hole before the hole is declared a gap.
pub const DEFAULT_MAX_PENDING: usize = 4 << 20;

/// What a direction delivers, in stream order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StreamEvent {
    /// In-order octets; `frame` is the frame whose segment carried them.
    Data {
        /// The octets.
        bytes: Vec<u8>,
        /// Frame number of the segment.
        frame: u64,
    },
    /// `len` octets at stream offset `at` were never captured.
    Gap {
        /// Stream offset (octets since the first data octet) of the hole.
        at: u64,
        /// Octets missing.
        len: u64,
        /// Frame of the first segment after the hole.
        frame: u64,
    },
}

/// Counters of one direction.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct ReassemblyStats {
    /// Segments whose octets had all been seen already.
    pub retransmitted_segments: u64,
    /// Octets dropped as duplicates (whole or partial retransmissions).
    pub retransmitted_bytes: u64,
    /// Segments that arrived ahead of a hole and were buffered.
    pub out_of_order_segments: u64,
    /// Holes reported as gaps.
    pub gaps: u64,
    /// Octets missing in those gaps.
    pub gap_bytes: u64,
}

/// Reassembler for one direction of one TCP connection.
#[derive(Debug, Clone)]
pub struct Reassembler {
    /// Sequence number of stream offset 0 (ISN + 1 after a SYN, else the first seen).
    base: Option<u32>,
    /// Next stream offset expected.
    next: u64,
    /// Out-of-order segments by stream offset: octets and frame.
    pending: BTreeMap<u64, (Vec<u8>, u64)>,
    pending_bytes: usize,
    max_pending: usize,
    stats: ReassemblyStats,
}

impl Default for Reassembler {
    fn default() -> Self {
        Self::new()
    }
}

impl Reassembler {
    /// A reassembler with [`DEFAULT_MAX_PENDING`].
    pub fn new() -> Self {
        Self::with_max_pending(DEFAULT_MAX_PENDING)
    }

    /// A reassembler that declares a gap once more than `max_pending` octets wait behind
    /// a hole.
    pub fn with_max_pending(max_pending: usize) -> Self {
        Self {
            base: None,
            next: 0,
            pending: BTreeMap::new(),
            pending_bytes: 0,
            max_pending,
            stats: ReassemblyStats::default(),
        }
    }

    /// The counters so far.
    pub fn stats(&self) -> ReassemblyStats {
        self.stats
    }

    /// The sequence number of stream offset 0, once known.
    pub fn base(&self) -> Option<u32> {
        self.base
    }

    /// Next stream offset expected (octets delivered or skipped so far).
    pub fn next_offset(&self) -> u64 {
        self.next
    }

    /// Feeds one segment (sequence number, SYN flag, payload, frame number); appends what
    /// it makes deliverable to `out`.
    pub fn push(
        &mut self,
        seq: u32,
        syn: bool,
        payload: &[u8],
        frame: u64,
        out: &mut Vec<StreamEvent>,
    ) {
        let data_seq = if syn { seq.wrapping_add(1) } else { seq };
        let base = match self.base {
            Some(b) => b,
            None if syn || !payload.is_empty() => *self.base.insert(data_seq),
            None => return,
        };
        if payload.is_empty() {
            return;
        }
        // Offset relative to `next`, within +-2 GiB: survives sequence wrap-around.
        let expected = base.wrapping_add(self.next as u32);
        let delta = i64::from(data_seq.wrapping_sub(expected) as i32);
        let Some(offset) = self.next.checked_add_signed(delta) else {
            self.count_duplicate(payload.len());
            return;
        };
        if offset > self.next {
            self.stats.out_of_order_segments += 1;
            let longer = self
                .pending
                .get(&offset)
                .is_none_or(|(old, _)| old.len() < payload.len());
            if longer {
                let old = self.pending.insert(offset, (payload.to_vec(), frame));
                self.pending_bytes += payload.len();
                self.pending_bytes -= old.map_or(0, |(o, _)| o.len());
            }
            while self.pending_bytes > self.max_pending {
                self.skip_to_pending(out);
            }
            return;
        }
        self.deliver(offset, payload, frame, out);
        self.drain(out);
    }

    /// End of capture: every hole still open becomes a gap and the octets behind it are
    /// delivered.
    pub fn finish(&mut self, out: &mut Vec<StreamEvent>) {
        while !self.pending.is_empty() {
            self.skip_to_pending(out);
        }
    }

    /// Reports the hole before the first pending segment as a gap and delivers from there.
    fn skip_to_pending(&mut self, out: &mut Vec<StreamEvent>) {
        let Some((&at, (_, frame))) = self.pending.first_key_value() else {
            return;
        };
        if at > self.next {
            let len = at - self.next;
            self.stats.gaps += 1;
            self.stats.gap_bytes += len;
            out.push(StreamEvent::Gap {
                at: self.next,
                len,
                frame: *frame,
            });
            self.next = at;
        }
        self.drain(out);
    }

    /// Delivers every pending segment that now starts at or before `next`.
    fn drain(&mut self, out: &mut Vec<StreamEvent>) {
        while let Some(entry) = self.pending.first_entry() {
            if *entry.key() > self.next {
                break;
            }
            let (offset, (bytes, frame)) = entry.remove_entry();
            self.pending_bytes -= bytes.len();
            self.deliver(offset, &bytes, frame, out);
        }
    }

    /// Delivers the part of a segment at `offset <= next` that is new.
    fn deliver(&mut self, offset: u64, payload: &[u8], frame: u64, out: &mut Vec<StreamEvent>) {
        let skip = usize::try_from(self.next - offset).unwrap_or(usize::MAX);
        match payload.get(skip..) {
            Some(new) if !new.is_empty() => {
                if skip > 0 {
                    self.stats.retransmitted_bytes += skip as u64;
                }
                self.next += new.len() as u64;
                out.push(StreamEvent::Data {
                    bytes: new.to_vec(),
                    frame,
                });
            }
            _ => self.count_duplicate(payload.len()),
        }
    }

    fn count_duplicate(&mut self, len: usize) {
        self.stats.retransmitted_segments += 1;
        self.stats.retransmitted_bytes += len as u64;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(events: &[StreamEvent]) -> Vec<(Vec<u8>, u64)> {
        events
            .iter()
            .filter_map(|e| match e {
                StreamEvent::Data { bytes, frame } => Some((bytes.clone(), *frame)),
                StreamEvent::Gap { .. } => None,
            })
            .collect()
    }

    #[test]
    fn in_order_after_syn() {
        let mut r = Reassembler::new();
        let mut out = Vec::new();
        r.push(999, true, b"", 1, &mut out);
        r.push(1000, false, b"abc", 2, &mut out);
        r.push(1003, false, b"de", 3, &mut out);
        assert_eq!(data(&out), vec![(b"abc".to_vec(), 2), (b"de".to_vec(), 3)]);
        assert_eq!(r.next_offset(), 5);
        assert_eq!(r.stats(), ReassemblyStats::default());
    }

    #[test]
    fn out_of_order_is_buffered() {
        let mut r = Reassembler::new();
        let mut out = Vec::new();
        r.push(99, true, b"", 1, &mut out);
        r.push(103, false, b"def", 2, &mut out);
        assert!(out.is_empty());
        r.push(100, false, b"abc", 3, &mut out);
        assert_eq!(data(&out), vec![(b"abc".to_vec(), 3), (b"def".to_vec(), 2)]);
        assert_eq!(r.stats().out_of_order_segments, 1);
        assert_eq!(r.stats().gaps, 0);
    }

    #[test]
    fn retransmissions_are_dropped() {
        let mut r = Reassembler::new();
        let mut out = Vec::new();
        r.push(0, false, b"abcd", 1, &mut out);
        r.push(0, false, b"abcd", 2, &mut out); // full duplicate
        r.push(2, false, b"cdef", 3, &mut out); // partial overlap
        assert_eq!(data(&out), vec![(b"abcd".to_vec(), 1), (b"ef".to_vec(), 3)]);
        let s = r.stats();
        assert_eq!((s.retransmitted_segments, s.retransmitted_bytes), (1, 6));
    }

    #[test]
    fn gap_at_finish_and_when_buffer_full() {
        let mut r = Reassembler::new();
        let mut out = Vec::new();
        r.push(10, false, b"ab", 1, &mut out);
        r.push(15, false, b"xyz", 2, &mut out); // octets 2..5 never arrive
        r.finish(&mut out);
        assert_eq!(
            out,
            vec![
                StreamEvent::Data {
                    bytes: b"ab".to_vec(),
                    frame: 1
                },
                StreamEvent::Gap {
                    at: 2,
                    len: 3,
                    frame: 2
                },
                StreamEvent::Data {
                    bytes: b"xyz".to_vec(),
                    frame: 2
                },
            ]
        );
        assert_eq!((r.stats().gaps, r.stats().gap_bytes), (1, 3));

        let mut r = Reassembler::with_max_pending(4);
        let mut out = Vec::new();
        r.push(0, false, b"a", 1, &mut out);
        r.push(5, false, b"bcd", 2, &mut out);
        assert_eq!(out.len(), 1);
        r.push(8, false, b"ef", 3, &mut out); // 5 octets pending > 4: hole given up
        assert!(matches!(out[1], StreamEvent::Gap { at: 1, len: 4, .. }));
        assert_eq!(data(&out).len(), 3);
    }

    #[test]
    fn sequence_wraps() {
        let mut r = Reassembler::new();
        let mut out = Vec::new();
        r.push(u32::MAX - 1, false, b"ab", 1, &mut out);
        r.push(0, false, b"cd", 2, &mut out);
        assert_eq!(data(&out).len(), 2);
        assert_eq!(r.next_offset(), 4);
        // An old segment from far behind is a duplicate, not a huge gap.
        r.push(u32::MAX - 1, false, b"ab", 3, &mut out);
        assert_eq!(r.stats().retransmitted_segments, 1);
    }
}
