//! The honest path through one `iwarpd`, many times over: `iwperf` pairs started at once
//! (the client retrying until its server listens), so that a connection request often
//! arrives right behind the server's Listen reply. One lost request used to hang a pair
//! 10 s and fail it "MPA negotiation failed" (3 of 420). CI runs 60 pairs;
//! `IWARP_PAIRS=3000` runs the long loop by hand.

mod common;

use std::time::Duration;

use common::{IWPERF, Iwarpd, port, shown, spawn, try_finish};

#[test]
fn iwperf_pairs_through_one_daemon_never_lose_a_connection() {
    let pairs: usize = std::env::var("IWARP_PAIRS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(60);
    let d = Iwarpd::start("pairs", &[]);
    let sock = d.sock().to_owned();
    // Two pairs at a time, each on its own thread.
    let runners: Vec<_> = (0..2)
        .map(|r| {
            let sock = sock.clone();
            std::thread::spawn(move || {
                for i in (r..pairs).step_by(2) {
                    let p = port();
                    let args = [
                        "send_lat", "--daemon", &sock, "-p", &p, "-n", "50", "-s", "8",
                    ];
                    let server = spawn(IWPERF, &args);
                    let client = spawn(
                        IWPERF,
                        &[&args[..], &["--connect-wait", "10", "127.0.0.1"]].concat(),
                    );
                    let c = try_finish(client, Duration::from_secs(60));
                    let s = try_finish(server, Duration::from_secs(30));
                    for (what, out) in [("client", c), ("server", s)] {
                        match out {
                            Ok(o) if o.status.success() => {}
                            Ok(o) | Err(o) => panic!("pair {i}, {what}: {}", shown(&o)),
                        }
                    }
                    if (i + 1) % 100 == 0 {
                        eprintln!("{} pairs through one iwarpd", i + 1);
                    }
                }
            })
        })
        .collect();
    for r in runners {
        r.join().expect("every pair passed");
    }
}
