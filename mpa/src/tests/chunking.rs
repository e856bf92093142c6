//! The Deframer under every chunking, and the §5.7 negatives of FPDU mode.

use bytes::Bytes;

use super::util::{Rng, deframe_cuts, random_cuts};
use super::vectors::{fpdu_vectors, marker_stream, marker_stream_ulpdus, ulpdu_of};
use crate::{Deframer, MpaError, crc32c};

/// (name, stream, markers, expected ULPDUs)
type Stream = (&'static str, Vec<u8>, bool, Vec<Vec<u8>>);

fn streams() -> Vec<Stream> {
    let plain: Vec<u8> = fpdu_vectors().concat();
    let plain_ulpdus = fpdu_vectors()
        .iter()
        .map(|v| ulpdu_of(v).to_vec())
        .collect();
    vec![
        ("§5.4+§5.5 no markers", plain, false, plain_ulpdus),
        (
            "§5.6 markers",
            marker_stream(),
            true,
            marker_stream_ulpdus(),
        ),
    ]
}

fn check(got: Result<Vec<Bytes>, MpaError>, want: &[Vec<u8>], what: &str) {
    let got = got.unwrap_or_else(|e| panic!("{what}: {e}"));
    assert_eq!(got.len(), want.len(), "{what}");
    for (g, w) in got.iter().zip(want) {
        assert_eq!(&g[..], &w[..], "{what}");
    }
}

#[test]
fn every_single_cut_point() {
    for (name, stream, markers, want) in streams() {
        for cut in 0..=stream.len() {
            let mut d = Deframer::new(markers, true);
            check(
                deframe_cuts(&mut d, &stream, &[cut]),
                &want,
                &format!("{name}, cut {cut}"),
            );
            assert_eq!(d.position(), stream.len() as u64);
        }
    }
}

#[test]
fn one_byte_at_a_time() {
    for (name, stream, markers, want) in streams() {
        let cuts: Vec<usize> = (1..stream.len()).collect();
        let mut d = Deframer::new(markers, true);
        check(deframe_cuts(&mut d, &stream, &cuts), &want, name);
    }
}

#[test]
fn random_chunkings() {
    let mut rng = Rng::new(5044);
    for (name, stream, markers, want) in streams() {
        for _ in 0..200 {
            let cuts = random_cuts(&mut rng, stream.len(), 64);
            let mut d = Deframer::new(markers, rng.next().is_multiple_of(2));
            check(deframe_cuts(&mut d, &stream, &cuts), &want, name);
        }
    }
}

#[test]
fn truncated_stream_is_trailing_bytes() {
    for (_, stream, markers, _) in streams() {
        for cut in [1, 3, stream.len() - 1] {
            let mut d = Deframer::new(markers, true);
            assert_eq!(
                deframe_cuts(&mut d, &stream[..cut], &[]),
                Err(MpaError::TrailingBytes)
            );
        }
    }
}

/// Offsets of ULPDU octets (not length, marker, PAD or CRC) of the §5.6 stream.
fn marker_stream_payload_offsets() -> Vec<usize> {
    // From the §5.6 table: ULPDU octets start 2 after each header, markers excluded.
    let headers = [4usize, 52, 556, 1028, 1544, 3000];
    let lens = [42usize, 494, 462, 506, 1442, 22];
    let markers = [0usize, 512, 1024, 1536, 2048, 2560];
    let mut out = Vec::new();
    for (h, l) in headers.iter().zip(lens) {
        let mut at = h + 2;
        let mut left = l;
        while left > 0 {
            if markers.contains(&at) {
                at += 4;
                continue;
            }
            out.push(at);
            at += 1;
            left -= 1;
        }
    }
    out
}

#[test]
fn flipped_byte() {
    // No markers: flip every ULPDU octet of the first vector.
    let v = &fpdu_vectors()[0];
    for at in 2..2 + ulpdu_of(v).len() {
        let mut bad = v.clone();
        bad[at] ^= 0x40;
        let err = deframe_cuts(&mut Deframer::new(false, true), &bad, &[]).unwrap_err();
        assert!(
            matches!(
                err,
                MpaError::Crc {
                    received: 0xFB1A_E632,
                    ..
                }
            ),
            "{err:?}"
        );
        assert_eq!(err.code(), 2);
        // CRC off: no error at the MPA layer, the corrupted ULPDU is delivered.
        let got = deframe_cuts(&mut Deframer::new(false, false), &bad, &[]).unwrap();
        assert_eq!(&got[0][..], &bad[2..2 + got[0].len()]);
    }
    // Flipped CRC octet.
    let mut bad = v.clone();
    *bad.last_mut().unwrap() ^= 1;
    assert!(matches!(
        deframe_cuts(&mut Deframer::new(false, true), &bad, &[]),
        Err(MpaError::Crc { .. })
    ));
    assert!(deframe_cuts(&mut Deframer::new(false, false), &bad, &[]).is_ok());
    // Markers: every 37th ULPDU octet of the §5.6 stream.
    let stream = marker_stream();
    for at in marker_stream_payload_offsets().into_iter().step_by(37) {
        let mut bad = stream.clone();
        bad[at] ^= 0x01;
        let err = deframe_cuts(&mut Deframer::new(true, true), &bad, &[at]).unwrap_err();
        assert!(matches!(err, MpaError::Crc { .. }), "flip at {at}: {err:?}");
        assert!(
            deframe_cuts(&mut Deframer::new(true, false), &bad, &[]).is_ok(),
            "flip at {at}"
        );
    }
}

#[test]
fn errors_are_final() {
    let mut bad = fpdu_vectors()[0].clone();
    bad[5] ^= 1;
    bad.extend_from_slice(&fpdu_vectors()[1]);
    let mut d = Deframer::new(false, true);
    let mut buf = bytes::BytesMut::from(&bad[..]);
    let err = d.decode(&mut buf).unwrap_err();
    // The next FPDU is intact, but nothing more is delivered.
    assert_eq!(d.decode(&mut buf), Err(err.clone()));
    assert_eq!(d.decode_eof(&mut buf), Err(err));
}

/// The §5.6 stream with the FPDUPTR of the marker at `at` changed, the CRC of the FPDU
/// spanning `crc_span` (covered octets) recomputed.
fn with_marker(ptr: [u8; 4], at: usize, crc_span: core::ops::Range<usize>) -> Vec<u8> {
    let mut s = marker_stream();
    s[at..at + 4].copy_from_slice(&ptr);
    let crc = crc32c(&s[crc_span.clone()]).to_le_bytes();
    s[crc_span.end..crc_span.end + 4].copy_from_slice(&crc);
    s
}

#[test]
fn marker_off_by_four() {
    // Marker at 512 inside FPDU 1 (covered 52..552): 0x01cc + 4.
    let bad = with_marker([0, 0, 0x01, 0xd0], 512, 52..552);
    let want = MpaError::Marker {
        expected: 0x01cc,
        received: 0x01d0,
    };
    for crc in [true, false] {
        assert_eq!(
            deframe_cuts(&mut Deframer::new(true, crc), &bad, &[]),
            Err(want.clone())
        );
    }
    assert_eq!(want.code(), 3);
    // Marker before the CRC of FPDU 3 (covered 1024..1540): 0x01fc - 4.
    let bad = with_marker([0, 0, 0x01, 0xf8], 1536, 1024..1540);
    let err = deframe_cuts(&mut Deframer::new(true, true), &bad, &[]).unwrap_err();
    assert_eq!(
        err,
        MpaError::Marker {
            expected: 0x01fc,
            received: 0x01f8
        }
    );
    // Leading marker between FPDUs 2 and 3 must be 0.
    let bad = with_marker([0, 0, 0, 4], 1024, 1024..1540);
    let err = deframe_cuts(&mut Deframer::new(true, true), &bad, &[]).unwrap_err();
    assert_eq!(
        err,
        MpaError::Marker {
            expected: 0,
            received: 4
        }
    );
    // The stale CRC catches the change first when CRC is on and not recomputed.
    let mut stale = marker_stream();
    stale[515] ^= 0x04;
    assert!(matches!(
        deframe_cuts(&mut Deframer::new(true, true), &stale, &[]),
        Err(MpaError::Crc { .. })
    ));
}

#[test]
fn marker_low_bits_and_reserved_ignored() {
    let want = marker_stream_ulpdus();
    for (ptr, at, span) in [
        ([0, 0, 0x01, 0xcf], 512, 52..552),
        ([0, 0, 0x00, 0x03], 1024, 1024..1540),
        ([0xbe, 0xef, 0x03, 0xf9], 2560, 1544..2996),
    ] {
        let s = with_marker(ptr, at, span);
        let cuts: Vec<usize> = (1..s.len()).step_by(7).collect();
        check(
            deframe_cuts(&mut Deframer::new(true, true), &s, &cuts),
            &want,
            "low bits",
        );
    }
}
