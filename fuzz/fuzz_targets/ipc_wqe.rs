//! Send, receive and completion entries of the rings; see `iwarp_fuzz::run_entries` (no panic, staged claims handed to the caller as stated and never allocated by the decoder, round trips).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    iwarp_fuzz::run_entries(data);
});
