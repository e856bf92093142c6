//! `rdmap::Stream` fed arbitrary FPDU-mode bytes.
//!
//! Input: octet 0 = connection settings ([`iwarp_fuzz::Setup`]: role under test, CRC,
//! markers, peer-to-peer and RTR, revision), octet 1 = TCP read size
//! ([`iwarp_fuzz::chunk_size`]), octet 2 = send work posted first and the end of the run
//! ([`iwarp_fuzz::Plan`]); the rest is what the peer sends after the MPA exchange.
//!
//! The stream must never panic, must only transmit valid FPDUs, must complete every request
//! at most once (exactly once once it has ended) and must not claim to want to transmit
//! when it has nothing to send (see [`iwarp_fuzz::StreamHarness`]). With CRC on, random
//! bytes rarely get past the CRC check: `rdmap_stream_ulpdu` frames its input properly to
//! reach DDP and RDMAP validation.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    iwarp_fuzz::run_fpdus(data);
});
