//! In-process loopback: our client against our server, every test and flag.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

use verbs::Device;

use super::msg::BwReport;
use super::report::{LatReport, Printer};
use super::{Opts, Outcome, Test, run_client, serve};

fn opts(args: &str) -> Opts {
    let mut o = Opts::parse(args.split_whitespace().map(String::from)).unwrap();
    o.first_delay = Duration::ZERO;
    o.timeout = Duration::from_secs(10);
    o
}

/// Runs `args` as server and client over 127.0.0.1; returns (client, server) lines.
async fn pair(args: &str) -> (Vec<Outcome>, Vec<Outcome>) {
    let sopts = opts(args);
    let dev = Device::open(sopts.device_config()).expect("open the device");
    let listener = dev
        .listen(SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 0))
        .await
        .unwrap();
    let mut copts = sopts.clone();
    copts.port = listener.local_addr().port();
    copts.server = Some(IpAddr::V4(Ipv4Addr::LOCALHOST));
    let server = tokio::spawn(async move { serve(&dev, &listener, &sopts).await });
    let sent = run_client(&copts).await;
    let got = server.await.unwrap();
    match (sent, got) {
        (Ok(c), Ok(s)) => (c, s),
        (c, s) => panic!("{args}: client {c:?}, server {s:?}"),
    }
}

fn bw(o: &[Outcome]) -> Vec<BwReport> {
    o.iter()
        .map(|o| match o {
            Outcome::Bw(r) => *r,
            Outcome::Lat(_) => panic!("a latency line in a bandwidth test"),
        })
        .collect()
}

fn lat(o: &[Outcome]) -> Vec<LatReport> {
    o.iter()
        .map(|o| match o {
            Outcome::Lat(r) => *r,
            Outcome::Bw(_) => panic!("a bandwidth line in a latency test"),
        })
        .collect()
}

fn check_bw(r: &BwReport, size: u64, iters: u64) {
    assert_eq!((r.size, r.iters), (size, iters), "{r:?}");
    assert!(r.bw_avg > 0.0 && r.msg_rate > 0.0, "{r:?}");
    // The peak is the best run of consecutive operations, the whole run included.
    assert!(r.bw_peak >= r.bw_avg * 0.999, "{r:?}");
}

fn check_lat(r: &LatReport, size: u64, iters: u64) {
    let s = &r.stats;
    assert_eq!((r.size, r.iters), (size, iters), "{r:?}");
    assert!(s.min > 0.0, "{r:?}");
    assert!(s.min <= s.typical && s.typical <= s.max, "{r:?}");
    assert!(s.min <= s.avg && s.avg <= s.max, "{r:?}");
    assert!(
        s.typical <= s.p99 && s.p99 <= s.p999 && s.p999 <= s.max,
        "{r:?}"
    );
}

#[tokio::test]
async fn write_bw_loopback() {
    let (c, s) = pair("write_bw -s 8192 -n 40").await;
    check_bw(&bw(&c)[0], 8192, 40);
    // The server prints the report the client sent.
    assert_eq!(c, s);
}

#[tokio::test]
async fn read_bw_loopback() {
    let (c, s) = pair("read_bw -s 8192 -n 40 -t 4").await;
    check_bw(&bw(&c)[0], 8192, 40);
    assert_eq!(c, s);
}

/// Runs `server` and `client` (different arguments); returns both results.
async fn mismatched(server: &str, client: &str) -> (String, String) {
    let sopts = opts(server);
    let dev = Device::open(sopts.device_config()).expect("open the device");
    let listener = dev
        .listen(SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 0))
        .await
        .unwrap();
    let mut copts = opts(client);
    copts.port = listener.local_addr().port();
    copts.server = Some(IpAddr::V4(Ipv4Addr::LOCALHOST));
    let served = tokio::spawn(async move { serve(&dev, &listener, &sopts).await });
    let c = run_client(&copts)
        .await
        .map(|_| ())
        .unwrap_err()
        .to_string();
    let s = served.await.unwrap().map(|_| ()).unwrap_err().to_string();
    (c, s)
}

/// A passive server's `-n` or `-D` is not the client's business (as with perftest): a
/// `write_bw` server started with defaults serves a client running `-D 1`, as
/// `scripts/vs_tcp.py` runs them.
#[tokio::test]
async fn a_passive_servers_count_does_not_have_to_match() {
    let sopts = opts("write_bw -s 4096");
    let dev = Device::open(sopts.device_config()).expect("open the device");
    let listener = dev
        .listen(SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 0))
        .await
        .unwrap();
    let mut copts = opts("write_bw -s 4096 -D 1");
    copts.port = listener.local_addr().port();
    copts.server = Some(IpAddr::V4(Ipv4Addr::LOCALHOST));
    let served = tokio::spawn(async move { serve(&dev, &listener, &sopts).await });
    let c = run_client(&copts).await.unwrap();
    assert_eq!(served.await.unwrap().unwrap(), c);
}

