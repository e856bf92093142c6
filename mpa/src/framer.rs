//! Transmit side of FPDU mode: ULPDU -> FPDU (length, markers, PAD, CRC).

use bytes::{BufMut, BytesMut};

use crate::wire::fpdu::{self, CRC_LEN, MARKER_LEN, MARKER_PERIOD};
use crate::wire::marker::MarkerRepr;
use crate::{Negotiated, crc32c_append, pad_len};

/// Zeros for the PAD (at most 3 octets).
const ZEROS: [u8; 3] = [0; 3];

/// Transmit side of FPDU mode for one direction.
///
/// Keeps the stream position (octets sent since SeqStart, the first octet after our own MPA
/// frame) so that markers land every 512 octets. Implements the sender algorithm of
/// RFC 5044 §4.3/§4.4 exactly: a marker that falls between two FPDUs has FPDUPTR 0 and
/// belongs to (and is covered by the CRC of) the next FPDU; a marker may sit between PAD
/// and CRC; all markers are covered by the CRC.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub struct Framer {
    markers: bool,
    crc: bool,
    pos: u64,
}

impl Framer {
    /// A framer at SeqStart. With `crc = false` the CRC field is written as 0.
    pub fn new(markers: bool, crc: bool) -> Self {
        Self {
            markers,
            crc,
            pos: 0,
        }
    }

    /// A framer at stream position `pos` (octets since SeqStart): another writer of the
    /// same stream (the push path's library) continues where it stands.
    pub fn at(markers: bool, crc: bool, pos: u64) -> Self {
        Self { markers, crc, pos }
    }

    /// Moves the position to `pos`: another writer put FPDUs on the stream meanwhile.
    pub fn set_position(&mut self, pos: u64) {
        self.pos = pos;
    }

    /// A framer for our direction of a negotiated connection (`markers_tx`, `crc`).
    pub fn from_negotiated(n: &Negotiated) -> Self {
        Self::new(n.markers_tx, n.crc)
    }

    /// Appends one FPDU whose ULPDU is `header ++ payload` to `dst`.
    ///
    /// `dst` is grown once (by [`wire_len`](Self::wire_len)); nothing else is allocated.
    /// The CRC is computed incrementally over the pieces as they are written. The caller
    /// guarantees `header.len() + payload.len() <= u16::MAX` (and at most
    /// [`MAX_ULPDU`](crate::MAX_ULPDU) with markers, so that FPDUPTR fits 16 bits).
    pub fn encode(&mut self, header: &[u8], payload: &[u8], dst: &mut BytesMut) {
        let len = header.len() + payload.len();
        debug_assert!(len <= usize::from(u16::MAX), "ULPDU of {len} octets");
        let pad = &ZEROS[..pad_len(len)];
        let wire = self.wire_len(len);
        dst.reserve(wire);
        let before = dst.len();
        let length = (len as u16).to_be_bytes();
        if self.markers {
            self.encode_with_markers(&[&length, header, payload, pad], dst);
        } else {
            dst.extend_from_slice(&length);
            dst.extend_from_slice(header);
            dst.extend_from_slice(payload);
            dst.extend_from_slice(pad);
            dst.put_u32_le(self.crc_of(&length, header, payload, pad));
            self.pos += wire as u64;
        }
        debug_assert_eq!(dst.len() - before, wire);
    }

    /// Like [`encode`](Self::encode), but `fill` appends the `payload_len` payload octets
    /// to `dst` itself, in place after the header: a payload read out of registered memory
    /// is copied once, straight into the FPDU. If `fill` fails, `dst` and the stream
    /// position are left as they were and its error is returned.
    ///
    /// `fill` must append exactly `payload_len` octets; should it append another count, the
    /// payload is cut or zero-extended to `payload_len` so the FPDU stays well-formed.
    pub fn encode_with<E>(
        &mut self,
        header: &[u8],
        payload_len: usize,
        dst: &mut BytesMut,
        fill: impl FnOnce(&mut BytesMut) -> Result<(), E>,
    ) -> Result<(), E> {
        if self.markers {
            // Markers go inside the payload: assemble it first, then frame it.
            let mut payload = BytesMut::with_capacity(payload_len);
            fill(&mut payload)?;
            payload.resize(payload_len, 0);
            self.encode(header, &payload, dst);
            return Ok(());
        }
        let len = header.len() + payload_len;
        debug_assert!(len <= usize::from(u16::MAX), "ULPDU of {len} octets");
        let wire = self.wire_len(len);
        dst.reserve(wire);
        let before = dst.len();
        dst.extend_from_slice(&(len as u16).to_be_bytes());
        dst.extend_from_slice(header);
        let start = dst.len();
        if let Err(e) = fill(dst) {
            dst.truncate(before);
            return Err(e);
        }
        debug_assert_eq!(
            dst.len() - start,
            payload_len,
            "fill appended a wrong count"
        );
        dst.resize(start + payload_len, 0);
        dst.extend_from_slice(&ZEROS[..pad_len(len)]);
        let crc = if self.crc {
            crate::crc32c(&dst[before..])
        } else {
            0
        };
        dst.put_u32_le(crc);
        self.pos += wire as u64;
        Ok(())
    }

