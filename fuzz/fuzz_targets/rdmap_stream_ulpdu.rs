//! `rdmap::Stream` fed correctly framed FPDUs around arbitrary ULPDUs.
//!
//! Input: octets 0-2 as in `rdmap_stream` (settings, TCP read size, plan); the rest is a
//! sequence of ULPDUs, each one length octet followed by up to 255 octets (the last one
//! takes what is left). Each ULPDU is framed with the peer's `mpa::Framer` (markers and a
//! correct CRC), so every byte reaches DDP and RDMAP validation, placement, the receive
//! queue, Read and Atomic responders, and Terminate handling. Same invariants as
//! `rdmap_stream`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    iwarp_fuzz::run_ulpdus(data);
});