/// Two iwperf set up for different tests refuse to run, at once, both naming both.
#[tokio::test]
async fn a_mismatch_between_two_iwperf_is_refused_naming_both() {
    for (server, client, here, there) in [
        (
            "write_bw -s 8192 -n 40",
            "write_bw -s 1048576 -n 40",
            "write_bw -s 1048576 -n 40 -q 1",
            "write_bw -s 8192 -n 40 -q 1",
        ),
        (
            "write_bw",
            "read_bw",
            "read_bw -s 65536",
            "write_bw -s 65536",
        ),
        (
            "send_lat -n 10",
            "write_lat -n 10",
            "write_lat -s 2",
            "send_lat -s 2",
        ),
        ("write_bw -q 1", "write_bw -q 2", "-q 2", "-q 1"),
    ] {
        let (c, s) = mismatched(server, client).await;
        for text in [&c, &s] {
            assert!(
                text.contains("set up for different tests")
                    && text.contains(here)
                    && text.contains(there),
                "{server} / {client}: {text}"
            );
        }
    }
}

/// Messages up to half the cycle buffer walk it, as perftest's do (2048 octets and
/// below): the server's buffer spans the cycle, or these Writes and Reads would go past
/// its end and end the run with a Terminate.
#[tokio::test]
async fn small_messages_walk_the_cycle_buffer() {
    for args in [
        "write_bw -s 64 -n 200",
        "write_bw -s 100 -n 100",
        "write_bw -s 2048 -n 10",
        "read_bw -s 64 -n 200",
        "read_bw -s 2048 -n 10",
    ] {
        let (c, s) = pair(args).await;
        assert_eq!(c, s, "{args}");
    }
}

#[test]
fn the_walk_is_perftests() {
    let offsets = |size, n| {
        let mut at = super::bw::walk(size, 4096);
        (0..n).map(|_| at()).collect::<Vec<_>>()
    };
    assert_eq!(offsets(64, 3), [0, 64, 128]);
    assert_eq!(offsets(64, 65)[63..], [4032, 0]);
    assert_eq!(
        offsets(100, 33)[31..],
        [31 * 128, 0],
        "rounded up to a cache line"
    );
    assert_eq!(offsets(2048, 3), [0, 2048, 0]);
    assert_eq!(offsets(2049, 2), [0, 0], "above half the cycle: one place");
    assert_eq!(offsets(1 << 20, 2), [0, 0]);
}

#[tokio::test]
async fn send_bw_loopback() {
    let (c, s) = pair("send_bw -s 8192 -n 40").await;
    check_bw(&bw(&c)[0], 8192, 40);
    // The send_bw server reports its own measurement.
    check_bw(&bw(&s)[0], 8192, 40);
}

/// More Sends than the RX depth (512) and the TX depth (128): credits must pace them.
#[tokio::test]
async fn send_bw_loopback_credits() {
    let (c, s) = pair("send_bw -s 1024 -n 1500").await;
    check_bw(&bw(&c)[0], 1024, 1500);
    check_bw(&bw(&s)[0], 1024, 1500);
}

