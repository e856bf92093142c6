//! Push slots, a shared receive queue's ring and a queue pair's segment, written through a second mapping while the daemon's side reads them; see `iwarp_fuzz::run_rings`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    iwarp_fuzz::run_rings(data);
});
