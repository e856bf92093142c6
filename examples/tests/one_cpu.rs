//! Liveness when processors are scarce (issue 33, item 5): both ends of every latency test
//! pinned to one CPU, busy-polling and with `-e`, embedded and through an `iwarpd` pinned
//! there too. A spinning application must never
//! starve the progress it waits for: here the peer it waits for shares its CPU, so each
//! wait must give the CPU up. Before, every message waited out the scheduler's time slice
//! (4 ms a round trip), and a build in a one-CPU VM froze for 100 s.
//!
//! Each run of 20,000 iterations must finish within a minute, 20 times what it takes
//! here: a stall fails it, and so does a wait that starves its peer (the time slice per
//! message made a run take 3 minutes). The worst round trip is printed. CI runs each test twice; `IWARP_ONE_CPU_RUNS=20` runs the issue's
//! loop by hand.

mod common;

use std::sync::Mutex;
use std::time::Duration;

use common::{IWPERF, Iwarpd, port, shown, spawn, try_finish};

/// The tests share CPU 0: one at a time.
static CPU0: Mutex<()> = Mutex::new(());

#[test]
fn latency_tests_with_both_ends_on_one_cpu_never_stall() {
    let _cpu = CPU0.lock().unwrap_or_else(|e| e.into_inner());
    if !has_taskset() {
        return;
    }
    every_test(None, "both ends on CPU 0");
}

#[test]
fn through_iwarpd_on_one_cpu_too() {
    let _cpu = CPU0.lock().unwrap_or_else(|e| e.into_inner());
    if !has_taskset() {
        return;
    }
    let d = Iwarpd::start("one-cpu", &[]);
    // Every thread of the daemon on CPU 0 as well.
    let pinned = std::process::Command::new("taskset")
        .args(["-a", "-c", "-p", "0", &d.child.id().to_string()])
        .output()
        .expect("taskset");
    assert!(pinned.status.success(), "pin iwarpd: {}", shown(&pinned));
    every_test(Some(d.sock()), "both ends and iwarpd on CPU 0");
}

fn has_taskset() -> bool {
    let found = std::process::Command::new("taskset")
        .arg("-V")
        .output()
        .is_ok();
    if !found {
        eprintln!("SKIPPED: no taskset (util-linux)");
    }
    found
}

/// Each latency test, busy and `-e`, `IWARP_ONE_CPU_RUNS` times (default 2), through the
/// daemon listening on `daemon` if given; prints the worst round trip of each.
fn every_test(daemon: Option<&str>, how: &str) {
    let runs: usize = std::env::var("IWARP_ONE_CPU_RUNS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(2);
    for test in ["send_lat", "write_lat", "read_lat"] {
        for events in [false, true] {
            let mut worst = 0.0f64;
            for _ in 0..runs {
                worst = worst.max(run(test, events, daemon));
            }
            let mode = if events { "-e" } else { "busy" };
            eprintln!("{test} {mode}, {how}, {runs} runs: worst {worst:.0} us");
        }
    }
}

/// One pinned run of 20,000 iterations; the client's longest sample (us).
fn run(test: &str, events: bool, daemon: Option<&str>) -> f64 {
    let p = port();
    let mut args = vec!["-c", "0", IWPERF, test, "-p", &p, "-n", "20000", "-s", "8"];
    if events {
        args.push("-e");
    }
    if let Some(sock) = daemon {
        args.extend(["--daemon", sock]);
    }
    let server = spawn("taskset", &args);
    let client = spawn(
        "taskset",
        &[&args[..], &["--connect-wait", "10", "--json", "127.0.0.1"]].concat(),
    );
    let limit = Duration::from_secs(60);
    let c = try_finish(client, limit);
    let s = try_finish(server, limit);
    let out = match (c, s) {
        (Ok(c), Ok(s)) if c.status.success() && s.status.success() => c,
        (c, s) => {
            let show = |r: Result<_, _>| match r {
                Ok(o) => shown(&o),
                Err(o) => format!("still running after {limit:?} (stalled): {}", shown(&o)),
            };
            panic!(
                "{test} (-e: {events}):\nclient {}\nserver {}",
                show(c),
                show(s)
            );
        }
    };
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = stdout
        .lines()
        .find(|l| l.starts_with('{'))
        .unwrap_or_else(|| panic!("no JSON result: {stdout}"));
    let json: serde_json::Value = serde_json::from_str(line).expect("a JSON result");
    json["t_max"].as_f64().expect("t_max")
}
