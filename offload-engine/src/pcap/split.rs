//! Cuts one direction of a connection's byte stream into capture segments the way
//! Wireshark's MPA dissector wants them: the MPA Request or Reply alone in the first
//! segment, then exactly one FPDU per segment (tshark 4.0.17 places markers from the
//! segment boundaries, so an FPDU with markers must neither share nor straddle segments).
//!
//! The splitter reads only MPA framing (frame header, ULPDU_Length, the marker rule); it
//! never judges the content. What does not look like MPA goes out in plain chunks.

use mpa::wire::fpdu::{LENGTH_LEN, MARKER_LEN, MARKER_PERIOD, wire_len};
use mpa::wire::frame::{FLAG_MARKERS, FLAG_REJECT, HEADER_LEN, KEY_REPLY, KEY_REQUEST};

/// What this direction's MPA Request or Reply said.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct FrameInfo {
    /// M bit: the other direction carries markers.
    pub(crate) markers: bool,
    /// Reject bit: no FPDU mode follows.
    pub(crate) reject: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    /// Expecting the MPA Request or Reply.
    Frame,
    /// FPDU mode; `pos` counts octets since this direction's first FPDU (markers included).
    Fpdu { pos: u64 },
    /// Not MPA (or after a reject): plain chunks.
    Raw,
}

/// One direction's segmenter.
#[derive(Debug)]
pub(crate) struct Splitter {
    buf: Vec<u8>,
    mode: Mode,
    frame: Option<FrameInfo>,
    max_seg: usize,
}

impl Splitter {
    /// A splitter whose segments carry at most `max_seg` octets (at least 1).
    pub(crate) fn new(max_seg: usize) -> Self {
        Self {
            buf: Vec::new(),
            mode: Mode::Frame,
            frame: None,
            max_seg: max_seg.max(1),
        }
    }

    /// This direction's MPA frame, once it has been seen whole.
    pub(crate) fn frame(&self) -> Option<FrameInfo> {
        self.frame
    }

    /// Appends octets of the stream.
    pub(crate) fn push(&mut self, data: &[u8]) {
        self.buf.extend_from_slice(data);
    }

    /// Octets waiting for the rest of their frame or FPDU.
    #[cfg(test)]
    pub(crate) fn pending(&self) -> usize {
        self.buf.len()
    }

    /// Takes every complete segment. `peer` is the other direction's MPA frame: its M bit
    /// says whether this direction carries markers, so FPDUs wait until it is known.
    pub(crate) fn drain(&mut self, peer: Option<FrameInfo>, out: &mut Vec<Vec<u8>>) {
        let mut buf = std::mem::take(&mut self.buf);
        let mut start = 0;
        while let Some(len) = self.next_len(buf.get(start..).unwrap_or_default(), peer) {
            if let Some(unit) = buf.get(start..start + len) {
                out.extend(unit.chunks(self.max_seg).map(<[u8]>::to_vec));
            }
            start += len;
        }
        buf.drain(..start);
        self.buf = buf;
    }

    /// Takes everything left, complete or not (at close).
    pub(crate) fn flush(&mut self, out: &mut Vec<Vec<u8>>) {
        out.extend(self.buf.chunks(self.max_seg).map(<[u8]>::to_vec));
        self.buf.clear();
    }

