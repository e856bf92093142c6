//! The bodies of the two stream targets, shared so that tests can replay inputs.

use bytes::BytesMut;
use mpa::Framer;

use crate::{Plan, Setup, StreamHarness, chunk_size, connect, take_byte};

/// The `rdmap_stream` target: octet 0 = [`Setup`], octet 1 = TCP read size
/// ([`chunk_size`]), octet 2 = [`Plan`]; the rest is fed as received FPDU-mode bytes.
/// Returns the harness after the run.
pub fn run_fpdus(data: &[u8]) -> StreamHarness {
    let (mut h, sel, plan, input) = start(data);
    for piece in input.chunks(chunk_size(sel)) {
        h.feed(piece);
    }
    h.finish(plan.eof());
    h
}

/// The `rdmap_stream_ulpdu` target: octets 0-2 as in [`run_fpdus`]; the rest is a list of
/// ULPDUs, each a length octet and up to 255 octets (the last takes what is left), framed
/// by the peer's `Framer` (markers, PAD and a correct CRC) before they are fed.
pub fn run_ulpdus(data: &[u8]) -> StreamHarness {
    let (mut h, sel, plan, mut input) = start(data);
    let mut framer = Framer::from_negotiated(h.peer());
    let mut wire = BytesMut::new();
    while let Some((&len, rest)) = input.split_first() {
        let (ulpdu, rest) = rest.split_at(usize::from(len).min(rest.len()));
        framer.encode(ulpdu, &[], &mut wire);
        input = rest;
    }
    for piece in wire.chunks(chunk_size(sel)) {
        h.feed(piece);
    }
    h.finish(plan.eof());
    h
}

fn start(data: &[u8]) -> (StreamHarness, u8, Plan, &[u8]) {
    let (setup, rest) = take_byte(data);
    let (sel, rest) = take_byte(rest);
    let (plan, input) = take_byte(rest);
    let Some((me, peer)) = connect(Setup::from_byte(setup)) else {
        panic!("handshake failed for setup {setup:#04x}");
    };
    let plan = Plan(plan);
    (StreamHarness::new(&me, &peer, plan), sel, plan, input)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rdmap::QpState;

    fn untagged(op: u8, qn: u32, msn: u32, payload: &[u8]) -> Vec<u8> {
        let mut u = vec![0x41, 0x40 | op];
        for w in [0, qn, msn, 0] {
            u.extend_from_slice(&w.to_be_bytes());
        }
        u.extend_from_slice(payload);
        u
    }

    fn input(setup: u8, plan: u8, ulpdus: &[Vec<u8>]) -> Vec<u8> {
        let mut d = vec![setup, 0x3f, plan];
        for u in ulpdus {
            d.push(u8::try_from(u.len()).unwrap());
            d.extend_from_slice(u);
        }
        d
    }

    #[test]
    fn framed_sends_are_received_and_completed() {
        // Initiator, CRC on, no work posted, FIN at the end.
        let sends = [untagged(3, 0, 1, b"ABCD"), untagged(3, 0, 2, b"EF")];
        let h = run_ulpdus(&input(0x02, 0x80, &sends));
        assert_eq!(h.stream().stats().fpdus_received, 2);
        assert_eq!(h.stream().stats().bytes_placed, 6);
        // 2 receives succeeded; the harness topped the queue up to 4 again, and those 4
        // were flushed at FIN.
        assert_eq!(h.completions(), 6);
        assert_eq!(h.stream().state(), QpState::Error);
    }

    #[test]
    fn bad_msn_terminates() {
        let h = run_ulpdus(&input(0x02, 0x00, &[untagged(3, 0, 9, b"x")]));
        assert_eq!(h.stream().state(), QpState::Error);
        assert_eq!(h.completions(), 4, "the 4 receives are flushed");
    }

    #[test]
    fn raw_bytes_with_crc_off_reach_the_stream() {
        // Responder, CRC off: the same Send framed by hand with a zero CRC.
        let u = untagged(3, 0, 1, b"ABCD");
        let mut d = vec![0x01, 0x3f, 0x00, 0, u.len() as u8];
        d.extend_from_slice(&u);
        d.extend_from_slice(&[0, 0, 0, 0, 0, 0]); // PAD (2) + CRC (4)
        let h = run_fpdus(&d);
        assert_eq!(h.stream().stats().fpdus_received, 1);
        assert_eq!(h.stream().stats().bytes_placed, 4);
        assert_eq!(h.stream().state(), QpState::Rts);
    }

    /// Summarises a corpus directory: `FUZZ_CORPUS=corpus/rdmap_stream_ulpdu cargo test
    /// --lib -- --ignored --nocapture corpus_summary` (`FUZZ_RAW=1` for `rdmap_stream`).
    #[test]
    #[ignore]
    fn corpus_summary() {
        let dir = std::env::var("FUZZ_CORPUS").expect("FUZZ_CORPUS");
        let raw = std::env::var("FUZZ_RAW").is_ok();
        let mut states = std::collections::BTreeMap::new();
        let (mut files, mut fpdus, mut placed, mut wcs, mut tx) = (0, 0, 0, 0, 0);
        for entry in std::fs::read_dir(dir).expect("corpus dir") {
            let data = std::fs::read(entry.expect("entry").path()).expect("read");
            let h = if raw {
                run_fpdus(&data)
            } else {
                run_ulpdus(&data)
            };
            let s = h.stream().stats();
            files += 1;
            fpdus += s.fpdus_received;
            placed += s.bytes_placed;
            tx += s.fpdus_sent;
            wcs += h.completions();
            *states
                .entry(format!("{:?}", h.stream().state()))
                .or_insert(0) += 1;
        }
        println!(
            "{files} inputs: {fpdus} FPDUs received, {placed} octets placed, {tx} FPDUs sent, \
             {wcs} completions, final states {states:?}"
        );
    }
}
