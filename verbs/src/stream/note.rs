//! The byte stream's one control message: a Send of 24 octets, every field cumulative so
//! that a later note supersedes an earlier one.
//!
//! ```text
//!  0        8        16     20     24
//!  +--------+--------+------+------+
//!  | written| consumed| acked| flags|   (big-endian)
//!  +--------+--------+------+------+
//! ```
//!
//! `written`: octets this side has RDMA-written into the peer's ring so far; `consumed`:
//! octets this side's reader has taken out of its own ring (the peer's credit); `acked`:
//! the peer's notes (other than pure acknowledgements) this side has processed; `flags`:
//! [`FIN`](Note::FIN) (nothing will be written after `written`), [`WANT`](Note::WANT) (the
//! writer waits for credit), [`ACK_ONLY`](Note::ACK_ONLY) (a pure acknowledgement, itself
//! not acknowledged).

/// Octets of a note.
pub(crate) const NOTE_LEN: usize = 24;

/// One control message.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Note {
    pub(crate) written: u64,
    pub(crate) consumed: u64,
    pub(crate) acked: u32,
    pub(crate) flags: u32,
}

impl Note {
    /// The writer is done: nothing follows `written`.
    pub(crate) const FIN: u32 = 1;
    /// The writer is out of credit and waits for the reader's next `consumed`.
    pub(crate) const WANT: u32 = 2;
    /// A pure acknowledgement: the receiver does not acknowledge it in turn.
    pub(crate) const ACK_ONLY: u32 = 4;

    pub(crate) fn encode(&self) -> [u8; NOTE_LEN] {
        let mut b = [0; NOTE_LEN];
        b[0..8].copy_from_slice(&self.written.to_be_bytes());
        b[8..16].copy_from_slice(&self.consumed.to_be_bytes());
        b[16..20].copy_from_slice(&self.acked.to_be_bytes());
        b[20..24].copy_from_slice(&self.flags.to_be_bytes());
        b
    }

    /// `None` unless exactly a note's octets.
    pub(crate) fn decode(b: &[u8]) -> Option<Self> {
        let b: &[u8; NOTE_LEN] = b.try_into().ok()?;
        let word =
            |r: std::ops::Range<usize>| b[r].iter().fold(0u64, |a, &x| a << 8 | u64::from(x));
        Some(Self {
            written: word(0..8),
            consumed: word(8..16),
            acked: word(16..20) as u32,
            flags: word(20..24) as u32,
        })
    }

    pub(crate) fn has(&self, flag: u32) -> bool {
        self.flags & flag != 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_note_is_24_big_endian_octets() {
        let n = Note {
            written: 0x0102_0304_0506_0708,
            consumed: 0x1112_1314_1516_1718,
            acked: 0x2122_2324,
            flags: Note::FIN | Note::ACK_ONLY,
        };
        let b = n.encode();
        assert_eq!(
            b,
            [
                1, 2, 3, 4, 5, 6, 7, 8, 0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17, 0x18, 0x21, 0x22,
                0x23, 0x24, 0, 0, 0, 5
            ]
        );
        assert_eq!(Note::decode(&b), Some(n));
        assert_eq!(Note::decode(&b[..23]), None);
        assert!(n.has(Note::FIN) && !n.has(Note::WANT));
    }
}
