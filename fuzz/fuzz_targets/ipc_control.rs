//! Control frames through `ipc::channel::Inbox` over a real socket pair with real descriptors, then every decoder of the control channel; see `iwarp_fuzz::run_control` for the input format and the invariants (the framing agrees with a reference model, descriptors come with their message in order and as many as declared, decoded messages round-trip).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    iwarp_fuzz::run_control(data);
});
