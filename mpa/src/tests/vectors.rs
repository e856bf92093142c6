//! wire-format.md §5.1, §5.2, §5.4, §5.5 and §5.6 through the public API.

use bytes::BytesMut;

use super::util::hex;
use crate::wire::marker::MarkerRepr;
use crate::{Deframer, Framer, crc32c, pad_len};

// ---------------------------------------------------------------- §5.1 CRC32c

#[test]
fn crc_vectors() {
    let ascending: Vec<u8> = (0u8..32).collect();
    let descending: Vec<u8> = (0u8..32).rev().collect();
    let iscsi_read = hex("01 c0 00 00 00 00 00 00 00 00 00 00 00 00 00 00
         14 00 00 00 00 00 04 00 00 00 00 14 00 00 00 18
         28 00 00 00 00 00 00 00 02 00 00 00 00 00 00 00");
    assert_eq!(iscsi_read.len(), 48);
    let cases: [(&[u8], u32, [u8; 4]); 6] = [
        (&[0u8; 32], 0x8A91_36AA, [0xaa, 0x36, 0x91, 0x8a]),
        (&[0xffu8; 32], 0x62A8_AB43, [0x43, 0xab, 0xa8, 0x62]),
        (&ascending, 0x46DD_794E, [0x4e, 0x79, 0xdd, 0x46]),
        (&descending, 0x113F_DB5C, [0x5c, 0xdb, 0x3f, 0x11]),
        (&iscsi_read, 0xD996_3A56, [0x56, 0x3a, 0x96, 0xd9]),
        (b"123456789", 0xE306_9283, [0x83, 0x92, 0x06, 0xe3]),
    ];
    for (data, value, wire) in cases {
        assert_eq!(crc32c(data), value);
        assert_eq!(crc32c(data).to_le_bytes(), wire);
        // Residue: data followed by its own CRC in wire order.
        let mut with_crc = data.to_vec();
        with_crc.extend_from_slice(&wire);
        assert_eq!(crc32c(&with_crc), 0x4867_4BC7);
    }
}

// ---------------------------------------------------------------- §5.2 RFC 5044 Figs. 5, 6

/// Untagged Send header, L=1, QN 0, MO 0 (18 octets).
pub(crate) fn send_header(msn: u32) -> Vec<u8> {
    let mut h = vec![0x41, 0x43, 0, 0, 0, 0, 0, 0, 0, 0];
    h.extend_from_slice(&msn.to_be_bytes());
    h.extend_from_slice(&[0, 0, 0, 0]);
    h
}

/// Tagged RDMA Write header, L=1 (14 octets).
pub(crate) fn write_header(stag: u32, to: u64) -> Vec<u8> {
    let mut h = vec![0xc1, 0x40];
    h.extend_from_slice(&stag.to_be_bytes());
    h.extend_from_slice(&to.to_be_bytes());
    h
}

fn figure5() -> Vec<u8> {
    hex("0000: 00 00 00 00 00 2a 41 43 00 00 00 00 00 00 00 00
         0010: 00 00 00 01 00 00 00 00 00 00 00 00 00 00 00 00
         0020: 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00
         0030: 52 23 99 83")
}

fn figure6() -> Vec<u8> {
    hex("01ec: 00 2a 41 43 00 00 00 00 00 00 00 00 00 00 00 02
         01fc: 00 00 00 00 00 00 00 14 00 00 00 00 00 00 00 00
         020c: 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00
         021c: 84 92 58 98")
}

#[test]
fn rfc5044_figure5() {
    let mut f = Framer::new(true, true);
    let mut wire = BytesMut::new();
    f.encode(&send_header(1), &[0; 24], &mut wire);
    assert_eq!(&wire[..], &figure5()[..]);
    let mut d = Deframer::new(true, true);
    let ulpdu = d.decode(&mut wire).unwrap().unwrap();
    assert_eq!(&ulpdu[..18], &send_header(1)[..]);
    assert_eq!(ulpdu.len(), 42);
    assert!(wire.is_empty());
}

#[test]
fn rfc5044_figure6() {
    let mut f = Framer::new(true, true);
    let mut wire = BytesMut::new();
    // First FPDU: 492 octets including its leading marker (ULPDU_Length 482).
    let first: Vec<u8> = (0..482u32).map(|i| (i * 3) as u8).collect();
    f.encode(&first, &[], &mut wire);
    assert_eq!(wire.len(), 0x1ec);
    f.encode(&send_header(2), &[0; 24], &mut wire);
    assert_eq!(&wire[0x1ec..], &figure6()[..]);
    // The marker at 0x200 points back 0x14 octets to the header at 0x1ec.
    assert_eq!(
        &wire[0x200..0x204],
        &MarkerRepr { fpduptr: 0x14 }.to_bytes()
    );

    let mut d = Deframer::new(true, true);
    assert_eq!(d.decode(&mut wire).unwrap().unwrap(), &first[..]);
    let second = d.decode(&mut wire).unwrap().unwrap();
    let mut expected = send_header(2);
    expected.extend_from_slice(&[0; 24]);
    assert_eq!(&second[..], &expected[..]);
    assert_eq!(d.position(), 0x220);
}

// ---------------------------------------------------------------- §5.4 / §5.5 no markers

/// Every FPDU of wire-format.md §5.4 and §5.5 (markers off, CRC on).
pub(crate) fn fpdu_vectors() -> Vec<Vec<u8>> {
    [
        // Send "ABCD"
        "00 16 41 43 00 00 00 00 00 00 00 00 00 00 00 01 00 00 00 00 41 42 43 44 32 e6 1a fb",
        // Send MSN 2, 5a, PAD 3
        "00 13 41 43 00 00 00 00 00 00 00 00 00 00 00 02 00 00 00 00 5a 00 00 00 3a c1 dc fd",
        // Send with SE and Invalidate, PAD 2
        "00 14 41 46 00 00 12 34 00 00 00 00 00 00 00 03 00 00 00 00 be ef 00 00 25 30 51 6b",
        // RDMA Write 00..07
        "00 16 c1 40 12 34 56 78 00 00 00 00 00 00 10 00 00 01 02 03 04 05 06 07 ea ef b4 f7",
        // RDMA Write non-last "abc", PAD 1
        "00 11 81 40 12 34 56 78 00 00 00 00 00 00 10 00 61 62 63 00 64 0b f4 be",
        // RDMA Read Request
        "00 2e 41 41 00 00 00 00 00 00 00 01 00 00 00 01 00 00 00 00 11 22 33 44 00 00 00 00 00 00 20 00
         00 00 01 00 55 66 77 88 00 00 00 00 00 00 30 00 05 ca 54 df",
        // RDMA Read Response
        "00 12 c1 42 11 22 33 44 00 00 00 00 00 00 20 00 de ad be ef ba c4 08 15",
        // RTR: zero-length Write
        "00 0e c1 40 00 00 00 01 00 00 00 00 00 00 00 00 eb d3 4c 5f",
        // RTR: zero-length Read Request
        "00 2e 41 41 00 00 00 00 00 00 00 01 00 00 00 01 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00
         00 00 00 00 00 00 00 01 00 00 00 00 00 00 00 00 ba 10 e3 c9",
        // RTR: zero-length Send
        "00 12 41 43 00 00 00 00 00 00 00 00 00 00 00 01 00 00 00 00 58 7b e8 c4",
        // Immediate Data
        "00 1a 41 48 00 00 00 00 00 00 00 00 00 00 00 01 00 00 00 00 01 02 03 04 05 06 07 08 06 c2 28 05",
        // Atomic FetchAdd
        "00 46 41 4a 00 00 00 00 00 00 00 01 00 00 00 01 00 00 00 00 00 00 00 00 00 00 00 01 aa bb cc dd
         00 00 00 00 00 00 00 40 00 00 00 00 00 00 00 01 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00
         ff ff ff ff ff ff ff ff 07 89 aa 26",
        // Atomic CmpSwap
        "00 46 41 4a 00 00 00 00 00 00 00 01 00 00 00 02 00 00 00 00 00 00 00 02 00 00 00 02 aa bb cc dd
         00 00 00 00 00 00 00 48 11 11 11 11 11 11 11 11 ff ff ff ff ff ff ff ff 22 22 22 22 22 22 22 22
         ff ff ff ff ff ff ff ff fb ee b2 75",
        // Atomic Response
        "00 1e 41 4b 00 00 00 00 00 00 00 03 00 00 00 01 00 00 00 00 00 00 00 01 00 00 00 00 00 00 00 05
         e5 b2 0f b6",
        // §5.5 Terminate: MPA CRC error
        "00 16 41 47 00 00 00 00 00 00 00 02 00 00 00 01 00 00 00 00 20 02 00 00 7f e4 25 85",
        // §5.5 Terminate: insufficient IRD
        "00 16 41 47 00 00 00 00 00 00 00 02 00 00 00 01 00 00 00 00 20 06 00 00 65 40 fb 1b",
        // §5.5 Terminate: DDP invalid MSN
        "00 2a 41 47 00 00 00 00 00 00 00 02 00 00 00 01 00 00 00 00 12 02 c0 00 00 64 41 43 00 00 00 00
         00 00 00 00 00 00 00 05 00 00 00 00 71 0d 5e 50",
        // §5.5 Terminate: RDMAP invalid STag
        "00 46 41 47 00 00 00 00 00 00 00 02 00 00 00 01 00 00 00 00 01 00 e0 00 00 2e 41 41 00 00 00 00
         00 00 00 01 00 00 00 01 00 00 00 00 11 22 33 44 00 00 00 00 00 00 20 00 00 00 01 00 de ad be ef
         00 00 00 00 00 00 30 00 f0 a0 fd 60",
    ]
    .iter()
    .map(|s| hex(s))
    .collect()
}

/// The ULPDU inside a marker-less FPDU.
pub(crate) fn ulpdu_of(fpdu: &[u8]) -> &[u8] {
    let len = usize::from(u16::from_be_bytes([fpdu[0], fpdu[1]]));
    assert_eq!(fpdu.len(), 2 + len + pad_len(len) + 4, "vector length");
    &fpdu[2..2 + len]
}

#[test]
fn fpdus_without_markers_encode_and_decode() {
    let mut f = Framer::new(false, true);
    let mut d = Deframer::new(false, true);
    let mut stream = BytesMut::new();
    for (i, v) in fpdu_vectors().iter().enumerate() {
        let ulpdu = ulpdu_of(v);
        // Any split into header and payload gives the same FPDU.
        let split = (i * 5) % (ulpdu.len() + 1);
        let mut one = BytesMut::new();
        f.encode(&ulpdu[..split], &ulpdu[split..], &mut one);
        assert_eq!(&one[..], &v[..], "vector {i}");
        stream.extend_from_slice(&one);
    }
    for v in fpdu_vectors() {
        assert_eq!(d.decode(&mut stream).unwrap().unwrap(), ulpdu_of(&v));
    }
    assert!(stream.is_empty());
    assert_eq!(d.decode(&mut stream), Ok(None));
}

// ---------------------------------------------------------------- §5.6 marker stream

/// The six ULPDUs of §5.6.
pub(crate) fn marker_stream_ulpdus() -> Vec<Vec<u8>> {
    [42usize, 494, 462, 506, 1442, 22]
        .iter()
        .enumerate()
        .map(|(i, &len)| {
            let mut u = if i % 2 == 0 {
                send_header(i as u32 / 2 + 1)
            } else {
                write_header(0x1234_5678, 0x10000 + 0x1000 * i as u64)
            };
            let (mul, add) = if i % 2 == 0 { (7, i) } else { (13, i) };
            let payload_len = len - u.len();
            u.extend((0..payload_len).map(|j| ((mul * j + add) % 256) as u8));
            u
        })
        .collect()
}

/// The §5.6 stream as produced by our Framer (positions relative to SeqStart).
pub(crate) fn marker_stream() -> Vec<u8> {
    let mut f = Framer::new(true, true);
    let mut wire = BytesMut::new();
    for u in marker_stream_ulpdus() {
        f.encode(&u, &[], &mut wire);
    }
    wire.to_vec()
}

#[test]
fn marker_stream_table() {
    let ulpdus = marker_stream_ulpdus();
    let mut f = Framer::new(true, true);
    let mut wire = BytesMut::new();
    // (first octet, ULPDU_Length at, CRC at, ends at, CRC wire octets)
    let table: [(usize, usize, usize, usize, [u8; 4]); 6] = [
        (0, 4, 48, 52, [0x1d, 0x08, 0x1a, 0x86]),
        (52, 52, 552, 556, [0x16, 0xf9, 0x7e, 0x3f]),
        (556, 556, 1020, 1024, [0xc4, 0xe6, 0x16, 0xbd]),
        (1024, 1028, 1540, 1544, [0xc4, 0xcc, 0xe7, 0x19]),
        (1544, 1544, 2996, 3000, [0x1f, 0xe4, 0x91, 0x37]),
        (3000, 3000, 3024, 3028, [0xd6, 0x3d, 0x1c, 0xf1]),
    ];
    for (u, (first, len_at, crc_at, end, crc)) in ulpdus.iter().zip(table) {
        assert_eq!(f.position() as usize, first);
        assert_eq!(f.wire_len(u.len()), end - first);
        f.encode(u, &[], &mut wire);
        assert_eq!(wire.len(), end);
        assert_eq!(&wire[len_at..len_at + 2], &(u.len() as u16).to_be_bytes());
        assert_eq!(&wire[crc_at..end], &crc);
    }
    // (marker at, FPDUPTR)
    for (at, ptr) in [
        (0, 0),
        (512, 0x01cc),
        (1024, 0),
        (1536, 0x01fc),
        (2048, 0x01f8),
        (2560, 0x03f8),
    ] {
        assert_eq!(
            &wire[at..at + 4],
            &MarkerRepr { fpduptr: ptr }.to_bytes(),
            "marker at {at}"
        );
    }
    // Wire excerpts.
    let excerpts = [
        (
            0x1f0,
            "bd ca d7 e4 f1 fe 0b 18 25 32 3f 4c 59 66 73 80 00 00 01 cc 8d 9a a7 b4 c1 ce db e8 f5 02 0f 1c",
        ),
        (
            0x3f0,
            "d2 d9 e0 e7 ee f5 fc 03 0a 11 18 1f c4 e6 16 bd 00 00 00 00 01 fa c1 40 12 34 56 78 00 00 00 00",
        ),
        (
            0x5f0,
            "2f 3c 49 56 63 70 7d 8a 97 a4 b1 be cb d8 e5 f2 00 00 01 fc c4 cc e7 19 05 a2 41 43 00 00 00 00",
        ),
    ];
    for (at, dump) in excerpts {
        let bytes = hex(dump);
        assert_eq!(
            &wire[at..at + bytes.len()],
            &bytes[..],
            "excerpt at {at:#x}"
        );
    }
    // CRCs cover the markers: FPDU 3 from its leading marker at 1024 to the marker at 1536.
    assert_eq!(
        crc32c(&wire[1024..1540]).to_le_bytes(),
        [0xc4, 0xcc, 0xe7, 0x19]
    );

    let mut d = Deframer::new(true, true);
    let mut rx = BytesMut::from(&wire[..]);
    for u in &ulpdus {
        assert_eq!(&d.decode(&mut rx).unwrap().unwrap()[..], &u[..]);
    }
    assert!(rx.is_empty());
    assert_eq!(d.position(), 3028);
}

/// An independent encoder written straight from the RFC 5044 §4.3 sender algorithm, word by
/// word, with 32-bit TCP sequence numbers and wrapping arithmetic (markers where
/// `(seq - seq_start) mod 512 == 0`). Returns the bytes and the absolute sequence number
/// of every marker and every FPDU start.
fn reference_encode(seq_start: u32, ulpdus: &[Vec<u8>]) -> (Vec<u8>, Vec<u32>, Vec<u32>) {
    let mut out = Vec::new();
    let (mut markers, mut starts) = (Vec::new(), Vec::new());
    let mut seq = seq_start;
    let at_marker = |s: u32| s.wrapping_sub(seq_start).is_multiple_of(512);
    for u in ulpdus {
        starts.push(seq);
        let mut covered = Vec::new();
        let emit = |bytes: &[u8], seq: &mut u32, out: &mut Vec<u8>, covered: &mut Vec<u8>| {
            out.extend_from_slice(bytes);
            covered.extend_from_slice(bytes);
            *seq = seq.wrapping_add(bytes.len() as u32);
        };
        if at_marker(seq) {
            markers.push(seq);
            emit(&[0, 0, 0, 0], &mut seq, &mut out, &mut covered);
        }
        let hdr = seq;
        let mut body = (u.len() as u16).to_be_bytes().to_vec();
        body.extend_from_slice(u);
        body.resize(body.len() + pad_len(u.len()), 0);
        for word in body.chunks(4) {
            if at_marker(seq) && seq != hdr {
                markers.push(seq);
                let ptr = seq.wrapping_sub(hdr) as u16;
                emit(
                    &[0, 0, (ptr >> 8) as u8, ptr as u8],
                    &mut seq,
                    &mut out,
                    &mut covered,
                );
            }
            emit(word, &mut seq, &mut out, &mut covered);
        }
        if at_marker(seq) {
            markers.push(seq);
            let ptr = seq.wrapping_sub(hdr) as u16;
            emit(
                &[0, 0, (ptr >> 8) as u8, ptr as u8],
                &mut seq,
                &mut out,
                &mut covered,
            );
        }
        out.extend_from_slice(&crc32c(&covered).to_le_bytes());
        seq = seq.wrapping_add(4);
    }
    (out, markers, starts)
}

#[test]
fn marker_stream_matches_reference_at_seqstart_11() {
    let (reference, markers, starts) = reference_encode(11, &marker_stream_ulpdus());
    assert_eq!(reference, marker_stream());
    assert_eq!(markers, [0x0b, 0x20b, 0x40b, 0x60b, 0x80b, 0xa0b]);
    assert_eq!(starts, [0x0b, 0x3f, 0x237, 0x40b, 0x613, 0xbc3]);
}

#[test]
fn marker_stream_wraparound() {
    // §5.6 wrap-around case: the first three FPDUs with SeqStart 0xFFFFFF00.
    let three = &marker_stream_ulpdus()[..3];
    let (reference, markers, starts) = reference_encode(0xFFFF_FF00, three);
    assert_eq!(markers, [0xFFFF_FF00, 0x0000_0100]);
    assert_eq!(starts, [0xFFFF_FF00, 0xFFFF_FF34, 0x0000_012C]);
    // Our Framer counts positions from SeqStart, so it never sees the wrap: identical bytes,
    // CRCs included, and the same as at SeqStart 11.
    let ours = marker_stream();
    assert_eq!(reference, &ours[..1024]);
    assert_eq!(reference_encode(11, three).0, reference);
    assert_eq!(&reference[0x200..0x204], &[0, 0, 0x01, 0xcc]);
}
