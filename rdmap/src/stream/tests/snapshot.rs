//! A stream read back from its snapshot is the same stream; anything else is refused.

use std::time::Instant;

use super::pair::Pair;
use super::*;
use crate::Stream;

#[test]
fn a_snapshot_reads_back_and_anything_else_is_refused() {
    let mut p = Pair::new(7);
    p.b.mem.register(stag(1), 0, 4096, 0, RW);
    p.a.s
        .post_send(write(1, &pattern(3000, 1), remote(stag(1), 0, 3000)))
        .unwrap();
    let now = Instant::now();
    let octets = p.a.s.to_snapshot(now).unwrap();
    assert_eq!(&octets[..8], b"iWQPsnp1");
    let back = Stream::from_snapshot(&octets, now).unwrap();
    assert_eq!(back.to_snapshot(now).unwrap(), octets);

    let foreign = Stream::from_snapshot(b"iWQPsnp0rest", now).unwrap_err();
    assert!(
        foreign.to_string().contains("same snapshot format"),
        "{foreign}"
    );
    let cut = Stream::from_snapshot(&octets[..octets.len() - 1], now).unwrap_err();
    assert!(cut.to_string().contains("cannot be read"), "{cut}");
    let mut long = octets;
    long.push(0);
    let long = Stream::from_snapshot(&long, now).unwrap_err();
    assert!(long.to_string().contains("1 octets too many"), "{long}");

    // The write posted before the snapshot goes out from the stream read back.
    p.a.s = back;
    p.drive();
    assert_eq!(p.a.completions().len(), 1);
    assert_eq!(&p.b.mem.bytes(stag(1))[..3000], &pattern(3000, 1)[..]);
}
