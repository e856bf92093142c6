//! The CRC32c (`crc-fast` against the `crc32c` crate from 64 octets to 64 KiB: where
//! mpa uses which), then FPDU framing
//! throughput: `Framer::encode` and `Deframer::decode` of 16 KiB ULPDUs, CRC on,
//! markers off, each compared with bare `crc32c` over the same bytes measured in the same
//! run.
//!
//! Run with `cargo bench -p mpa`. `--smoke` (or `IWARP_BENCH_SMOKE=1`) runs for a few
//! milliseconds only.
//!
//! Allocation check: a counting `#[global_allocator]` needs `unsafe impl GlobalAlloc`, which
//! the workspace's `forbid(unsafe_code)` does not allow. Instead the loops check that the
//! `BytesMut` buffers keep the same pointer and capacity across iterations after warm-up, i.e.
//! the framing path never reallocates (and `Framer`/`Deframer` allocate nothing themselves).

use std::hint::black_box;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use mpa::{Deframer, Framer, crc32c};

/// ULPDU size: 16 KiB (fits ULPDU_Length).
const ULPDU: usize = 16 * 1024;
/// Tagged DDP header size, to split the ULPDU the way DDP hands it over.
const HEADER: usize = 14;
/// FPDUs per decode batch (256 KiB: stays in L2 on most machines).
const BATCH: usize = 16;

fn main() {
    let smoke = std::env::args().any(|a| a == "--smoke")
        || std::env::var("IWARP_BENCH_SMOKE").is_ok_and(|v| v == "1");
    let budget = if smoke {
        Duration::from_millis(5)
    } else {
        Duration::from_secs(1)
    };

    let ulpdu: Vec<u8> = (0..ULPDU).map(|i| (i * 131 + 7) as u8).collect();
    let (header, payload) = ulpdu.split_at(HEADER);
    sanity(header, payload, &ulpdu);

    println!(
        "mpa FPDU bench: ULPDU {ULPDU} octets, CRC on, markers off, {budget:?} per measurement"
    );

    // (0) The CRC itself, the two implementations mpa chooses between at each size
    // (src/crc.rs: crc-fast up to 256 octets and from 2 KiB, the crc32c crate between),
    // from a header to 64 KiB.
    let big: Vec<u8> = (0..64 * 1024).map(|i| (i * 31 + 7) as u8).collect();
    for len in [64, 256, 512, 1460, 2048, 64 * 1024] {
        let fast = measure(budget, || {
            black_box(crc_fast::checksum(
                crc_fast::CrcAlgorithm::Crc32Iscsi,
                black_box(&big[..len]),
            ));
            len
        });
        let crate_loop = measure(budget, || {
            black_box(::crc32c::crc32c(black_box(&big[..len])));
            len
        });
        report(&format!("crc-fast {len}"), fast, "crc32c", crate_loop);
    }

    // (1) encode alone vs one crc32c pass.
    let mut framer = Framer::new(false, true);
    let mut wire = BytesMut::with_capacity(ULPDU + 64);
    let mut stable = Stable::default();
    let enc = measure(budget, || {
        wire.clear();
        framer.encode(header, payload, &mut wire);
        black_box(&wire);
        stable.check(&wire);
        ULPDU
    });
    let crc1 = measure(budget, || {
        black_box(crc32c(black_box(&ulpdu)));
        ULPDU
    });
    report("encode", enc, "1x crc32c", crc1);
    stable.report("encode buffer");

    // (1a) encode_with: the payload appended in place (a Read Response copied out of
    // registered memory straight into the FPDU), then the CRC over the whole FPDU.
    let mut framer = Framer::new(false, true);
    let mut stable = Stable::default();
    let with = measure(budget, || {
        wire.clear();
        let filled = framer.encode_with(header, payload.len(), &mut wire, |d| {
            d.extend_from_slice(payload);
            Ok::<_, ()>(())
        });
        assert!(filled.is_ok());
        black_box(&wire);
        stable.check(&wire);
        ULPDU
    });
    report("encode_with", with, "1x crc32c", crc1);
    stable.report("encode_with buffer");

    // (1b) zero-copy encode_deferred (head, then the trailer from the payload where it
    // stays) vs one crc32c pass.
    let mut framer = Framer::new(false, true);
    let mut head = BytesMut::with_capacity(64);
    let mut stable = Stable::default();
    let chained = measure(budget, || {
        head.clear();
        let trailer = framer
            .encode_deferred(header, payload.len(), &mut head)
            .unwrap();
        let mut tail = [0u8; mpa::Trailer::MAX_LEN];
        black_box(trailer.finish(payload, &mut tail));
        black_box((&head, &tail));
        stable.check(&head);
        ULPDU
    });
    report("chained", chained, "1x crc32c", crc1);
    stable.report("head buffer");

    // (2) decode alone vs one crc32c pass, both over a batch of FPDUs in one buffer.
    let mut one = BytesMut::new();
    Framer::new(false, true).encode(header, payload, &mut one);
    let fpdu_len = one.len();
    let batch: Vec<u8> = one.iter().copied().cycle().take(fpdu_len * BATCH).collect();
    let mut deframer = Deframer::new(false, true);
    let mut src = BytesMut::with_capacity(batch.len());
    let mut stable = Stable::default();
    let dec = measure_batched(budget, || {
        src.clear();
        src.extend_from_slice(&batch);
        stable.check(&src);
        let t = Instant::now();
        for _ in 0..BATCH {
            let u = deframer
                .decode(&mut src)
                .expect("decode")
                .expect("whole FPDU");
            black_box(&u);
        }
        (t.elapsed(), ULPDU * BATCH)
    });
    let crc_batch = measure_batched(budget, || {
        let t = Instant::now();
        for k in 0..BATCH {
            let at = k * fpdu_len + 2;
            black_box(crc32c(black_box(&batch[at..at + ULPDU])));
        }
        (t.elapsed(), ULPDU * BATCH)
    });
    report("decode", dec, "1x crc32c", crc_batch);
    stable.report("decode buffer");

    // (3) encode + decode round trip in one reused buffer vs two crc32c passes.
    let mut framer = Framer::new(false, true);
    let mut deframer = Deframer::new(false, true);
    let mut buf = BytesMut::with_capacity(ULPDU + 64);
    let mut stable = Stable::default();
    let rt = measure(budget, || {
        buf.clear();
        framer.encode(header, payload, &mut buf);
        stable.check(&buf);
        let u = deframer
            .decode(&mut buf)
            .expect("decode")
            .expect("whole FPDU");
        black_box(&u);
        drop(u); // releases the shared allocation so the next reserve reclaims it
        ULPDU
    });
    let crc2 = measure(budget, || {
        black_box(crc32c(black_box(&ulpdu)));
        black_box(crc32c(black_box(&ulpdu)));
        ULPDU
    });
    report("round trip", rt, "2x crc32c", crc2);
    stable.report("round-trip buffer");
}