    /// Zero-copy variant of [`encode`](Self::encode) for large payloads (the h2 "chained
    /// data" idea): appends `ULPDU_Length ++ header` to `head`, leaves the payload where it
    /// is and returns the [`Trailer`] that makes `PAD ++ CRC` from the payload octets. The
    /// payload may be read only when the FPDU is written (in place, from memory that may
    /// change until then): the trailer is made from the octets actually sent. Sending
    /// `head`, payload and trailer back to back (a vectored write) puts exactly the octets
    /// of [`encode`](Self::encode) on the wire. The stream position advances by the whole
    /// FPDU now.
    ///
    /// Only without markers (they would have to be inserted into the payload): with
    /// markers it writes nothing and returns `None`; use [`encode`](Self::encode) then.
    pub fn encode_deferred(
        &mut self,
        header: &[u8],
        payload_len: usize,
        head: &mut BytesMut,
    ) -> Option<Trailer> {
        if self.markers {
            return None;
        }
        let len = header.len() + payload_len;
        debug_assert!(len <= usize::from(u16::MAX), "ULPDU of {len} octets");
        let length = (len as u16).to_be_bytes();
        head.reserve(length.len() + header.len());
        head.extend_from_slice(&length);
        head.extend_from_slice(header);
        self.pos += self.wire_len(len) as u64;
        Some(Trailer {
            crc: self
                .crc
                .then(|| crc32c_append(crate::crc32c(&length), header)),
            pad: pad_len(len) as u8,
        })
    }

    /// Octets an FPDU with a ULPDU of `ulpdu_len` octets would take on the wire at the
    /// current position, markers included.
    pub fn wire_len(&self, ulpdu_len: usize) -> usize {
        fpdu::wire_len(self.pos, ulpdu_len, self.markers)
    }

    /// Octets emitted since SeqStart.
    pub fn position(&self) -> u64 {
        self.pos
    }

    /// True when markers are inserted.
    pub fn markers(&self) -> bool {
        self.markers
    }

    /// True when a real CRC is written.
    pub fn crc(&self) -> bool {
        self.crc
    }

    /// CRC of a marker-less FPDU (0 when CRCs are off), computed piece by piece.
    fn crc_of(&self, length: &[u8], header: &[u8], payload: &[u8], pad: &[u8]) -> u32 {
        if !self.crc {
            return 0;
        }
        [header, payload, pad]
            .iter()
            .fold(crate::crc32c(length), |c, piece| crc32c_append(c, piece))
    }

    fn encode_with_markers(&mut self, body: &[&[u8]], dst: &mut BytesMut) {
        let mut crc = 0u32;
        if self.pos.is_multiple_of(MARKER_PERIOD) {
            // Between FPDUs (or at SeqStart): FPDUPTR 0, covered by this FPDU's CRC.
            self.put_marker(0, dst, &mut crc);
        }
        let hdr = self.pos;
        for piece in body {
            let mut data = *piece;
            while !data.is_empty() {
                if self.pos.is_multiple_of(MARKER_PERIOD) {
                    self.put_marker(self.pos - hdr, dst, &mut crc);
                }
                let room = (MARKER_PERIOD - self.pos % MARKER_PERIOD) as usize;
                let (now, rest) = data.split_at(room.min(data.len()));
                self.put(now, dst, &mut crc);
                data = rest;
            }
        }
        if self.pos.is_multiple_of(MARKER_PERIOD) {
            // Between PAD and CRC.
            self.put_marker(self.pos - hdr, dst, &mut crc);
        }
        dst.put_u32_le(if self.crc { crc } else { 0 });
        self.pos += CRC_LEN as u64;
    }

    fn put_marker(&mut self, fpduptr: u64, dst: &mut BytesMut, crc: &mut u32) {
        // FPDUPTR is 16 bits; it cannot overflow for ULPDUs up to MAX_ULPDU.
        let marker = MarkerRepr {
            fpduptr: fpduptr as u16,
        }
        .to_bytes();
        self.put(&marker[..MARKER_LEN], dst, crc);
    }

    fn put(&mut self, data: &[u8], dst: &mut BytesMut, crc: &mut u32) {
        dst.extend_from_slice(data);
        if self.crc {
            *crc = crc32c_append(*crc, data);
        }
        self.pos += data.len() as u64;
    }
}

/// The `PAD ++ CRC` of an FPDU whose payload is read when it is written
/// ([`Framer::encode_deferred`]): it holds the CRC of the octets before the payload.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Trailer {
    /// The CRC so far (length and header), or `None` when CRCs are off.
    crc: Option<u32>,
    pad: u8,
}

impl Trailer {
    /// The most octets a trailer takes: 3 of PAD and the CRC.
    pub const MAX_LEN: usize = 3 + CRC_LEN;

