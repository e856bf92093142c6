//! Test helpers: hex dumps, a seeded RNG, chunked feeding.

use bytes::{Bytes, BytesMut};

use crate::{Deframer, MpaError};

/// Parses a hex dump as printed in wire-format.md: optional `offset:` prefixes, octets as
/// two hex digits, anything after the first non-octet token of a line is a comment.
pub(crate) fn hex(dump: &str) -> Vec<u8> {
    let mut out = Vec::new();
    for line in dump.lines() {
        let body = match line.split_once(':') {
            Some((offset, rest)) if offset.trim().chars().all(|c| c.is_ascii_hexdigit()) => rest,
            _ => line,
        };
        for tok in body.split_whitespace() {
            if tok.len() != 2 {
                break;
            }
            match u8::from_str_radix(tok, 16) {
                Ok(b) => out.push(b),
                Err(_) => break,
            }
        }
    }
    out
}

/// xorshift64*: deterministic, no dependency.
#[derive(Debug)]
pub(crate) struct Rng(u64);

impl Rng {
    pub(crate) fn new(seed: u64) -> Self {
        Self(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    pub(crate) fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in `lo..=hi`.
    pub(crate) fn range(&mut self, lo: usize, hi: usize) -> usize {
        lo + (self.next() % (hi - lo + 1) as u64) as usize
    }
}

/// Feeds `stream` to `d` in pieces whose boundaries are `cuts` (sorted offsets), decoding
/// after every piece, then checks EOF. Returns the ULPDUs or the first error.
pub(crate) fn deframe_cuts(
    d: &mut Deframer,
    stream: &[u8],
    cuts: &[usize],
) -> Result<Vec<Bytes>, MpaError> {
    let mut buf = BytesMut::new();
    let mut out = Vec::new();
    let mut prev = 0;
    for &cut in cuts.iter().chain(std::iter::once(&stream.len())) {
        buf.extend_from_slice(&stream[prev..cut]);
        prev = cut;
        while let Some(ulpdu) = d.decode(&mut buf)? {
            out.push(ulpdu);
        }
    }
    d.decode_eof(&mut buf)?;
    Ok(out)
}

/// Random cut points for `len` octets, pieces of 1..=max octets.
pub(crate) fn random_cuts(rng: &mut Rng, len: usize, max: usize) -> Vec<usize> {
    let mut cuts = Vec::new();
    let mut at = 0;
    loop {
        at += rng.range(1, max);
        if at >= len {
            return cuts;
        }
        cuts.push(at);
    }
}

#[test]
fn hex_parser() {
    let v = hex("0000: 00 16 41 43\n0004: 32 e6 1a fb                 CRC 0xFB1AE632\n");
    assert_eq!(v, [0x00, 0x16, 0x41, 0x43, 0x32, 0xe6, 0x1a, 0xfb]);
}
