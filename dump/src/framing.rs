//! FPDU framing of one direction for an analyzer: reports a bad CRC or marker and goes on.
//!
//! `mpa::Deframer` is the receiver of a live connection: its errors are final. An analyzer
//! wants every FPDU, so this frames by ULPDU_Length itself with mpa's layout rules
//! ([`mpa::wire::fpdu::wire_len`], [`mpa::pad_len`], [`mpa::crc32c`], the marker grid of
//! RFC 5044 §4.3) and checks the CRC and each marker's FPDUPTR without stopping. After a
//! gap in the TCP stream it resynchronises on the next marker's FPDUPTR when markers are
//! on; without markers the rest of the direction cannot be framed.

use mpa::wire::fpdu::{self, CRC_LEN, LENGTH_LEN, MARKER_LEN, MARKER_PERIOD};
use mpa::wire::marker::FPDUPTR_MASK;

/// CRC verdict of one FPDU.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CrcCheck {
    /// CRC not negotiated; the field holds `received` (should be 0, not checked).
    NotUsed {
        /// The CRC field as received (little-endian).
        received: u32,
    },
    /// The CRC matches.
    Good(u32),
    /// The CRC does not match.
    Bad {
        /// CRC32c of the FPDU as received.
        expected: u32,
        /// The CRC field (little-endian).
        received: u32,
    },
}

/// A marker whose FPDUPTR does not point at its FPDU's header, or whose reserved half is
/// not zero.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BadMarker {
    /// Stream position of the marker.
    pub pos: u64,
    /// FPDUPTR the framing requires.
    pub expected: u16,
    /// FPDUPTR received.
    pub received: u16,
    /// The reserved half as received.
    pub reserved: u16,
}

/// One FPDU, markers and framing removed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawFpdu {
    /// Stream position (octets since this direction's SeqStart) of its first octet.
    pub pos: u64,
    /// Octets on the wire, markers included.
    pub wire_len: usize,
    /// The ULPDU (DDP segment).
    pub ulpdu: Vec<u8>,
    /// Whether the PAD octets are all zero.
    pub pad_zero: bool,
    /// CRC verdict.
    pub crc: CrcCheck,
    /// Markers inside the FPDU with a wrong FPDUPTR or reserved half.
    pub bad_markers: Vec<BadMarker>,
    /// Frame whose segment completed the FPDU.
    pub frame: u64,
}

/// What the framer reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FramerEvent {
    /// One FPDU.
    Fpdu(RawFpdu),
    /// After a gap, framing found again at stream position `pos`.
    Resynced {
        /// Stream position of the FPDU found.
        pos: u64,
        /// Octets skipped since the gap.
        skipped: u64,
        /// Frame that carried the marker.
        frame: u64,
    },
    /// A gap without markers: the rest of this direction cannot be framed.
    Lost {
        /// Stream position of the gap.
        pos: u64,
        /// Frame after the gap.
        frame: u64,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    InSync,
    Resync { skipped: u64 },
    Lost,
}

/// FPDU framer for one direction, from SeqStart (the first octet after the MPA frame).
#[derive(Debug, Clone)]
pub struct FpduFramer {
    markers: bool,
    crc: bool,
    buf: Vec<u8>,
    /// Stream position of `buf[0]`.
    buf_pos: u64,
    state: State,
    discarded: u64,
}

impl FpduFramer {
    /// A framer at SeqStart.
    pub fn new(markers: bool, crc: bool) -> Self {
        Self {
            markers,
            crc,
            buf: Vec::new(),
            buf_pos: 0,
            state: State::InSync,
            discarded: 0,
        }
    }

    /// Octets buffered that do not (yet) form a whole FPDU.
    pub fn buffered(&self) -> usize {
        self.buf.len()
    }

    /// Octets thrown away: partial FPDUs cut by a gap, octets skipped while resynchronising
    /// and everything after a gap that could not be framed.
    pub fn discarded(&self) -> u64 {
        self.discarded
    }

    /// Feeds in-order octets delivered by `frame`; appends the FPDUs they complete.
    pub fn push(&mut self, data: &[u8], frame: u64, out: &mut Vec<FramerEvent>) {
        if self.state == State::Lost {
            self.discarded += data.len() as u64;
            return;
        }
        self.buf.extend_from_slice(data);
        loop {
            if let State::Resync { .. } = self.state
                && !self.resync(frame, out)
            {
                return;
            }
            match self.next_fpdu(frame) {
                Some(fpdu) => out.push(FramerEvent::Fpdu(fpdu)),
                None => return,
            }
        }
    }

    /// `len` octets are missing from the stream here.
    pub fn gap(&mut self, len: u64, frame: u64, out: &mut Vec<FramerEvent>) {
        let pos = self.buf_pos + self.buf.len() as u64;
        self.discarded += self.buf.len() as u64;
        self.buf.clear();
        self.buf_pos = pos + len;
        self.state = match self.state {
            State::Lost => State::Lost,
            _ if !self.markers => {
                out.push(FramerEvent::Lost { pos, frame });
                State::Lost
            }
            State::Resync { skipped } => State::Resync { skipped },
            State::InSync => State::Resync { skipped: 0 },
        };
    }