    /// Octets of `PAD ++ CRC`.
    pub fn len(&self) -> usize {
        usize::from(self.pad) + CRC_LEN
    }

    /// Never empty (the CRC field is always there); for clippy's `len` rule.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// Writes `PAD ++ CRC` for `payload` (the octets sent) to the front of `dst` and returns
    /// how many it wrote ([`len`](Self::len)).
    pub fn finish(&self, payload: &[u8], dst: &mut [u8; Self::MAX_LEN]) -> usize {
        let pad = &ZEROS[..usize::from(self.pad)];
        let crc = self
            .crc
            .map_or(0, |c| crc32c_append(crc32c_append(c, payload), pad));
        let (p, rest) = dst.split_at_mut(pad.len());
        p.copy_from_slice(pad);
        rest[..CRC_LEN].copy_from_slice(&crc.to_le_bytes());
        self.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn position_and_wire_len() {
        let mut f = Framer::new(false, true);
        let mut dst = BytesMut::new();
        assert_eq!(f.wire_len(19), 28);
        f.encode(&[1, 2, 3], &[4; 16], &mut dst);
        assert_eq!((dst.len(), f.position()), (28, 28));
        // Length field, pad zeros, CRC over everything before it.
        assert_eq!(&dst[..2], &[0, 19]);
        assert_eq!(&dst[21..24], &[0, 0, 0]);
        assert_eq!(
            u32::from_le_bytes([dst[24], dst[25], dst[26], dst[27]]),
            crate::crc32c(&dst[..24])
        );
    }

    #[test]
    fn encode_with_equals_encode() {
        for (markers, crc) in [(false, true), (false, false), (true, true)] {
            for len in [0usize, 1, 2, 3, 14, 1000] {
                let payload: Vec<u8> = (0..len).map(|i| i as u8).collect();
                let (mut a, mut b) = (Framer::new(markers, crc), Framer::new(markers, crc));
                let (mut da, mut db) = (BytesMut::new(), BytesMut::new());
                a.encode(&[9, 8, 7], &payload, &mut da);
                b.encode_with(&[9, 8, 7], len, &mut db, |d| {
                    d.extend_from_slice(&payload);
                    Ok::<_, ()>(())
                })
                .unwrap();
                assert_eq!(da, db, "markers {markers} crc {crc} len {len}");
                assert_eq!(a.position(), b.position());
            }
        }
    }

    #[test]
    fn encode_with_failure_leaves_nothing() {
        let mut f = Framer::new(false, true);
        let mut dst = BytesMut::from(&b"keep"[..]);
        let r = f.encode_with(&[1, 2], 10, &mut dst, |d| {
            d.extend_from_slice(b"par");
            Err("no")
        });
        assert_eq!(r, Err("no"));
        assert_eq!((&dst[..], f.position()), (&b"keep"[..], 0));
    }

    #[test]
    fn deferred_equals_encode() {
        for crc in [false, true] {
            for len in [0usize, 1, 2, 3, 4, 14, 513, 1000, 4096] {
                let payload: Vec<u8> = (0..len).map(|i| (i * 7) as u8).collect();
                let (mut a, mut b) = (Framer::new(false, crc), Framer::new(false, crc));
                let mut whole = BytesMut::new();
                a.encode(b"hdr", &payload, &mut whole);
                let mut head = BytesMut::new();
                let trailer = b.encode_deferred(b"hdr", len, &mut head).unwrap();
                let mut tail = [0u8; Trailer::MAX_LEN];
                let n = trailer.finish(&payload, &mut tail);
                assert_eq!(n, trailer.len());
                let mut joined = head.to_vec();
                joined.extend_from_slice(&payload);
                joined.extend_from_slice(&tail[..n]);
                assert_eq!(&whole[..], &joined[..], "crc {crc} len {len}");
                assert_eq!(a.position(), b.position());
            }
        }
        let mut m = Framer::new(true, true);
        let mut head = BytesMut::new();
        assert!(m.encode_deferred(b"", 1, &mut head).is_none());
        assert!(head.is_empty() && m.position() == 0);
    }

    #[test]
    fn crc_off_writes_zero() {
        for markers in [false, true] {
            let mut f = Framer::new(markers, false);
            let mut dst = BytesMut::new();
            f.encode(b"abc", b"", &mut dst);
            assert_eq!(&dst[dst.len() - 4..], &[0, 0, 0, 0]);
        }
    }

    #[test]
    fn first_fpdu_with_markers_starts_with_zero_marker() {
        let mut f = Framer::new(true, true);
        let mut dst = BytesMut::new();
        f.encode(b"", b"xy", &mut dst);
        assert_eq!(&dst[..6], &[0, 0, 0, 0, 0, 2]);
        assert_eq!(dst.len(), 12);
        let crc = crate::crc32c(&dst[..8]);
        assert_eq!(&dst[8..], &crc.to_le_bytes());
        assert_eq!(f.position(), 12);
    }
}
