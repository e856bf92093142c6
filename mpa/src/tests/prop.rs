//! Property: any ULPDU sequence, framed by the Framer and deframed by the Deframer under
//! any chunking, round-trips exactly, with CRC and markers on or off.

use bytes::BytesMut;
use proptest::prelude::*;

use super::util::deframe_cuts;
use crate::{Deframer, Framer, crc32c};

fn ulpdus() -> impl Strategy<Value = Vec<(Vec<u8>, usize)>> {
    // Each ULPDU with a header/payload split point.
    prop::collection::vec(
        (prop::collection::vec(any::<u8>(), 0..2000), any::<usize>()),
        0..12,
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn frame_deframe_round_trip(
        msgs in ulpdus(),
        crc in any::<bool>(),
        markers in any::<bool>(),
        cut_seeds in prop::collection::vec(any::<usize>(), 0..40),
    ) {
        let mut f = Framer::new(markers, crc);
        let mut wire = BytesMut::new();
        for (u, split) in &msgs {
            let before = wire.len();
            let expect = f.wire_len(u.len());
            let at = split % (u.len() + 1);
            f.encode(&u[..at], &u[at..], &mut wire);
            prop_assert_eq!(wire.len() - before, expect);
            prop_assert_eq!((wire.len() - before) % 4, 0);
        }
        prop_assert_eq!(f.position(), wire.len() as u64);
        let mut cuts: Vec<usize> = cut_seeds.iter().map(|c| c % (wire.len() + 1)).collect();
        cuts.sort_unstable();
        let mut d = Deframer::new(markers, crc);
        let got = deframe_cuts(&mut d, &wire, &cuts);
        prop_assert!(got.is_ok(), "{:?}", got);
        let got = got.unwrap_or_default();
        prop_assert_eq!(got.len(), msgs.len());
        for (g, (u, _)) in got.iter().zip(&msgs) {
            prop_assert_eq!(&g[..], &u[..]);
        }
        prop_assert_eq!(d.position(), wire.len() as u64);
    }

    #[test]
    fn any_flip_is_caught_with_crc(msg in prop::collection::vec(any::<u8>(), 1..1500), markers in any::<bool>(), at in any::<usize>(), bit in 0u8..8) {
        let mut f = Framer::new(markers, true);
        let mut wire = BytesMut::new();
        f.encode(&msg, b"", &mut wire);
        let mut bad = wire.to_vec();
        // Flip anything but the length field (which changes the framing instead).
        let lead = if markers { 4 } else { 0 };
        let candidates: Vec<usize> = (0..bad.len()).filter(|&i| i != lead && i != lead + 1).collect();
        let i = candidates[at % candidates.len()];
        bad[i] ^= 1 << bit;
        let got = deframe_cuts(&mut Deframer::new(markers, true), &bad, &[]);
        prop_assert!(got.is_err(), "flip at {} not detected", i);
        // CRC-32C detects every single-bit error.
        prop_assert_ne!(crc32c(&bad[..bad.len() - 4]).to_le_bytes(), <[u8; 4]>::try_from(&bad[bad.len() - 4..]).unwrap_or_default());
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    /// Peer input never panics: arbitrary bytes into the Deframer.
    #[test]
    fn deframer_never_panics(bytes in prop::collection::vec(any::<u8>(), 0..3000), markers in any::<bool>(), crc in any::<bool>(), max in any::<u16>()) {
        let mut d = Deframer::new(markers, crc);
        d.set_max_ulpdu(max);
        let mut buf = BytesMut::from(&bytes[..]);
        while let Ok(Some(_)) = d.decode(&mut buf) {}
        let _ = d.decode_eof(&mut buf);
    }

    /// Peer input never panics: arbitrary bytes (often starting with a valid key) into
    /// both handshake roles; nothing past the frame is consumed.
    #[test]
    fn handshake_never_panics(tail in prop::collection::vec(any::<u8>(), 0..600), key in 0u8..3, chunk in 1usize..64) {
        use std::time::Instant;
        use crate::wire::frame::{KEY_REPLY, KEY_REQUEST};
        use crate::{Handshake, MpaConfig};
        let mut bytes = match key {
            0 => KEY_REQUEST.to_vec(),
            1 => KEY_REPLY.to_vec(),
            _ => Vec::new(),
        };
        bytes.extend_from_slice(&tail);
        let now = Instant::now();
        let mut hs = [
            Handshake::responder(MpaConfig::default(), now),
            Handshake::initiator(MpaConfig { p2p: true, ..MpaConfig::default() }, b"", now).map_err(|e| TestCaseError::fail(e.to_string()))?,
        ];
        for h in &mut hs {
            let mut buf = BytesMut::new();
            let mut fed = 0;
            for piece in bytes.chunks(chunk) {
                buf.extend_from_slice(piece);
                fed += piece.len();
                h.handle_input(&mut buf, now);
                let consumed = fed - buf.len();
                prop_assert!(consumed == 0 || consumed >= 20);
                prop_assert_eq!(&buf[..], &bytes[consumed..fed]);
            }
            while h.poll_event().is_some() {}
            let _ = h.accept(b"");
            let _ = h.poll_transmit(&mut BytesMut::new());
        }
    }
}
