//! Receive side of FPDU mode: FPDU stream -> ULPDUs (markers, length, PAD, CRC stripped).

use bytes::{Buf, Bytes, BytesMut};

use crate::wire::fpdu::{self, CRC_LEN, LENGTH_LEN, MARKER_LEN, MARKER_PERIOD};
use crate::wire::marker::FPDUPTR_MASK;
use crate::{MpaError, Negotiated, pad_len};

/// Receive side of FPDU mode for one direction.
///
/// Same contract as tokio-util's `Decoder::decode`: `Ok(None)` = need more bytes (nothing is
/// consumed), `Ok(Some(ulpdu))` = one ULPDU with markers, length, PAD and CRC stripped, and
/// exactly its FPDU's wire octets consumed from `src`. Errors are final: after an error
/// every call returns the same error again (no resynchronisation, RFC 5044 §8).
///
/// Checks, in this order: ULPDU_Length against [`set_max_ulpdu`](Self::set_max_ulpdu)
/// ([`MpaError::UlpduTooLong`]); the CRC when enabled ([`MpaError::Crc`]; with CRC off the
/// field is ignored); the FPDUPTR of every marker against the framing, ignoring the
/// reserved half and the two low bits ([`MpaError::Marker`]).
///
/// Without markers the ULPDU is `split_to(..).freeze()` of `src`: zero copy, no
/// allocation. With markers the ULPDU is compacted in place inside `src` first.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub struct Deframer {
    markers: bool,
    crc: bool,
    max_ulpdu: u16,
    pos: u64,
    /// Not carried by a snapshot: a latched error has ended the stream, and only a
    /// connected stream is moved.
    #[serde(skip)]
    error: Option<MpaError>,
}

impl Deframer {
    /// A deframer at the peer's SeqStart. With `crc = false` the CRC field is not checked.
    pub fn new(markers: bool, crc: bool) -> Self {
        Self {
            markers,
            crc,
            max_ulpdu: u16::MAX,
            pos: 0,
            error: None,
        }
    }

    /// A deframer for the peer's direction of a negotiated connection (`markers_rx`, `crc`).
    pub fn from_negotiated(n: &Negotiated) -> Self {
        Self::new(n.markers_rx, n.crc)
    }

    /// True when the peer inserts markers.
    pub fn markers(&self) -> bool {
        self.markers
    }

    /// Largest ULPDU_Length accepted; larger is [`MpaError::UlpduTooLong`]. Default
    /// `u16::MAX` (accept anything that fits), which is what a connection uses: MPA
    /// negotiates no receive limit (the MULPDU is the sender's own, from its EMSS), and
    /// peers that send FPDUs beyond one segment (siw with GSO, this stack with large
    /// FPDUs) go up to 64 KiB. The field itself bounds an FPDU's buffer to 64 KiB plus its
    /// overhead; a peer that announces a long FPDU and stops is the stall timeout's to end.
    pub fn set_max_ulpdu(&mut self, max: u16) {
        self.max_ulpdu = max;
    }

    /// Decodes one FPDU from the front of `src`; see the type docs for the contract.
    pub fn decode(&mut self, src: &mut BytesMut) -> Result<Option<Bytes>, MpaError> {
        if let Some(e) = &self.error {
            return Err(e.clone());
        }
        let result = self.decode_one(src);
        if let Err(e) = &result {
            tracing::debug!(error = %e, pos = self.pos, "MPA receive error");
            self.error = Some(e.clone());
        }
        result
    }

    /// At TCP FIN: `Ok(())` if no partial FPDU is buffered, else [`MpaError::TrailingBytes`]
    /// (which is then final). Call [`decode`](Self::decode) until it returns `Ok(None)`
    /// first: any octet left in `src` counts as a partial FPDU.
    pub fn decode_eof(&mut self, src: &mut BytesMut) -> Result<(), MpaError> {
        if let Some(e) = &self.error {
            return Err(e.clone());
        }
        if src.is_empty() {
            Ok(())
        } else {
            self.error = Some(MpaError::TrailingBytes);
            Err(MpaError::TrailingBytes)
        }
    }