    /// Looks for the next marker after a gap; true once framing is found again.
    fn resync(&mut self, frame: u64, out: &mut Vec<FramerEvent>) -> bool {
        loop {
            let State::Resync { skipped } = self.state else {
                return true;
            };
            let marker = self.buf_pos.div_ceil(MARKER_PERIOD) * MARKER_PERIOD;
            let at = (marker - self.buf_pos) as usize;
            let Some(&[_, _, hi, lo]) = self.buf.get(at..at + MARKER_LEN) else {
                return false;
            };
            let ptr = u64::from(u16::from_be_bytes([hi, lo]) & FPDUPTR_MASK);
            // FPDUPTR 0: a marker between FPDUs, the next FPDU starts with it. Otherwise
            // it points back at the ULPDU_Length of the FPDU holding it; that FPDU began
            // with a marker if its header sits right after a marker slot.
            let start = match marker.checked_sub(ptr) {
                Some(h) if ptr != 0 && h % MARKER_PERIOD == MARKER_LEN as u64 => {
                    Some(h - MARKER_LEN as u64)
                }
                Some(h) => Some(h),
                None => None,
            };
            match start {
                Some(start) if start >= self.buf_pos => {
                    let cut = (start - self.buf_pos) as usize;
                    self.drop_front(cut);
                    let skipped = skipped + cut as u64;
                    self.state = State::InSync;
                    out.push(FramerEvent::Resynced {
                        pos: start,
                        skipped,
                        frame,
                    });
                    return true;
                }
                _ => {
                    // That FPDU's start was lost too: try the next marker.
                    let cut = at + MARKER_LEN;
                    self.drop_front(cut);
                    self.state = State::Resync {
                        skipped: skipped + cut as u64,
                    };
                }
            }
        }
    }

    fn drop_front(&mut self, n: usize) {
        let n = n.min(self.buf.len());
        self.buf.drain(..n);
        self.buf_pos += n as u64;
        self.discarded += n as u64;
    }

