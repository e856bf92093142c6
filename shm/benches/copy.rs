//! Placement copies into a region: a memfd mapping (`Region::alloc`) against adopted heap
//! memory (`Region::adopt` of a `Vec`), 16 KiB at a time from an unaligned source (as a
//! payload sits behind an FPDU header in a receive buffer) into a 64 KiB region, measured
//! in the same run. `cargo bench -p shm`; `--smoke` runs for a moment.

use std::hint::black_box;
use std::time::{Duration, Instant};

use shm::Region;

fn main() {
    let smoke = std::env::args().any(|a| a == "--smoke");
    let budget = Duration::from_millis(if smoke { 5 } else { 1000 });
    let rx: Vec<u8> = (0..(1usize << 20)).map(|i| i as u8).collect();
    let src = &rx[20..20 + 4 * 16384];
    let memfd = Region::alloc(64 * 1024).expect("memfd region");
    let heap = Region::adopt(vec![0u8; 64 * 1024]);
    println!("shm copy bench: 16 KiB placements into a 64 KiB region, {budget:?} each");
    for round in 0..3 {
        let m = rate(&memfd, src, budget);
        let h = rate(&heap, src, budget);
        println!(
            "round {round}: memfd {:6.2} GB/s   heap {:6.2} GB/s   ratio {:.2}",
            m / 1e9,
            h / 1e9,
            m / h
        );
    }
}

fn rate(r: &Region, src: &[u8], budget: Duration) -> f64 {
    let start = Instant::now();
    let mut octets = 0usize;
    let mut i = 0usize;
    while start.elapsed() < budget {
        for _ in 0..64 {
            let at = (i % 4) * 16384;
            r.write_at(at, black_box(&src[at..at + 16384]))
                .expect("in range");
            octets += 16384;
            i += 1;
        }
    }
    octets as f64 / start.elapsed().as_secs_f64()
}