/// Encodes and decodes once and checks the result.
fn sanity(header: &[u8], payload: &[u8], ulpdu: &[u8]) {
    let mut wire = BytesMut::new();
    Framer::new(false, true).encode(header, payload, &mut wire);
    let u = Deframer::new(false, true)
        .decode(&mut wire)
        .expect("decode")
        .expect("whole FPDU");
    assert_eq!(&u[..], ulpdu);
}

/// Runs `f` (returns octets processed) until `budget` elapsed; returns octets per second.
fn measure(budget: Duration, mut f: impl FnMut() -> usize) -> f64 {
    for _ in 0..16 {
        f(); // warm-up
    }
    let start = Instant::now();
    let mut octets = 0usize;
    while start.elapsed() < budget {
        for _ in 0..32 {
            octets += f();
        }
    }
    octets as f64 / start.elapsed().as_secs_f64()
}

/// Like [`measure`] for closures that time their own measured part.
fn measure_batched(budget: Duration, mut f: impl FnMut() -> (Duration, usize)) -> f64 {
    for _ in 0..4 {
        f(); // warm-up
    }
    let wall = Instant::now();
    let (mut spent, mut octets) = (Duration::ZERO, 0usize);
    while wall.elapsed() < budget {
        let (t, n) = f();
        spent += t;
        octets += n;
    }
    octets as f64 / spent.as_secs_f64()
}

fn report(path: &str, path_rate: f64, base: &str, base_rate: f64) {
    println!(
        "{path:<10} {:>7.2} GB/s   baseline {base:<9} {:>7.2} GB/s   ratio {:.2}",
        path_rate / 1e9,
        base_rate / 1e9,
        path_rate / base_rate
    );
}

/// Tracks whether a buffer's allocation (pointer and capacity) changes across iterations.
#[derive(Default)]
struct Stable {
    seen: Option<(usize, usize)>,
    iterations: u64,
    changes: u64,
}

impl Stable {
    fn check(&mut self, buf: &BytesMut) {
        let now = (buf.as_ptr() as usize, buf.capacity());
        self.iterations += 1;
        match self.seen {
            Some(prev) if prev != now => {
                self.changes += 1;
                self.seen = Some(now);
            }
            Some(_) => {}
            None => self.seen = Some(now),
        }
    }

    fn report(&self, what: &str) {
        println!(
            "           {what}: {} reallocations in {} iterations (pointer/capacity stable: {})",
            self.changes,
            self.iterations,
            self.changes == 0
        );
    }
}