#[tokio::test]
async fn write_bw_loopback_deep() {
    let (c, _) = pair("write_bw -s 1024 -n 1500").await;
    check_bw(&bw(&c)[0], 1024, 1500);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn write_lat_loopback() {
    let (c, s) = pair("write_lat -n 300").await;
    check_lat(&lat(&c)[0], 2, 300);
    // Both sides measure; the server wrote first.
    check_lat(&lat(&s)[0], 2, 300);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_lat_loopback() {
    let (c, s) = pair("read_lat -s 64 -n 200").await;
    check_lat(&lat(&c)[0], 64, 200);
    // perftest's read_lat server only waits.
    assert!(s.is_empty(), "{s:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn send_lat_loopback() {
    let (c, s) = pair("send_lat -s 100 -n 300").await;
    check_lat(&lat(&c)[0], 100, 300);
    check_lat(&lat(&s)[0], 100, 300);
}

/// `-e`: completions waited for instead of polled.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn latency_with_completion_events() {
    let (c, s) = pair("send_lat -e -s 8 -n 100").await;
    check_lat(&lat(&c)[0], 8, 100);
    check_lat(&lat(&s)[0], 8, 100);
    let (c, _) = pair("read_lat -e -s 8 -n 100").await;
    check_lat(&lat(&c)[0], 8, 100);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn all_sizes_latency() {
    let (c, s) = pair("write_lat -a --max-size 16 -n 20").await;
    let sizes: Vec<u64> = lat(&c).iter().map(|r| r.size).collect();
    assert_eq!(sizes, vec![2, 4, 8, 16]);
    for r in lat(&c).iter().chain(&lat(&s)) {
        check_lat(r, r.size, 20);
    }
    let (c, _) = pair("send_lat -a --max-size 8 -n 10").await;
    assert_eq!(lat(&c).len(), 3);
    let (c, _) = pair("read_lat -a --max-size 8 -n 10").await;
    assert_eq!(lat(&c).len(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn all_sizes_bandwidth() {
    let (c, s) = pair("write_bw -a --max-size 32 -n 8").await;
    let sizes: Vec<u64> = bw(&c).iter().map(|r| r.size).collect();
    assert_eq!(sizes, vec![2, 4, 8, 16, 32]);
    // perftest's client sends only the last size's report.
    assert_eq!(s, c[4..].to_vec());
    let (c, s) = pair("send_bw -a --max-size 64 -n 30").await;
    assert_eq!(bw(&c).len(), 6);
    assert_eq!(bw(&s).len(), 6);
    for (a, b) in bw(&c).iter().zip(bw(&s)) {
        check_bw(a, a.size, 30);
        check_bw(&b, a.size, 30);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn duration_runs() {
    let (c, s) = pair("write_bw -s 4096 -D 1").await;
    let r = bw(&c)[0];
    assert!(r.iters > 0, "{r:?}");
    check_bw(&r, 4096, r.iters);
    assert_eq!(c, s);
    let (c, s) = pair("send_bw -s 4096 -D 1").await;
    // The server counts what it received: every Send the client made.
    assert_eq!(bw(&c)[0].iters, bw(&s)[0].iters);
    let (c, s) = pair("write_lat -D 1").await;
    let r = lat(&c)[0];
    assert!(r.iters > 2, "{r:?}");
    check_lat(&r, 2, r.iters);
    assert!(lat(&s)[0].iters > 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_qps() {
    // The line counts every QP's iterations, -n times -q, as perftest's does.
    let (c, s) = pair("write_bw -q 2 -s 4096 -n 50").await;
    check_bw(&bw(&c)[0], 4096, 100);
    assert_eq!(c, s);
    let (c, s) = pair("send_bw -q 2 -s 2048 -n 700").await;
    check_bw(&bw(&c)[0], 2048, 1400);
    check_bw(&bw(&s)[0], 2048, 1400);
    let (c, _) = pair("read_bw -q 2 -s 2048 -n 50").await;
    let r = bw(&c)[0];
    check_bw(&r, 2048, 100);
}

/// `text` is `want` (serde_json's reader may be one unit in the last place off).
fn close(text: String, want: f64) -> bool {
    let got: f64 = text.parse().unwrap();
    (got - want).abs() <= want.abs() * 1e-12
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_lines_parse_back() {
    for (args, kind) in [
        ("write_bw -s 4096 -n 20 --json", "bw"),
        ("send_lat -n 20 --json", "lat"),
    ] {
        let (c, _) = pair(args).await;
        let p = Printer::new(&opts(args));
        let line = p.line_text(&c[0]);
        let v: serde_json::Value =
            serde_json::from_str(&line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"));
        let get = |k: &str| match &v[k] {
            serde_json::Value::String(s) => s.clone(),
            serde_json::Value::Null => panic!("{k} missing in {line}"),
            other => other.to_string(),
        };
        assert_eq!(get("test"), args.split(' ').next().unwrap());
        assert_eq!(get("iterations"), "20");
        match (kind, &c[0]) {
            ("bw", Outcome::Bw(r)) => {
                assert_eq!(get("bytes"), "4096");
                assert_eq!(get("unit"), "MB/sec");
                assert!(close(get("bw_avg"), r.bw_avg), "{line}");
                assert!(close(get("bw_peak"), r.bw_peak), "{line}");
            }
            ("lat", Outcome::Lat(r)) => {
                assert_eq!(get("bytes"), "2");
                assert_eq!(get("unit"), "usec");
                assert!(close(get("t_typical"), r.stats.typical), "{line}");
                assert!(close(get("p99_9"), r.stats.p999), "{line}");
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(Test::ALL.len(), 8);
}

/// `-b`: both sides run and print the same sum of both reports (a side that did not
/// add the peer's report would print a different line), for every size of `-a`, and
/// with `-D`, where each side prints its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bidirectional_runs() {
    for test in ["write_bw", "read_bw", "send_bw"] {
        let (c, s) = pair(&format!("{test} -b -s 4096 -n 50")).await;
        check_bw(&bw(&c)[0], 4096, 50);
        assert_eq!(c, s, "{test} -b: both sides print the sum");
        let (c, s) = pair(&format!("{test} -b -a --max-size 32 -n 10 -q 2")).await;
        let sizes: Vec<u64> = bw(&c).iter().map(|r| r.size).collect();
        assert_eq!(sizes, vec![2, 4, 8, 16, 32], "{test}");
        assert_eq!(c, s, "{test} -b -a");
    }
    let (c, s) = pair("send_bw -b -s 4096 -D 1").await;
    assert!(bw(&c)[0].iters > 0 && bw(&s)[0].iters > 0, "{c:?} {s:?}");
    // The sum on both sides; the iterations are each side's own.
    let (c, s) = pair("write_bw -b -s 4096 -D 1").await;
    let (c, s) = (bw(&c)[0], bw(&s)[0]);
    assert_eq!((c.bw_avg, c.msg_rate), (s.bw_avg, s.msg_rate));
}

/// `atomic_bw` and `atomic_lat` with both of `-A`'s Atomics, and `atomic_bw -b`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn atomic_tests() {
    for op in ["FETCH_AND_ADD", "CMP_AND_SWAP"] {
        let (c, s) = pair(&format!("atomic_bw -A {op} -n 300")).await;
        check_bw(&bw(&c)[0], 8, 300);
        assert_eq!(c, s, "the passive server prints the client's report");
        let (c, _) = pair(&format!("atomic_lat -A {op} -n 100")).await;
        check_lat(&lat(&c)[0], 8, 100);
    }
    let (c, s) = pair("atomic_bw -b -n 100").await;
    assert_eq!(c, s);
}

/// `--bytes`: `write_bw`'s Writes carry owned `Bytes` (slices of one copy of the buffer),
/// so none of their octets goes from the registered buffer in place, as every one of a
/// Write from the buffer does (segments of 4 KiB and more); and they land the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn write_bw_with_bytes_sends_owned_payloads() {
    use std::time::Instant;

    use verbs::{Access, DeviceConfig, QpConfig, RemoteBuf};

    use super::bw::{self, Limits};
    use super::opts::AtomicOp;

    const SIZE: usize = 8192;
    let dev = Device::open(DeviceConfig::default().embedded()).unwrap();
    let (spd, cpd) = (dev.alloc_pd().unwrap(), dev.alloc_pd().unwrap());
    let sink = spd
        .alloc_mr(
            4 * SIZE,
            Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ,
        )
        .unwrap();
    let (scq, ccq) = (dev.create_cq(64), dev.create_cq(64));
    let listener = dev
        .listen(SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 0))
        .await
        .unwrap();
    let (addr, advert) = (listener.local_addr(), sink.remote().encode());
    let accepting = tokio::spawn(async move {
        let inc = listener.accept().await.unwrap();
        inc.accept(&spd, QpConfig::new(&scq), &advert)
            .await
            .unwrap()
    });
    let conn = dev
        .connect(&cpd, addr, QpConfig::new(&ccq), b"")
        .await
        .unwrap();
    let dst = RemoteBuf::decode(&conn.private_data).unwrap();
    let _server = accepting.await.unwrap();
    let pattern: Vec<u8> = (0..4 * SIZE).map(|i| (i * 7) as u8).collect();
    let buf = cpd.register(pattern.clone(), Access::LOCAL_WRITE).unwrap();
    let probe = cpd.alloc_mr(1, Access::LOCAL_WRITE).unwrap();
    let mut in_place = Vec::new();
    for owned in [None, Some(bytes::Bytes::from(pattern.clone()))] {
        let before = conn.qp.stats().traffic.bytes_sent_in_place;
        let lim = Limits {
            depth: 4,
            iters: 16,
            deadline: None,
            timeout: Duration::from_secs(10),
            epoch: Instant::now(),
        };
        let run = bw::rdma(
            (Test::WriteBw, AtomicOp::FetchAdd),
            lim,
            None,
            conn.qp.clone(),
            ccq.clone(),
            (buf.clone(), owned),
            dst,
            SIZE,
            4 * SIZE,
        );
        assert_eq!(run.await.unwrap().completed.len(), 16);
        in_place.push(conn.qp.stats().traffic.bytes_sent_in_place - before);
        // A Write completes once the socket took it; a Read after it returns once it is
        // placed (RDMA ordering).
        conn.qp.read(dst.slice(0, 1), &probe).await.unwrap();
        assert!(
            sink.read(..).unwrap() == pattern,
            "the Writes landed as the buffer"
        );
    }
    assert_eq!(
        in_place,
        [16 * SIZE as u64, 0],
        "from the buffer, then owned"
    );
}
