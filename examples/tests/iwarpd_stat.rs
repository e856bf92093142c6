//! `iwarpd stat` on a real daemon with both services busy: its totals agree with the
//! metrics endpoint's for the local applications and the built-in service alike, and
//! `--qps` lists every queue pair with its owner, as `rdma res show qp` does.

mod common;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Child, ChildStdout};
use std::time::{Duration, Instant};

use common::*;

/// The metrics endpoint's address, from the daemon's log.
fn metrics_addr(d: &Iwarpd) -> String {
    let start = Instant::now();
    loop {
        let log = d.log();
        if let Some(at) = log.find("http://") {
            let rest = &log[at + "http://".len()..];
            return rest[..rest.find("/metrics").expect("the metrics URL")].to_owned();
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "no metrics endpoint: {log}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Every sample of a scrape: `name{labels}` (labels sorted) to its value.
fn scrape(addr: &str) -> BTreeMap<String, u64> {
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    write!(s, "GET /metrics HTTP/1.1\r\nHost: {addr}\r\n\r\n").unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).unwrap();
    let body = text.split_once("\r\n\r\n").expect("an HTTP answer").1;
    body.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .filter_map(|l| {
            let (key, value) = l.rsplit_once(' ')?;
            let key = match key.split_once('{') {
                Some((name, labels)) => {
                    let mut labels: Vec<&str> = labels.trim_end_matches('}').split(',').collect();
                    labels.sort_unstable();
                    format!("{name}{{{}}}", labels.join(","))
                }
                None => key.to_owned(),
            };
            Some((key, value.parse().ok()?))
        })
        .collect()
}

/// The metric a key of `iwarpd stat --json` is shown as, for service `service`.
fn metric_of(path: &[&str], service: &str) -> String {
    let s = format!("service=\"{service}\"");
    match path {
        ["octets_sent", op] => format!("iwarpd_payload_sent_octets_total{{opcode=\"{op}\",{s}}}"),
        ["octets_received", op] => {
            format!("iwarpd_payload_received_octets_total{{opcode=\"{op}\",{s}}}")
        }
        ["push", "discards", r] => format!("iwarpd_push_discards_total{{reason=\"{r}\",{s}}}"),
        ["push", "executed"] => format!("iwarpd_push_executed_total{{{s}}}"),
        ["push", "sq_executed"] => format!("iwarpd_sq_executed_total{{{s}}}"),
        ["queue_pairs"] => format!("iwarpd_queue_pairs{{{s}}}"),
        ["clients"] => format!("iwarpd_applications{{{s}}}"),
        ["bytes_placed"] => format!("iwarpd_placed_octets_total{{{s}}}"),
        [name] => format!("iwarpd_{name}_total{{{s}}}"),
        other => panic!("a counter iwarpd stat has and the test does not know: {other:?}"),
    }
}

/// Every number of a `stat --json` object, by its path of keys (`services` left out).
fn numbers<'a>(
    v: &'a serde_json::Value,
    path: &mut Vec<&'a str>,
    out: &mut Vec<(Vec<&'a str>, u64)>,
) {
    match v {
        serde_json::Value::Object(m) => {
            for (k, v) in m {
                if path.is_empty() && k == "services" {
                    continue;
                }
                path.push(k);
                numbers(v, path, out);
                path.pop();
            }
        }
        serde_json::Value::Number(n) => out.push((path.clone(), n.as_u64().unwrap())),
        other => panic!("{path:?}: {other}"),
    }
}

#[test]
fn stat_shows_what_the_metrics_endpoint_shows_for_both_services() {
    let d = Iwarpd::with("stat-metrics")
        .args(&["--metrics", "127.0.0.1:0"])
        .log("info")
        .start();
    let metrics = metrics_addr(&d);
    iwarpd(&["check", &d.addr, "--count", "8", "--size", "64K"]);
    rping_through(d.sock(), "10");

    let stat: serde_json::Value =
        serde_json::from_str(&iwarpd(&["stat", "--json", "--control", d.sock()])).unwrap();
    let scraped = scrape(&metrics);
    let built_in = &stat["services"]["remote_memory"];
    assert!(
        built_in["connections"].as_u64() == Some(1),
        "the built-in service's check is counted: {stat}"
    );
    assert!(
        stat["connections"].as_u64() >= Some(1),
        "the rping client: {stat}"
    );
    for (service, obj) in [("local", &stat), ("remote_memory", built_in)] {
        let mut all = Vec::new();
        numbers(obj, &mut Vec::new(), &mut all);
        assert!(all.len() > 40, "{service}: {all:?}");
        for (path, value) in all {
            let metric = metric_of(&path, service);
            assert_eq!(
                scraped.get(&metric),
                Some(&value),
                "{service} {path:?} is {value} in iwarpd stat; {metric} in the scrape"
            );
        }
    }
    let table = iwarpd(&["stat", "--control", d.sock()]);
    assert!(
        table.contains("built-in remote-memory service (service remote_memory)"),
        "{table}"
    );
}

/// A running `qp-hold`: it lets go of its queue pairs when its standard input closes.
struct Holder {
    child: Child,
    out: BufReader<ChildStdout>,
}

impl Holder {
    fn start(args: &[&str]) -> Self {
        let mut child = spawn(QP_HOLD, args);
        let out = BufReader::new(child.stdout.take().unwrap());
        Self { child, out }
    }

    /// Its next line that starts with `prefix` (`listening ADDR`, `ready N`).
    fn line(&mut self, prefix: &str) -> String {
        loop {
            let mut line = String::new();
            assert!(self.out.read_line(&mut line).unwrap() > 0, "qp-hold ended");
            if line.starts_with(prefix) {
                return line.trim().to_owned();
            }
        }
    }

    /// Lets go, and checks it ended well.
    fn end(mut self) {
        drop(self.child.stdin.take());
        ok(&finish(self.child, Duration::from_secs(20)), "qp-hold");
    }
}

#[test]
fn stat_qps_lists_every_queue_pair_with_its_owner() {
    let d = Iwarpd::start("stat-qps", &[]);
    let sock = d.sock();
    // Two local applications, connected to each other through the daemon: three queue
    // pairs each.
    let mut server = Holder::start(&["--daemon", sock, "--listen", "127.0.0.1:0", "-n", "3"]);
    let listening = server.line("listening ");
    let listening = listening.strip_prefix("listening ").unwrap().to_owned();
    let mut client = Holder::start(&["--daemon", sock, "--connect", &listening, "-n", "3"]);
    client.line("ready");
    server.line("ready");
    // Two connections to the built-in service, from an embedded application.
    let mut outside = Holder::start(&["--connect", &d.addr, "-n", "2"]);
    outside.line("ready");
    let (server_pid, client_pid) = (server.child.id(), client.child.id());
    let uid = rustix_uid();

    let qps: serde_json::Value =
        serde_json::from_str(&iwarpd(&["stat", "--qps", "--json", "--control", sock])).unwrap();
    let qps = qps.as_array().expect("an array");
    assert_eq!(qps.len(), 8, "{qps:?}");
    let of = |service: &str, pid: Option<u32>| {
        qps.iter()
            .filter(|q| q["service"] == service && q["pid"].as_u64() == pid.map(u64::from))
            .count()
    };
    assert_eq!(of("local", Some(server_pid)), 3, "{qps:?}");
    assert_eq!(of("local", Some(client_pid)), 3, "{qps:?}");
    assert_eq!(of("remote_memory", None), 2, "{qps:?}");
    for q in qps {
        assert_eq!(q["state"], "RTS", "{q}");
        if q["service"] == "local" {
            assert_eq!(q["uid"].as_u64(), Some(uid), "{q}");
            // Each end's peer is the other end, also listed.
            let peer = &q["peer"];
            assert!(qps.iter().any(|o| o["local"] == *peer), "{q}");
        } else {
            assert_eq!(q["local"], d.addr.as_str(), "{q}");
            assert!(q["uid"].is_null(), "{q}");
        }
        assert!(q["fpdus_sent"].as_u64().is_some(), "{q}");
    }
    let mut nums: Vec<u64> = qps.iter().map(|q| q["qpn"].as_u64().unwrap()).collect();
    nums.dedup();
    assert_eq!(nums.len(), 8, "in increasing order, each once: {nums:?}");

    let table = iwarpd(&["stat", "--qps", "--control", sock]);
    let lines: Vec<&str> = table.lines().collect();
    assert!(lines[0].ends_with(": 8 queue pairs"), "{table}");
    assert!(
        lines[1].starts_with("QPN") && lines[1].contains("PID"),
        "{table}"
    );
    assert_eq!(lines.len(), 10, "{table}");
    assert!(
        table.contains(&format!(" {client_pid} ")),
        "the owner's pid: {table}"
    );
    for h in [server, client, outside] {
        h.end();
    }
}

/// This process's user id.
fn rustix_uid() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .expect("Uid in /proc/self/status")
}
