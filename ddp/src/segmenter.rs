//! Segmentation of one DDP message into segments (RFC 5041 §5.2).

use core::iter::FusedIterator;

use crate::{TAGGED_HEADER_LEN, UNTAGGED_HEADER_LEN};

/// The largest DDP payload that fits in one ULPDU of `mulpdu` octets, i.e. MULPDU minus
/// the DDP header for the segment kind (14 tagged, 18 untagged).
///
/// Returns 0 if `mulpdu` cannot even hold the header; the caller should treat that as
/// a configuration error ([`Segmenter::new`] would clamp it to 1).
pub fn max_payload(mulpdu: u16, tagged: bool) -> u32 {
    let header = if tagged {
        TAGGED_HEADER_LEN
    } else {
        UNTAGGED_HEADER_LEN
    };
    u32::from(mulpdu).saturating_sub(header as u32)
}

/// One segment's share of a message: `len` payload octets starting at `offset` within
/// the message. `offset` is the MO of an untagged segment; a tagged segment's TO is the
/// message's initial TO plus `offset` (see [`Span::to`]).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Span {
    /// Offset of the first payload octet within the message.
    pub offset: u32,
    /// Number of payload octets.
    pub len: u32,
    /// True only for the final segment (the L bit).
    pub last: bool,
}

impl Span {
    /// Offset just past this span's last octet. Never overflows for spans produced by
    /// a [`Segmenter`] (their end is at most the message length).
    pub const fn end(&self) -> u32 {
        self.offset + self.len
    }

    /// The TO of a tagged segment carrying this span, for a message whose first octet
    /// goes to `initial_to`. Wraps modulo 2^64 (the sink rejects a wrapping segment
    /// with [`crate::DdpError::ToWrap`]).
    pub const fn to(&self, initial_to: u64) -> u64 {
        initial_to.wrapping_add(self.offset as u64)
    }
}

/// Iterator over the [`Span`]s of one message of `msg_len` octets, each at most
/// `max_payload` octets, in increasing offset order. Only the final span has `last`
/// set. A zero-length message yields exactly one empty span with `last = true`.
#[derive(Clone, Debug)]
pub struct Segmenter {
    msg_len: u32,
    max_payload: u32,
    offset: u32,
    done: bool,
}

impl Segmenter {
    /// Segments a message of `msg_len` octets into payloads of at most `max_payload`
    /// octets (`MULPDU - header`, see [`max_payload`]). `max_payload` must be at least
    /// 1; 0 is clamped to 1 rather than panicking.
    pub fn new(msg_len: u32, max_payload: u32) -> Self {
        Self {
            msg_len,
            max_payload: max_payload.max(1),
            offset: 0,
            done: false,
        }
    }

    fn remaining_spans(&self) -> usize {
        if self.done {
            return 0;
        }
        let rest = self.msg_len - self.offset;
        if rest == 0 {
            1
        } else {
            rest.div_ceil(self.max_payload) as usize
        }
    }
}

impl Iterator for Segmenter {
    type Item = Span;

    fn next(&mut self) -> Option<Span> {
        if self.done {
            return None;
        }
        let len = (self.msg_len - self.offset).min(self.max_payload);
        let span = Span {
            offset: self.offset,
            len,
            last: self.offset + len == self.msg_len,
        };
        self.offset += len;
        self.done = span.last;
        Some(span)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = self.remaining_spans();
        (n, Some(n))
    }
}

impl ExactSizeIterator for Segmenter {}

impl FusedIterator for Segmenter {}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn spans(msg_len: u32, max: u32) -> Vec<Span> {
        Segmenter::new(msg_len, max).collect()
    }

    fn span(offset: u32, len: u32, last: bool) -> Span {
        Span { offset, len, last }
    }

    #[test]
    fn max_payload_per_kind() {
        assert_eq!(max_payload(1500, true), 1486);
        assert_eq!(max_payload(1500, false), 1482);
        assert_eq!(max_payload(14, true), 0);
        assert_eq!(max_payload(17, false), 0);
        assert_eq!(max_payload(19, false), 1);
        assert_eq!(max_payload(u16::MAX, true), 65535 - 14);
    }

    #[test]
    fn rfc_example_tagged() {
        // RFC 5041 §5.2: 2048 octets, MULPDU 1500, initial TO 16384.
        let s = spans(2048, max_payload(1500, true));
        assert_eq!(s, [span(0, 1486, false), span(1486, 562, true)]);
        assert_eq!(s[0].to(16384), 16384);
        assert_eq!(s[1].to(16384), 17870);
    }

    #[test]
    fn rfc_example_untagged() {
        let s = spans(2048, max_payload(1500, false));
        assert_eq!(s, [span(0, 1482, false), span(1482, 566, true)]);
    }

    #[test]
    fn zero_length_message() {
        assert_eq!(spans(0, 100), [span(0, 0, true)]);
        let mut it = Segmenter::new(0, 1);
        assert_eq!(it.len(), 1);
        assert!(it.next().is_some());
        assert_eq!(it.len(), 0);
        assert_eq!(it.next(), None);
        assert_eq!(it.next(), None);
    }

    #[test]
    fn exact_multiples() {
        assert_eq!(
            spans(300, 100),
            [
                span(0, 100, false),
                span(100, 100, false),
                span(200, 100, true)
            ]
        );
        assert_eq!(spans(100, 100), [span(0, 100, true)]);
        assert_eq!(spans(99, 100), [span(0, 99, true)]);
        assert_eq!(spans(101, 100), [span(0, 100, false), span(100, 1, true)]);
    }

    #[test]
    fn zero_max_payload_is_clamped() {
        assert_eq!(spans(2, 0), [span(0, 1, false), span(1, 1, true)]);
    }

    #[test]
    fn huge_message() {
        let mut it = Segmenter::new(u32::MAX, u32::MAX);
        assert_eq!(it.next(), Some(span(0, u32::MAX, true)));
        assert_eq!(it.next(), None);
        let s = spans(u32::MAX, 1 << 31);
        assert_eq!(
            s,
            [span(0, 1 << 31, false), span(1 << 31, (1 << 31) - 1, true)]
        );
        assert_eq!(s[1].end(), u32::MAX);
        assert_eq!(span(8, 0, true).to(u64::MAX), 7);
    }

    proptest! {
        #[test]
        fn spans_tile_the_message(msg_len in 0u32..20_000, max in 1u32..3_000) {
            let it = Segmenter::new(msg_len, max);
            let expected = it.len();
            let s: Vec<Span> = it.collect();
            prop_assert_eq!(s.len(), expected);
            prop_assert!(!s.is_empty());
            let mut next = 0u32;
            for (i, sp) in s.iter().enumerate() {
                prop_assert_eq!(sp.offset, next);
                prop_assert!(sp.len <= max);
                prop_assert_eq!(sp.last, i == s.len() - 1);
                if !sp.last {
                    prop_assert_eq!(sp.len, max);
                }
                next = sp.end();
            }
            prop_assert_eq!(next, msg_len);
        }
    }
}