    /// For a receiver that reads payloads straight into memory: the ULPDU_Length of the
    /// FPDU that starts `src`, if [`decode`](Self::decode) would accept its length and it
    /// is not all in `src` yet. Only with markers and CRC off (a payload read elsewhere
    /// cannot be checked) and no error so far; otherwise `None`.
    pub fn partial_len(&self, src: &[u8]) -> Option<usize> {
        if self.markers || self.crc || self.error.is_some() {
            return None;
        }
        let &[hi, lo] = src.get(..LENGTH_LEN)? else {
            return None;
        };
        let len = u16::from_be_bytes([hi, lo]);
        let ulen = usize::from(len);
        (len <= self.max_ulpdu && src.len() < LENGTH_LEN + ulen).then_some(ulen)
    }

    /// Accounts for an FPDU with a ULPDU of `ulpdu_len` octets that the caller consumed
    /// itself (after [`partial_len`](Self::partial_len)).
    pub fn skip(&mut self, ulpdu_len: usize) {
        self.pos += fpdu::wire_len(self.pos, ulpdu_len, self.markers) as u64;
    }

    /// Octets consumed since SeqStart (markers included).
    pub fn position(&self) -> u64 {
        self.pos
    }

    fn decode_one(&mut self, src: &mut BytesMut) -> Result<Option<Bytes>, MpaError> {
        let lead = if self.markers && self.pos.is_multiple_of(MARKER_PERIOD) {
            MARKER_LEN
        } else {
            0
        };
        let Some(&[hi, lo]) = src.get(lead..lead + LENGTH_LEN) else {
            return Ok(None);
        };
        let len = u16::from_be_bytes([hi, lo]);
        if len > self.max_ulpdu {
            return Err(MpaError::UlpduTooLong {
                len,
                max: self.max_ulpdu,
            });
        }
        let ulen = usize::from(len);
        let total = fpdu::wire_len(self.pos, ulen, self.markers);
        if src.len() < total {
            // Reserve the rest of this FPDU once (tokio-util "buffer management").
            src.reserve(total - src.len());
            return Ok(None);
        }
        let covered = total - CRC_LEN;
        if self.crc {
            let Some(&[a, b, c, d]) = src.get(covered..total) else {
                return Err(MpaError::LocalCatastrophic);
            };
            let received = u32::from_le_bytes([a, b, c, d]);
            let expected = crate::crc32c(&src[..covered]);
            if expected != received {
                return Err(MpaError::Crc { expected, received });
            }
        }
        let start = lead + LENGTH_LEN;
        if self.markers {
            self.check_markers(&src[..total], lead)?;
            compact(src, self.pos, lead, start, ulen, total);
        }
        src.advance(start);
        let ulpdu = src.split_to(ulen).freeze();
        src.advance(total - start - ulen);
        self.pos += total as u64;
        debug_assert!(self.markers || total == LENGTH_LEN + ulen + pad_len(ulen) + CRC_LEN);
        Ok(Some(ulpdu))
    }

    /// Checks FPDUPTR of every marker in `frame` (one whole FPDU starting at `self.pos`).
    fn check_markers(&self, frame: &[u8], lead: usize) -> Result<(), MpaError> {
        let hdr = lead;
        for at in marker_offsets(self.pos, frame.len()) {
            let Some(&[hi, lo]) = frame.get(at + 2..at + MARKER_LEN) else {
                return Err(MpaError::LocalCatastrophic);
            };
            let received = u16::from_be_bytes([hi, lo]);
            // A leading marker (between FPDUs) points nowhere: FPDUPTR 0.
            let expected = if at < hdr { 0 } else { (at - hdr) as u16 };
            if received & FPDUPTR_MASK != expected {
                return Err(MpaError::Marker { expected, received });
            }
        }
        Ok(())
    }
}

