//! The byte stream's flow control, sans IO: ring credit one way, note budget the other.
//!
//! Each side writes into the peer's ring with RDMA Writes and then tells it how far with a
//! [`Note`] (a Send). Ring credit: a writer never has more than the peer's ring size
//! written and not yet consumed. Note budget: a Send needs a receive posted at the peer,
//! and iWARP has no receiver-not-ready retry (a Send that finds none ends the connection),
//! so each side has at most [`MAX_NOTES`] notes the peer has not acknowledged, and
//! acknowledges the peer's notes promptly with a note of its own (a pure acknowledgement
//! when it has nothing else to say, itself never acknowledged). A side therefore keeps
//! [`RECVS`] receives posted: at most `MAX_NOTES` notes plus as many pure
//! acknowledgements (each acknowledges a distinct note the peer sent) can be unprocessed
//! at once.

use super::note::Note;

/// Notes a side may have unacknowledged.
pub(crate) const MAX_NOTES: u32 = 8;
/// Receives each side keeps posted for the peer's notes.
pub(crate) const RECVS: u32 = 2 * MAX_NOTES + 2;

/// Both directions' counters of one side.
#[derive(Debug)]
pub(crate) struct Flow {
    /// The peer's ring size.
    peer_ring: u64,
    /// This side's ring size.
    ring: u64,
    written: u64,
    written_told: u64,
    peer_consumed: u64,
    peer_written: u64,
    consumed: u64,
    consumed_told: u64,
    /// Notes sent that expect an acknowledgement, and how many of them the peer has
    /// acknowledged.
    sent: u32,
    peer_acked: u32,
    /// The peer's notes processed, and how many of them this side has acknowledged.
    received: u32,
    acked_told: u32,
    fin: bool,
    fin_told: bool,
    peer_fin: bool,
    /// This side's writer waits for credit.
    want: bool,
    /// What the peer last heard of `want`.
    told_want: bool,
    peer_wants: bool,
}

impl Flow {
    pub(crate) fn new(ring: u64, peer_ring: u64) -> Self {
        Self {
            peer_ring,
            ring,
            written: 0,
            written_told: 0,
            peer_consumed: 0,
            peer_written: 0,
            consumed: 0,
            consumed_told: 0,
            sent: 0,
            peer_acked: 0,
            received: 0,
            acked_told: 0,
            fin: false,
            fin_told: false,
            peer_fin: false,
            want: false,
            told_want: false,
            peer_wants: false,
        }
    }

    /// Where the next octets go in the peer's ring, and how many fit now (up to its end;
    /// the caller wraps). Zero: out of credit (the next note says the writer waits).
    pub(crate) fn write_room(&mut self) -> (u64, u64) {
        let free = self.peer_ring - (self.written - self.peer_consumed);
        let at = self.written % self.peer_ring;
        let room = free.min(self.peer_ring - at);
        self.want = room == 0;
        (at, room)
    }

    /// `n` octets were written into the peer's ring.
    pub(crate) fn wrote(&mut self, n: u64) {
        self.written += n;
    }

    /// The last `n` octets of [`wrote`](Self::wrote) did not go after all.
    pub(crate) fn unwrote(&mut self, n: u64) {
        self.written -= n;
    }

    /// Nothing more will be written.
    pub(crate) fn finish(&mut self) {
        self.fin = true;
    }

    /// True once the FIN has gone out in a note.
    pub(crate) fn fin_told(&self) -> bool {
        self.fin_told
    }

    /// Where the next unread octets are in this side's ring, and how many (up to its end).
    pub(crate) fn read_room(&self) -> (u64, u64) {
        let avail = self.peer_written - self.consumed;
        let at = self.consumed % self.ring;
        (at, avail.min(self.ring - at))
    }

    /// True when everything the peer will ever write has been read.
    pub(crate) fn at_eof(&self) -> bool {
        self.peer_fin && self.consumed == self.peer_written
    }

    /// The reader took `n` octets out of the ring.
    pub(crate) fn consumed(&mut self, n: u64) {
        self.consumed += n;
    }

    /// Takes in a note from the peer. False: the note breaks the protocol (it claims more
    /// than the ring holds, or goes backwards), and the connection must end.
    pub(crate) fn on_note(&mut self, n: &Note) -> bool {
        let sane = n.written >= self.peer_written
            && n.written - self.consumed <= self.ring
            && n.consumed >= self.peer_consumed
            && n.consumed <= self.written
            && n.acked >= self.peer_acked
            && n.acked <= self.sent
            && !(self.peer_fin && n.written != self.peer_written);
        if !sane {
            return false;
        }
        self.peer_written = n.written;
        self.peer_consumed = n.consumed;
        self.peer_acked = n.acked;
        self.peer_fin |= n.has(Note::FIN);
        self.peer_wants = n.has(Note::WANT);
        if !n.has(Note::ACK_ONLY) {
            self.received += 1;
        }
        true
    }