    /// Frames one FPDU from the front of the buffer, if complete.
    fn next_fpdu(&mut self, frame: u64) -> Option<RawFpdu> {
        let pos = self.buf_pos;
        let lead = if self.markers && pos.is_multiple_of(MARKER_PERIOD) {
            MARKER_LEN
        } else {
            0
        };
        let &[hi, lo] = self.buf.get(lead..lead + LENGTH_LEN)? else {
            return None;
        };
        let ulen = usize::from(u16::from_be_bytes([hi, lo]));
        let total = fpdu::wire_len(pos, ulen, self.markers);
        let wire = self.buf.get(..total)?;
        let covered = total - CRC_LEN;
        let &[a, b, c, d] = wire.get(covered..)? else {
            return None;
        };
        let received = u32::from_le_bytes([a, b, c, d]);
        let crc = if self.crc {
            let expected = mpa::crc32c(wire.get(..covered)?);
            if expected == received {
                CrcCheck::Good(received)
            } else {
                CrcCheck::Bad { expected, received }
            }
        } else {
            CrcCheck::NotUsed { received }
        };
        // Split the covered octets into markers and the body (length, ULPDU, PAD).
        let mut body = Vec::with_capacity(covered);
        let mut bad_markers = Vec::new();
        let mut from = 0usize;
        if self.markers {
            let first = (pos.div_ceil(MARKER_PERIOD) * MARKER_PERIOD - pos) as usize;
            for at in (first..covered).step_by(MARKER_PERIOD as usize) {
                body.extend_from_slice(wire.get(from..at)?);
                let &[r0, r1, p0, p1] = wire.get(at..at + MARKER_LEN)? else {
                    return None;
                };
                let (reserved, received) =
                    (u16::from_be_bytes([r0, r1]), u16::from_be_bytes([p0, p1]));
                let expected = if at < lead { 0 } else { (at - lead) as u16 };
                if received & FPDUPTR_MASK != expected || reserved != 0 {
                    bad_markers.push(BadMarker {
                        pos: pos + at as u64,
                        expected,
                        received,
                        reserved,
                    });
                }
                from = at + MARKER_LEN;
            }
        }
        body.extend_from_slice(wire.get(from..covered)?);
        let ulpdu = body.get(LENGTH_LEN..LENGTH_LEN + ulen)?.to_vec();
        let pad_zero = body
            .get(LENGTH_LEN + ulen..)
            .is_some_and(|p| p.iter().all(|&x| x == 0));
        debug_assert_eq!(body.len(), LENGTH_LEN + ulen + mpa::pad_len(ulen));
        self.buf.drain(..total);
        self.buf_pos += total as u64;
        Some(RawFpdu {
            pos,
            wire_len: total,
            ulpdu,
            pad_zero,
            crc,
            bad_markers,
            frame,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::BytesMut;
    use mpa::{Deframer, Framer};

    fn fpdus(events: &[FramerEvent]) -> Vec<&RawFpdu> {
        events
            .iter()
            .filter_map(|e| match e {
                FramerEvent::Fpdu(f) => Some(f),
                _ => None,
            })
            .collect()
    }

    /// ULPDUs of increasing lengths through the real `mpa::Framer`.
    fn stream(markers: bool, crc: bool, n: usize) -> (BytesMut, Vec<Vec<u8>>) {
        let mut f = Framer::new(markers, crc);
        let mut wire = BytesMut::new();
        let mut ulpdus = Vec::new();
        for i in 0..n {
            let u: Vec<u8> = (0..(37 * i + 5) % 900).map(|x| (x + i) as u8).collect();
            f.encode(&u, b"", &mut wire);
            ulpdus.push(u);
        }
        (wire, ulpdus)
    }

    #[test]
    fn same_ulpdus_as_mpa_deframer_any_chunking() {
        for (markers, crc) in [(false, false), (false, true), (true, false), (true, true)] {
            let (wire, ulpdus) = stream(markers, crc, 12);
            let mut reference = Deframer::new(markers, crc);
            let mut copy = wire.clone();
            for u in &ulpdus {
                assert_eq!(&reference.decode(&mut copy).unwrap().unwrap()[..], &u[..]);
            }
            for chunk in [1, 7, 512, wire.len()] {
                let mut framer = FpduFramer::new(markers, crc);
                let mut out = Vec::new();
                for (i, piece) in wire.chunks(chunk).enumerate() {
                    framer.push(piece, i as u64, &mut out);
                }
                let got = fpdus(&out);
                assert_eq!(got.len(), ulpdus.len(), "markers {markers} crc {crc}");
                for (f, u) in got.iter().zip(&ulpdus) {
                    assert_eq!(&f.ulpdu, u);
                    assert!(f.bad_markers.is_empty() && f.pad_zero);
                    assert!(matches!(
                        f.crc,
                        CrcCheck::Good(_) | CrcCheck::NotUsed { received: 0 }
                    ));
                }
                assert_eq!(framer.buffered(), 0);
            }
        }
    }

    #[test]
    fn bad_crc_is_reported_and_framing_goes_on() {
        let (mut wire, ulpdus) = stream(false, true, 3);
        wire[4] ^= 0xff; // inside the first ULPDU
        let mut framer = FpduFramer::new(false, true);
        let mut out = Vec::new();
        framer.push(&wire, 9, &mut out);
        let got = fpdus(&out);
        assert_eq!(got.len(), 3);
        assert!(matches!(got[0].crc, CrcCheck::Bad { .. }));
        assert!(matches!(got[1].crc, CrcCheck::Good(_)));
        assert_eq!(got[2].ulpdu, ulpdus[2]);
        assert_eq!(got[0].frame, 9);
    }

    #[test]
    fn wrong_fpduptr_is_reported() {
        let (mut wire, _) = stream(true, false, 4);
        // The leading marker at position 0 must have FPDUPTR 0.
        wire[3] = 8;
        let mut framer = FpduFramer::new(true, false);
        let mut out = Vec::new();
        framer.push(&wire, 1, &mut out);
        let got = fpdus(&out);
        assert_eq!(got.len(), 4);
        assert_eq!(
            got[0].bad_markers,
            vec![BadMarker {
                pos: 0,
                expected: 0,
                received: 8,
                reserved: 0
            }]
        );
    }

    #[test]
    fn gap_with_markers_resynchronises() {
        let (wire, ulpdus) = stream(true, true, 12);
        // Lose octets 100..700: the FPDUs overlapping them are gone.
        let mut framer = FpduFramer::new(true, true);
        let mut out = Vec::new();
        framer.push(&wire[..100], 1, &mut out);
        framer.gap(600, 2, &mut out);
        framer.push(&wire[700..], 3, &mut out);
        let resync = out
            .iter()
            .find_map(|e| match e {
                FramerEvent::Resynced { pos, .. } => Some(*pos),
                _ => None,
            })
            .expect("resynchronised");
        assert!(resync >= 700);
        let got = fpdus(&out);
        assert!(!got.is_empty());
        // Every FPDU framed after the gap is a real one, with a good CRC.
        for f in &got {
            assert!(matches!(f.crc, CrcCheck::Good(_)));
            assert!(ulpdus.contains(&f.ulpdu));
        }
        assert_eq!(got.last().unwrap().ulpdu, ulpdus[11]);
    }

    #[test]
    fn gap_without_markers_is_lost() {
        let (wire, _) = stream(false, true, 5);
        let mut framer = FpduFramer::new(false, true);
        let mut out = Vec::new();
        framer.push(&wire[..10], 1, &mut out);
        framer.gap(20, 2, &mut out);
        framer.push(&wire[30..], 3, &mut out);
        assert_eq!(out, vec![FramerEvent::Lost { pos: 10, frame: 2 }]);
        assert_eq!(framer.discarded(), wire.len() as u64 - 20);
    }
}