    /// The length of the next complete unit at the front of `rest`, and the mode change
    /// it causes; `None` when more octets are needed.
    fn next_len(&mut self, rest: &[u8], peer: Option<FrameInfo>) -> Option<usize> {
        if rest.is_empty() {
            return None;
        }
        match self.mode {
            Mode::Frame => {
                let key = rest.get(..KEY_REQUEST.len().min(rest.len()))?;
                let is_key = |k: &[u8]| k.starts_with(key);
                if !is_key(&KEY_REQUEST) && !is_key(&KEY_REPLY) {
                    self.mode = Mode::Raw;
                    return self.next_len(rest, peer);
                }
                let header = rest.get(..HEADER_LEN)?;
                let flags = header.get(16).copied().unwrap_or(0);
                let pd_len = match header.get(18..20) {
                    Some(&[hi, lo]) => usize::from(u16::from_be_bytes([hi, lo])),
                    _ => 0,
                };
                let total = HEADER_LEN + pd_len;
                if rest.len() < total {
                    return None;
                }
                let info = FrameInfo {
                    markers: flags & FLAG_MARKERS != 0,
                    reject: flags & FLAG_REJECT != 0,
                };
                self.frame = Some(info);
                self.mode = if info.reject {
                    Mode::Raw
                } else {
                    Mode::Fpdu { pos: 0 }
                };
                Some(total)
            }
            Mode::Fpdu { pos } => {
                let peer = peer?;
                if peer.reject {
                    self.mode = Mode::Raw;
                    return self.next_len(rest, Some(peer));
                }
                let lead = if peer.markers && pos % MARKER_PERIOD == 0 {
                    MARKER_LEN
                } else {
                    0
                };
                let &[hi, lo] = rest.get(lead..lead + LENGTH_LEN)? else {
                    return None;
                };
                let total = wire_len(pos, usize::from(u16::from_be_bytes([hi, lo])), peer.markers);
                if rest.len() < total {
                    return None;
                }
                self.mode = Mode::Fpdu {
                    pos: pos + total as u64,
                };
                Some(total)
            }
            Mode::Raw => Some(rest.len()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::BytesMut;
    use mpa::Framer;

    fn frame(key: &[u8; 16], flags: u8, pd: &[u8]) -> Vec<u8> {
        let mut v = key.to_vec();
        v.extend_from_slice(&[flags, 1]);
        v.extend_from_slice(&(pd.len() as u16).to_be_bytes());
        v.extend_from_slice(pd);
        v
    }

    fn lens(out: &[Vec<u8>]) -> Vec<usize> {
        out.iter().map(Vec::len).collect()
    }

    #[test]
    fn frame_then_one_fpdu_per_segment_fed_octet_by_octet() {
        let mut framer = Framer::new(false, true);
        let mut wire = BytesMut::new();
        framer.encode(&[1; 14], &[2; 100], &mut wire);
        framer.encode(&[3; 14], &[], &mut wire);
        let mut stream = frame(&KEY_REQUEST, 0x40, b"pd");
        stream.extend_from_slice(&wire);
        let mut s = Splitter::new(65_000);
        let peer = FrameInfo {
            markers: false,
            reject: false,
        };
        let mut out = Vec::new();
        for b in &stream {
            s.push(&[*b]);
            s.drain(Some(peer), &mut out);
        }
        assert_eq!(lens(&out), [22, 2 + 114 + 4, 2 + 14 + 4]);
        assert_eq!(out.concat(), stream);
        assert_eq!(s.pending(), 0);
        assert_eq!(
            s.frame(),
            Some(FrameInfo {
                markers: false,
                reject: false
            })
        );
    }

    #[test]
    fn fpdus_wait_for_the_peer_frame_and_follow_its_marker_bit() {
        let mut framer = Framer::new(true, false);
        let mut wire = BytesMut::new();
        for n in [600, 10, 1000] {
            framer.encode(&[0; 18], &vec![7; n], &mut wire);
        }
        let mut stream = frame(&KEY_REPLY, 0x80, b"");
        stream.extend_from_slice(&wire);
        let mut s = Splitter::new(65_000);
        let mut out = Vec::new();
        s.push(&stream);
        s.drain(None, &mut out);
        assert_eq!(lens(&out), [20], "FPDUs wait for the peer's M bit");
        let peer = FrameInfo {
            markers: true,
            reject: false,
        };
        s.drain(Some(peer), &mut out);
        let expect: Vec<usize> = {
            let mut pos = 0u64;
            [600, 10, 1000]
                .iter()
                .map(|n| {
                    let l = wire_len(pos, 18 + n, true);
                    pos += l as u64;
                    l
                })
                .collect()
        };
        assert_eq!(lens(&out)[1..], expect[..]);
        assert_eq!(out.concat(), stream);
    }

    #[test]
    fn non_mpa_and_rejects_go_out_raw_in_max_seg_chunks() {
        let mut s = Splitter::new(10);
        let mut out = Vec::new();
        s.push(b"GET / HTTP/1.1\r\n\r\n");
        s.drain(None, &mut out);
        assert_eq!(lens(&out), [10, 8]);

        let mut s = Splitter::new(1000);
        let mut out = Vec::new();
        let mut stream = frame(&KEY_REPLY, FLAG_REJECT, b"no");
        stream.extend_from_slice(b"trailing");
        s.push(&stream);
        s.drain(None, &mut out);
        assert_eq!(lens(&out), [22, 8]);
        assert!(s.frame().is_some_and(|f| f.reject));
    }

    #[test]
    fn flush_emits_a_partial_fpdu() {
        let mut s = Splitter::new(1000);
        let mut out = Vec::new();
        s.push(&frame(&KEY_REQUEST, 0, b""));
        s.push(&[0, 50, 1, 2]);
        let peer = FrameInfo {
            markers: false,
            reject: false,
        };
        s.drain(Some(peer), &mut out);
        assert_eq!(lens(&out), [20]);
        s.flush(&mut out);
        assert_eq!(lens(&out), [20, 4]);
        assert_eq!(s.pending(), 0);
    }
}
