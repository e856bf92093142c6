//! :run_servant:iwarpd's local service in this process, and a hostile client writing fuzzed send and receive entries, ring indices, staged payloads, push slots and shared receive queue entries into one queue pair's shared memory; see `iwarp_fuzz::servant` (no panic, no hang, no leak, an honest queue pair beside it keeps working).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    iwarp_fuzz::servant::run_servant(data);
});
