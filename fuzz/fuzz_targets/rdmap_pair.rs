//! Two `rdmap::Stream`s over an in-memory wire, structure-aware: the input posts work
//! requests on either side, delivers or corrupts whole FPDUs either way and closes; see
//! `iwarp_fuzz::run_pair` for the encoding and the invariants (no panic, nothing placed
//! on a failed check with CRC on, every request completes exactly once).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = iwarp_fuzz::run_pair(data);
});