/// Offsets (relative to `pos`) of the markers inside the `total` octets starting at `pos`.
fn marker_offsets(pos: u64, total: usize) -> impl Iterator<Item = usize> {
    let first = pos.div_ceil(MARKER_PERIOD) * MARKER_PERIOD - pos;
    (first..total as u64)
        .step_by(MARKER_PERIOD as usize)
        .map(|o| o as usize)
}

/// Moves the ULPDU octets of the FPDU at the front of `src` together, in place, so that
/// they occupy `start..start + ulen` (removing the markers inside the ULPDU).
fn compact(src: &mut [u8], pos: u64, lead: usize, start: usize, ulen: usize, total: usize) {
    let (mut w, mut r, mut remaining) = (start, start, ulen);
    for m in marker_offsets(pos, total).filter(|&m| m > lead) {
        if remaining == 0 {
            break;
        }
        let n = (m - r).min(remaining);
        if w != r {
            src.copy_within(r..r + n, w);
        }
        w += n;
        remaining -= n;
        r = m + MARKER_LEN;
    }
    if remaining > 0 && w != r {
        src.copy_within(r..r + remaining, w);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Framer;

    #[test]
    fn need_more_consumes_nothing() {
        let mut f = Framer::new(false, true);
        let mut wire = BytesMut::new();
        f.encode(b"hdr", b"payload", &mut wire);
        let full = wire.clone();
        let mut d = Deframer::new(false, true);
        for cut in 0..full.len() {
            let mut part = BytesMut::from(&full[..cut]);
            assert_eq!(d.decode(&mut part), Ok(None));
            assert_eq!(&part[..], &full[..cut]);
        }
        assert_eq!(d.decode(&mut wire).unwrap().unwrap(), &b"hdrpayload"[..]);
        assert!(wire.is_empty());
        assert_eq!(d.position(), full.len() as u64);
    }

    #[test]
    fn too_long_is_final() {
        let mut f = Framer::new(false, true);
        let mut wire = BytesMut::new();
        f.encode(&[0; 200], b"", &mut wire);
        let mut d = Deframer::new(false, true);
        d.set_max_ulpdu(128);
        let err = MpaError::UlpduTooLong { len: 200, max: 128 };
        assert_eq!(d.decode(&mut wire), Err(err.clone()));
        assert_eq!(d.decode(&mut BytesMut::new()), Err(err.clone()));
        assert_eq!(d.decode_eof(&mut BytesMut::new()), Err(err));
    }

    #[test]
    fn the_longest_ulpdu_the_field_can_carry_is_accepted_by_default() {
        let ulpdu = vec![7u8; usize::from(u16::MAX)];
        let mut f = Framer::new(false, true);
        let mut wire = BytesMut::new();
        f.encode(&ulpdu, b"", &mut wire);
        let mut d = Deframer::new(false, true);
        let mut head = wire.split_to(1000);
        assert_eq!(d.decode(&mut head), Ok(None));
        head.unsplit(wire);
        assert_eq!(d.decode(&mut head).unwrap().unwrap(), &ulpdu[..]);
    }

    #[test]
    fn eof() {
        let mut d = Deframer::new(false, false);
        assert_eq!(d.decode_eof(&mut BytesMut::new()), Ok(()));
        let mut partial = BytesMut::from(&[0u8, 4, 1][..]);
        assert_eq!(d.decode(&mut partial), Ok(None));
        assert_eq!(d.decode_eof(&mut partial), Err(MpaError::TrailingBytes));
        assert_eq!(d.decode(&mut BytesMut::new()), Err(MpaError::TrailingBytes));
    }

    #[test]
    fn marker_offsets_cover_the_grid() {
        assert_eq!(marker_offsets(0, 52).collect::<Vec<_>>(), vec![0]);
        assert_eq!(marker_offsets(52, 504).collect::<Vec<_>>(), vec![460]);
        assert_eq!(marker_offsets(556, 468).count(), 0);
        assert_eq!(marker_offsets(1024, 520).collect::<Vec<_>>(), vec![0, 512]);
        assert_eq!(
            marker_offsets(1544, 1456).collect::<Vec<_>>(),
            vec![504, 1016]
        );
    }
}
