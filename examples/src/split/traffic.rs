//! The test traffic: message lengths and contents derived from `(seed, sequence number)`,
//! so the receiver regenerates every message and compares octet for octet.

use bytes::Bytes;

/// The longest message [`message_len`] picks.
pub const MAX_LEN: u32 = 96 << 10;

/// A well-mixed 64-bit hash step (splitmix64).
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The length of message `seq` of the stream `seed`: mostly small (1..=256 octets, 70%),
/// some medium (257..=4096, 25%), a few large (4097..=[`MAX_LEN`], 5%).
pub fn message_len(seed: u64, seq: u64) -> u32 {
    let h = mix(seed.rotate_left(32) ^ seq);
    let r = (h >> 40) as u32;
    let (lo, hi) = match h % 100 {
        0..70 => (1, 256),
        70..95 => (257, 4096),
        _ => (4097, MAX_LEN),
    };
    lo + r % (hi - lo + 1)
}

/// The octets of message `seq` of the stream `seed`, `len` long.
pub fn payload(seed: u64, seq: u64, len: u32) -> Bytes {
    let mut state = mix(seed ^ seq.rotate_left(17));
    let mut out = Vec::with_capacity(len as usize + 8);
    while out.len() < len as usize {
        state = mix(state);
        out.extend_from_slice(&state.to_le_bytes());
    }
    out.truncate(len as usize);
    out.into()
}