    /// The note to send now, if one is due and the budget allows it; it counts as sent
    /// once [`sent`](Self::sent) says so.
    pub(crate) fn next_note(&self) -> Option<Note> {
        let news = self.written > self.written_told || (self.fin && !self.fin_told);
        let unread_credit = self.consumed - self.consumed_told;
        let credit = unread_credit > 0 && (unread_credit >= self.ring / 4 || self.peer_wants);
        let want = self.want != self.told_want;
        let ack_only = if (news || credit || want) && self.sent - self.peer_acked < MAX_NOTES {
            false
        } else if self.received - self.acked_told >= MAX_NOTES / 2 {
            // Half the peer's budget unacknowledged: a pure acknowledgement (fewer would
            // double the messages; the peer is not held up before its budget is spent).
            true
        } else {
            return None;
        };
        let mut flags = 0;
        if self.fin {
            flags |= Note::FIN;
        }
        if self.want {
            flags |= Note::WANT;
        }
        if ack_only {
            flags |= Note::ACK_ONLY;
        }
        Some(Note {
            written: self.written,
            consumed: self.consumed,
            acked: self.received,
            flags,
        })
    }

    /// `note`, from [`next_note`](Self::next_note), went out.
    pub(crate) fn sent(&mut self, note: &Note) {
        if !note.has(Note::ACK_ONLY) {
            self.sent += 1;
        }
        self.written_told = note.written;
        self.consumed_told = note.consumed;
        self.acked_told = note.acked;
        self.fin_told |= note.has(Note::FIN);
        self.told_want = note.has(Note::WANT);
    }
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;

    use super::*;
    use rdmap::testing::XorShift;

    /// Two sides exchanging notes in order, with writes, reads and deliveries interleaved
    /// at random: every octet written is read, the notes waiting at a side never exceed
    /// its posted receives, and nothing stalls.
    #[test]
    fn random_interleavings_never_stall_or_overrun_the_receives() {
        for seed in 1..200u64 {
            let mut rng = XorShift::new(seed);
            let ring = [64u64, 1000, 4096][seed as usize % 3];
            let mut side = [Flow::new(ring, ring), Flow::new(ring, ring)];
            let mut wire: [VecDeque<Note>; 2] = [VecDeque::new(), VecDeque::new()];
            let total = 20_000u64;
            let mut steps = 0;
            while !(side[0].written == total
                && side[1].written == total
                && side[0].consumed == total
                && side[1].consumed == total)
            {
                steps += 1;
                assert!(steps < 1_000_000, "seed {seed}: stalled");
                let i = rng.range(0, 1);
                match rng.range(0, 3) {
                    0 => {
                        let (_, room) = side[i].write_room();
                        let n = room
                            .min(rng.range(1, 300) as u64)
                            .min(total - side[i].written);
                        side[i].wrote(n);
                    }
                    1 => {
                        let (_, avail) = side[i].read_room();
                        let n = avail.min(rng.range(1, 300) as u64);
                        side[i].consumed(n);
                    }
                    2 => {
                        if let Some(n) = wire[1 - i].pop_front() {
                            assert!(side[i].on_note(&n), "seed {seed}: a sane note refused");
                        }
                    }
                    _ => {}
                }
                // Every side sends what it owes at once (as the stream does after each
                // event).
                for j in 0..2 {
                    while let Some(n) = side[j].next_note() {
                        side[j].sent(&n);
                        wire[j].push_back(n);
                        assert!(
                            wire[j].len() <= RECVS as usize,
                            "seed {seed}: {} notes waiting for {RECVS} receives",
                            wire[j].len()
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn a_note_claiming_more_than_the_ring_is_refused() {
        let mut f = Flow::new(100, 100);
        assert!(!f.on_note(&Note {
            written: 101,
            ..Note::default()
        }));
        assert!(
            !f.on_note(&Note {
                consumed: 1,
                ..Note::default()
            }),
            "credit for nothing written"
        );
        assert!(f.on_note(&Note {
            written: 100,
            flags: Note::FIN,
            ..Note::default()
        }));
        assert!(
            !f.on_note(&Note {
                written: 100,
                acked: 1,
                ..Note::default()
            }),
            "acks a note never sent"
        );
    }
}
