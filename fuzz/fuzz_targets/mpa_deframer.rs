//! `mpa::Deframer` on arbitrary FPDU-mode bytes.
//!
//! Input: octet 0 = bit 0 markers, bit 1 CRC, bits 2-7 the TCP read size
//! ([`iwarp_fuzz::chunk_size`]); the rest is the byte stream. Every ULPDU the deframer
//! returns is framed again with a `Framer` of the same settings and deframed again: that
//! round trip must give the same ULPDUs and consume exactly what was framed.
#![no_main]

use bytes::BytesMut;
use iwarp_fuzz::{chunk_size, take_byte};
use libfuzzer_sys::fuzz_target;
use mpa::{Deframer, Framer, MAX_ULPDU};

fuzz_target!(|data: &[u8]| {
    let (sel, stream) = take_byte(data);
    let markers = sel & 0x01 != 0;
    let crc = sel & 0x02 != 0;
    let chunk = chunk_size(sel >> 2);

    let mut de = Deframer::new(markers, crc);
    let mut buf = BytesMut::new();
    let mut ulpdus = Vec::new();
    let mut failed = false;
    let mut fed = 0usize;
    'feed: for piece in stream.chunks(chunk) {
        buf.extend_from_slice(piece);
        fed += piece.len();
        loop {
            let before = buf.len();
            match de.decode(&mut buf) {
                Ok(Some(u)) => {
                    assert!(buf.len() < before, "a ULPDU consumed nothing");
                    ulpdus.push(u);
                }
                Ok(None) => {
                    assert_eq!(buf.len(), before, "Ok(None) consumed octets");
                    break;
                }
                Err(e) => {
                    // Errors are final.
                    assert_eq!(de.decode(&mut buf), Err(e.clone()));
                    assert_eq!(de.decode_eof(&mut buf), Err(e));
                    failed = true;
                    break 'feed;
                }
            }
        }
        assert_eq!(de.position() + buf.len() as u64, fed as u64, "position");
    }
    if !failed {
        let eof = de.decode_eof(&mut buf);
        assert_eq!(eof.is_ok(), buf.is_empty(), "decode_eof: {eof:?}");
    }

    // Round trip. With markers, the Framer takes ULPDUs up to MAX_ULPDU only (FPDUPTR is 16
    // bits); the default Deframer accepts longer ones, so stop at the first such ULPDU.
    let limit = if markers {
        usize::from(MAX_ULPDU)
    } else {
        usize::from(u16::MAX)
    };
    let n = ulpdus.iter().take_while(|u| u.len() <= limit).count();
    let mut fr = Framer::new(markers, crc);
    let mut wire = BytesMut::new();
    for u in &ulpdus[..n] {
        fr.encode(u, &[], &mut wire);
    }
    let framed = wire.len() as u64;
    assert_eq!(fr.position(), framed);
    let mut de2 = Deframer::new(markers, crc);
    for (i, u) in ulpdus[..n].iter().enumerate() {
        match de2.decode(&mut wire) {
            Ok(Some(again)) => assert_eq!(&again[..], &u[..], "ULPDU {i} changed"),
            other => panic!("re-framed ULPDU {i} of {n} did not deframe: {other:?}"),
        }
    }
    assert!(
        wire.is_empty(),
        "{} octets left after the round trip",
        wire.len()
    );
    assert_eq!(de2.position(), framed);
    assert_eq!(de2.decode_eof(&mut wire), Ok(()));
    if n == ulpdus.len() {
        // Same ULPDUs from the same SeqStart: same wire length (PAD, markers and CRC are
        // fixed by the ULPDU lengths and the stream position).
        assert_eq!(framed, de.position(), "wire length differs");
    }
});
