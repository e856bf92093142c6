//! Daemon mode with real processes: an `iwarpd` serving local applications on a control
//! socket, and `iwperf` / `iwarp-rping` processes attached to it with `--daemon`.

mod common;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::*;

#[test]
fn iwperf_pairs_and_rping_run_through_one_daemon() {
    let d = Iwarpd::start("tools", &[]);
    let sock = d.sock.to_str().unwrap();
    let mut pairs = Vec::new();
    // send_bw's server posts 512 receives of 64 KiB: deeper than iwarpd's default.
    // `--bytes`: payloads as owned Bytes, through the staging area, several at once.
    for (test, n, size, bytes) in [
        ("write_bw", "500", "65536", false),
        ("send_lat", "5000", "2", false),
        ("send_bw", "1000", "65536", false),
        ("write_bw", "300", "200000", true),
    ] {
        let p = port();
        let common = [test, "--daemon", sock, "-p", &p, "-n", n, "-s", size];
        let common = [&common[..], if bytes { &["--bytes"] } else { &[] }].concat();
        let server = spawn(IWPERF, &common);
        std::thread::sleep(Duration::from_millis(300));
        let client = spawn(
            IWPERF,
            &[&common[..], &[CONNECT_WAIT, "10", "127.0.0.1"]].concat(),
        );
        pairs.push((test, server, client));
    }
    for (test, server, client) in pairs {
        let c = finish(client, Duration::from_secs(60));
        ok(&c, test);
        let report = String::from_utf8_lossy(&c.stdout);
        assert!(
            report.contains("#bytes"),
            "{test} printed its table: {report}"
        );
        ok(&finish(server, Duration::from_secs(30)), test);
    }

    rping(sock, "20");

    // `iwarpd stat` reads what went through: both ends of every connection in this one
    // daemon, 500 Writes of 64 KiB counted as RDMA Write octets, the small Sends mostly
    // pushed, and nobody attached any more.
    let j = stat(sock, true);
    let num = |key: &str| counter(&j, key);
    assert_eq!(num("clients"), 0, "{j}");
    let connections = num("connections");
    assert!(connections >= 8 && connections % 2 == 0, "{j}");
    assert_eq!(num("connections_closed"), connections, "{j}");
    assert!(
        num("octets_sent.write") >= 500 * 65536 + 300 * 200_000,
        "{j}"
    );
    // send_lat sends 2 octets each way, 5000 times; send_bw 1000 times 64 KiB.
    assert!(
        num("octets_sent.send") >= 2 * 5000 * 2 + 1000 * 65536,
        "{j}"
    );
    assert!(
        num("push.executed") > 1000,
        "the small Sends went through the push path: {j}"
    );
    assert_eq!(num("terminates_received"), 0, "{j}");
    let table = stat(sock, false);
    assert!(
        table.contains(&format!("connections            {connections} opened"))
            && table.contains("push path")
            && table.contains("write"),
        "{table}"
    );
}

/// An rping server and a client (`-C count -V`) through the daemon at `sock`; the client
/// must succeed.
fn rping(sock: &str, count: &str) {
    let p = port();
    let mut server = spawn(
        RPING,
        &["-s", "-a", "127.0.0.1", "-p", &p, "--daemon", sock],
    );
    std::thread::sleep(Duration::from_millis(300));
    let client = rping_client(sock, &p, &[count, "-V"]);
    ok(&finish(client, Duration::from_secs(60)), "rping client");
    let _ = server.kill();
    let _ = server.wait();
}

/// IPv6 through iwarpd: an iwperf server with no address listens through the daemon on
/// `[::]` and takes an iwperf client at `::1` (also through the daemon), and an rping
/// pair runs over `::1` the same way. Skipped on a host without IPv6.
#[test]
fn ipv6_runs_through_the_daemon() {
    if std::net::TcpListener::bind("[::1]:0").is_err() {
        println!("SKIPPED: this host has no IPv6 loopback");
        return;
    }
    let d = Iwarpd::start("ipv6", &[]);
    let sock = d.sock.to_str().unwrap();
    let p = port();
    let common = [
        "write_bw", "--daemon", sock, "-p", &p, "-n", "200", "-s", "4096",
    ];
    let server = spawn(IWPERF, &common);
    let mut args = common.to_vec();
    args.extend([CONNECT_WAIT, "10", "::1"]);
    let client = finish(spawn(IWPERF, &args), Duration::from_secs(60));
    ok(&client, "iwperf client at ::1");
    let server = finish(server, Duration::from_secs(60));
    ok(&server, "iwperf server");
    let text = String::from_utf8_lossy(&server.stdout);
    assert!(
        text.contains("listening on [::]:") && text.contains("peer [::1]:"),
        "{text}"
    );
    let p = port();
    let mut server = spawn(RPING, &["-s", "-p", &p, "--daemon", sock]);
    std::thread::sleep(Duration::from_millis(300));
    let client = spawn(
        RPING,
        &[
            "-c", "-a", "::1", "-p", &p, "--daemon", sock, "-C", "3", "-V",
        ],
    );
    let out = finish(client, Duration::from_secs(60));
    ok(&out, "rping client at ::1");
    let _ = server.kill();
    let _ = server.wait();
}

/// Through an iwarpd the daemon's extensions apply, not iwarp-rping's (none by default):
/// with the daemon's default (all), rping says its traffic is not standard and how to
/// make it so; with `--extensions none` on the daemon it says nothing.
#[test]
fn rping_through_a_daemon_with_extensions_says_how_to_turn_them_off() {
    for (daemon_flags, noticed) in [(&[][..], true), (&["--extensions", "none"][..], false)] {
        let d = Iwarpd::start_on(None, "127.0.0.1", "ext", daemon_flags);
        let sock = d.sock.to_str().unwrap();
        let p = port();
        let mut server = spawn(
            RPING,
            &["-s", "-a", "127.0.0.1", "-p", &p, "--daemon", sock],
        );
        std::thread::sleep(Duration::from_millis(300));
        let out = finish(
            rping_client(sock, &p, &["2", "-V"]),
            Duration::from_secs(60),
        );
        ok(&out, "rping client");
        let _ = server.kill();
        let _ = server.wait();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(
            err.contains("start iwarpd with --extensions none for standard iWARP traffic"),
            noticed,
            "daemon {daemon_flags:?}: {err}"
        );
    }
}

/// An rping client through the daemon at `sock` to 127.0.0.1:`port`: `-C` and then
/// `extra` (the count first).
fn rping_client(sock: &str, port: &str, extra: &[&str]) -> Child {
    let mut args = vec!["-c", "-a", "127.0.0.1", "-p", port, "--daemon", sock, "-C"];
    args.extend_from_slice(extra);
    spawn(RPING, &args)
}

/// A handover socket path of this test run.
fn handover_path(name: &str) -> String {
    let p = std::env::temp_dir().join(format!("iwarpd-{}-{name}.handover", std::process::id()));
    p.to_str().unwrap().to_owned()
}

/// Waits (at most 20 s) until the daemon at `sock` counts at least `n` of `key`.
fn wait_counter(sock: &str, key: &str, n: u64) {
    let start = Instant::now();
    while counter(&stat(sock, true), key) < n {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "the daemon at {sock} never counted {n} {key}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Ends an `iwarp-rping -C 0 -V` client with Ctrl-C and checks its summary: it ran, and
/// every ping it made was verified.
fn interrupt_rping(client: Child, what: &str) {
    let pid = client.id().to_string();
    let sent = Command::new("kill").args(["-INT", &pid]).status().unwrap();
    assert!(sent.success());
    let out = finish(client, Duration::from_secs(30));
    ok(&out, what);
    let line = String::from_utf8_lossy(&out.stdout).into_owned();
    let (pings, verified) = line
        .trim()
        .strip_prefix("iwarp-rping: client done: ")
        .and_then(|r| r.strip_suffix(" verified"))
        .and_then(|r| r.split_once(", "))
        .and_then(|(p, v)| {
            Some((
                p.strip_suffix(" pings")
                    .or_else(|| p.strip_suffix(" ping"))?,
                v,
            ))
        })
        .unwrap_or_else(|| panic!("{what}: {line}"));
    assert_eq!(pings, verified, "{what}: {line}");
    assert!(pings.parse::<u64>().unwrap() > 0, "{what}: {line}");
}

/// Waits until a daemon that handed over exits by itself (at most 20 s), successfully.
fn exits_by_itself(d: &mut Iwarpd, what: &str) {
    let start = Instant::now();
    let status = loop {
        if let Some(st) = d.child.try_wait().unwrap() {
            break st;
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "{what}: the daemon before did not exit"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(status.success(), "{what}: {status}");
}

#[test]
fn a_client_killed_with_sigkill_ends_its_connection_and_frees_its_memory() {
    let d = Iwarpd::start("sigkill", &[]);
    let sock = d.sock.to_str().unwrap();
    let before = d.mapped_regions();
    let p = port();
    let server = spawn(
        IWPERF,
        &["write_bw", "--daemon", sock, "-p", &p, "-D", "30"],
    );
    std::thread::sleep(Duration::from_millis(300));
    let mut client = spawn(
        IWPERF,
        &[
            "write_bw",
            "--daemon",
            sock,
            "-p",
            &p,
            "-D",
            "30",
            CONNECT_WAIT,
            "10",
            "127.0.0.1",
        ],
    );
    // Let the test start moving data, then kill the client outright.
    let start = Instant::now();
    while d.mapped_regions() < before + 2 {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "the clients never registered memory"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_secs(1));
    client.kill().unwrap();
    client.wait().unwrap();
    // The server's queue pairs end (the daemon closed the killed client's side), so the
    // server fails long before its 30 s run would have ended.
    let out = finish(server, Duration::from_secs(20));
    assert!(!out.status.success(), "the server noticed its peer is gone");
    // It names why, as embedded: the peer left (not just a flushed receive).
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("the peer ended the test early or exited")
            || stderr.contains("the peer exited"),
        "{stderr}"
    );
    assert!(!stderr.contains("Flushed"), "{stderr}");
    // And every region of both processes is released by the daemon.
    let start = Instant::now();
    while d.mapped_regions() > before {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "iwarpd still maps {} regions of dead clients",
            d.mapped_regions() - before
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_daemon_that_goes_away_is_named_in_the_error() {
    let sock = std::env::temp_dir().join(format!("iwarpd-{}-absent.sock", std::process::id()));
    let out = finish(
        spawn(
            IWPERF,
            &["write_bw", "--daemon", sock.to_str().unwrap(), "127.0.0.1"],
        ),
        Duration::from_secs(20),
    );
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(sock.to_str().unwrap()), "{err}");
    assert!(err.contains("iwarpd"), "{err}");
    // The same binary without the flag, told by IWARP_DEVICE: the same error (it does not
    // quietly run the engine in its own process).
    let out = finish(
        Command::new(IWPERF)
            .args(["write_bw", "127.0.0.1", "-p", &port()])
            .env("IWARP_DEVICE", format!("unix:{}", sock.display()))
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
        Duration::from_secs(20),
    );
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(sock.to_str().unwrap()),
        "IWARP_DEVICE is read: {err}"
    );

    // A daemon killed under a running client: the client's error names the socket.
    let d = Iwarpd::start("restart", &[]);
    let sock = d.sock.clone();
    let p = port();
    let server = spawn(
        IWPERF,
        &[
            "write_bw",
            "--daemon",
            sock.to_str().unwrap(),
            "-p",
            &p,
            "-D",
            "30",
        ],
    );
    std::thread::sleep(Duration::from_millis(500));
    drop(d);
    let out = finish(server, Duration::from_secs(20));
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(sock.to_str().unwrap()), "{err}");
}

/// `--local-threads` sets how many shards serve applications; clients spread over them
/// in turn, and each shard carries its clients' connections.
#[test]
fn local_threads_sets_the_shards_that_serve_applications() {
    let d = Iwarpd::start_on(None, "127.0.0.1", "shards", &["--local-threads", "3"]);
    let shards: Vec<_> = d
        .threads()
        .into_iter()
        .filter(|n| n.starts_with("iwarpd-local-"))
        .collect();
    assert_eq!(
        shards,
        ["iwarpd-local-0", "iwarpd-local-1", "iwarpd-local-2"]
    );
    // Two rping pairs at once: four clients, on shards 0, 1, 2 and 0 again.
    let sock = d.sock.to_str().unwrap().to_owned();
    let pairs: Vec<_> = (0..2)
        .map(|_| {
            let sock = sock.clone();
            std::thread::spawn(move || rping(&sock, "50"))
        })
        .collect();
    for p in pairs {
        p.join().unwrap();
    }
    assert_eq!(counter(&stat(&sock, true), "connections"), 4);
}

#[test]
fn a_live_control_socket_is_kept_and_a_stale_one_replaced() {
    let d = Iwarpd::start("stale", &[]);
    let sock = d.sock.to_str().unwrap().to_owned();
    // A second daemon told to use the same socket refuses, naming it.
    let out = finish(
        Command::new(iwarpd_bin())
            .args(["--listen", "127.0.0.1:0", "--control", &sock])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
        Duration::from_secs(20),
    );
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&sock) && err.contains("another iwarpd"),
        "{err}"
    );
    // Killed outright, the daemon leaves its socket file; the next one takes it over,
    // and an application attaches.
    let mut d = d;
    d.child.kill().unwrap();
    d.child.wait().unwrap();
    assert!(Path::new(&sock).exists(), "a stale socket file");
    let d2 = Iwarpd::start("stale", &[]);
    rping(&sock, "3");
    drop(d2);
}

/// Between two hosts (network namespaces joined by a veth, as root; skipped elsewhere):
/// an iwarpd on each, two applications on each side attached through their host's
/// daemon, and an application with its engine embedded talking to one through a daemon,
/// all at once, every payload verified (rping -V checks each ping's pattern).
#[test]
fn two_daemons_across_a_veth_serve_two_applications_each_and_an_embedded_one() {
    let Some(hosts) = tests::netns::two_hosts_or_skip() else {
        return;
    };
    let (a, b) = (hosts.a(), hosts.b());
    let (a_addr, b_addr) = (a.addr().to_string(), b.addr().to_string());
    let da = Iwarpd::start_on(Some(a.name()), &a_addr, "veth-a", &[]);
    let db = Iwarpd::start_on(Some(b.name()), &b_addr, "veth-b", &[]);
    let (sa, sb) = (da.sock.to_str().unwrap(), db.sock.to_str().unwrap());
    let mut servers = Vec::new();
    let mut clients = Vec::new();
    // (port, the server through daemon a, the client through daemon b): two pairs
    // daemon to daemon, then an embedded server and an embedded client.
    let pairs = [
        ("7001", true, true),
        ("7002", true, true),
        ("7003", false, true),
        ("7004", true, false),
    ];
    for (port, server_daemon, _) in pairs {
        let mut args = vec!["-s", "-a", &a_addr, "-p", port];
        if server_daemon {
            args.extend(["--daemon", sa]);
        }
        servers.push(spawn_in(Some(a.name()), RPING, &args));
    }
    std::thread::sleep(Duration::from_millis(500));
    for (port, client_daemon) in [
        ("7001", true),
        ("7002", true),
        ("7003", true),
        ("7004", false),
    ] {
        let mut args = vec![
            "-c", "-a", &a_addr, "-p", port, "-C", "300", "-S", "4000", "-V",
        ];
        if client_daemon {
            args.extend(["--daemon", sb]);
        }
        clients.push((port, spawn_in(Some(b.name()), RPING, &args)));
    }
    for (port, c) in clients {
        ok(
            &finish(c, Duration::from_secs(120)),
            &format!("rping client on port {port}"),
        );
    }
    for mut s in servers {
        let _ = s.kill();
        let _ = s.wait();
    }
    // Each daemon counted the connections of its side: three on a, three on b.
    for d in [&da, &db] {
        let j = stat(d.sock.to_str().unwrap(), true);
        assert_eq!(counter(&j, "connections"), 3, "{j}");
    }
}

/// Between two hosts (network namespaces joined by a veth, as root; skipped elsewhere):
/// the daemons on both hosts are upgraded in turn, three times each, while a verified
/// rping loop runs between an application attached on each side: both ends' sessions
/// move, the connection across the veth stays, every ping verified.
#[test]
fn daemons_on_both_hosts_upgrade_in_turn_under_a_verified_loop_across_a_veth() {
    let Some(hosts) = tests::netns::two_hosts_or_skip() else {
        return;
    };
    let (a, b) = (hosts.a(), hosts.b());
    let (a_addr, b_addr) = (a.addr().to_string(), b.addr().to_string());
    let (ha, hb) = (handover_path("veth-a"), handover_path("veth-b"));
    let mut da = Iwarpd::start_on(Some(a.name()), &a_addr, "up-a", &["--handover", &ha]);
    let mut db = Iwarpd::start_on(Some(b.name()), &b_addr, "up-b", &["--handover", &hb]);
    let (sa, sb) = (
        da.sock.to_str().unwrap().to_owned(),
        db.sock.to_str().unwrap().to_owned(),
    );
    let mut server = spawn_in(
        Some(a.name()),
        RPING,
        &["-s", "-a", &a_addr, "-p", "7011", "--daemon", &sa],
    );
    std::thread::sleep(Duration::from_millis(500));
    let mut client = spawn_in(
        Some(b.name()),
        RPING,
        &[
            "-c",
            "-a",
            &a_addr,
            "-p",
            "7011",
            "-C",
            "0",
            "-S",
            "4000",
            "-V",
            "--timeout",
            "5",
            "--daemon",
            &sb,
        ],
    );
    wait_counter(&sb, "connections", 1);
    for n in 0..6 {
        let (ns, addr, name, h, d) = if n % 2 == 0 {
            (a.name(), &a_addr, "up-a", &ha, &mut da)
        } else {
            (b.name(), &b_addr, "up-b", &hb, &mut db)
        };
        let next = Iwarpd::start_on(Some(ns), addr, name, &["--take-over", h, "--handover", h]);
        let mut before = std::mem::replace(d, next);
        exits_by_itself(&mut before, &format!("upgrade {n}"));
        let sock = d.sock.to_str().unwrap();
        assert_eq!(counter(&stat(sock, true), "clients"), 1, "upgrade {n}");
        std::thread::sleep(Duration::from_millis(200));
        assert!(
            client.try_wait().unwrap().is_none(),
            "upgrade {n}: the client ended"
        );
    }
    interrupt_rping(client, "rping client across the upgrades");
    let _ = server.kill();
    let _ = server.wait();
    for h in [ha, hb] {
        let _ = std::fs::remove_file(h);
    }
}

/// The kv example runs unchanged through the daemon, chosen by flag and by environment.
#[test]
fn kv_runs_through_the_daemon() {
    let d = Iwarpd::start("kv", &[]);
    let sock = d.sock.to_str().unwrap();
    let by_flag = finish(spawn(KV, &["--daemon", sock]), Duration::from_secs(60));
    ok(&by_flag, "kv --daemon");
    let by_env = Command::new(KV)
        .env("IWARP_DEVICE", format!("unix:{sock}"))
        .output()
        .unwrap();
    ok(&by_env, "kv with IWARP_DEVICE");
    for out in [by_flag, by_env] {
        assert!(
            String::from_utf8_lossy(&out.stdout).contains("all values read back as written"),
            "{out:?}"
        );
    }
    // Both ends of both runs' connections were the daemon's.
    let j = stat(sock, true);
    assert_eq!(counter(&j, "connections"), 4, "{j}");
}

/// `iwarpd stat` of the daemon at `sock`: its JSON or its table.
/// The README's first command, unchanged, through the daemon: Writes, Reads read back and
/// verified, ping-pongs on a shared receive queue, a graceful close on both sides.
#[test]
fn the_demo_runs_through_the_daemon() {
    let metrics = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().to_string()
    };
    let d = Iwarpd::start_on(None, "127.0.0.1", "demo", &["--metrics", &metrics]);
    let sock = d.sock.to_str().unwrap();
    let out = finish(
        spawn(DEMO, &["--total", "8M", "--pings", "300", "--daemon", sock]),
        Duration::from_secs(120),
    );
    ok(&out, "demo --daemon");
    let text = String::from_utf8_lossy(&out.stdout);
    for line in [
        "through the iwarpd at",
        "verified: all 8 MiB read back",
        "300 ping-pongs",
        "client closed gracefully, server closed gracefully (it answered 300 pings)",
    ] {
        assert!(text.contains(line), "{line:?} in {text}");
    }
    let j = stat(sock, true);
    assert_eq!(counter(&j, "connections"), 2, "{j}");
    // Both sides' pings and pongs at least (the server's from its shared receive queue).
    assert!(counter(&j, "fpdus_received") >= 600, "{j}");
    // The Prometheus endpoint says the same, while an idle scraper holds a connection.
    let _idle = std::net::TcpStream::connect(&metrics).unwrap();
    let text = scrape(&metrics, "/metrics");
    assert!(text.starts_with("HTTP/1.1 200 OK"), "{text}");
    for (name, key) in [
        ("iwarpd_connections_total", "connections"),
        ("iwarpd_fpdus_received_total", "fpdus_received"),
        ("iwarpd_fpdus_sent_total", "fpdus_sent"),
    ] {
        let line = format!("{name}{{service=\"local\"}} {}", counter(&j, key));
        assert!(text.lines().any(|l| l == line), "{line} in:\n{text}");
    }
    assert!(text.trim_end().ends_with("# EOF"), "{text}");
    assert!(scrape(&metrics, "/").starts_with("HTTP/1.1 404"));
}

/// One HTTP GET of `path` from `addr`: the whole answer.
/// An iwarpd upgrade while local applications are attached: the successor takes the
/// listening and control sockets, new applications attach to it at once, and the
/// applications attached before keep their queue pairs in the daemon before, which serves
/// them until they detach and then exits by itself.
/// A session with a hundred queue pairs (a few hundred descriptors: rings, doorbells,
/// sockets, memory files, more than one `SCM_RIGHTS` message carries) moves whole.
#[test]
fn a_session_with_a_hundred_queue_pairs_moves() {
    let handover = handover_path("many");
    let h = handover.as_str();
    let mut before = Iwarpd::start_on(None, "127.0.0.1", "many", &["--handover", h]);
    let sock = before.sock.to_str().unwrap().to_owned();
    let hold = |args: &[&str]| {
        Command::new(QP_HOLD)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let line = |c: &mut Child| {
        let mut l = String::new();
        BufReader::new(c.stdout.as_mut().unwrap())
            .read_line(&mut l)
            .unwrap();
        l
    };
    let mut listener = hold(&["--listen", "127.0.0.1:0", "-n", "100"]);
    let addr = line(&mut listener)
        .trim()
        .strip_prefix("listening ")
        .expect("qp-hold's address")
        .to_owned();
    let mut attached = hold(&["--connect", &addr, "-n", "100", "--daemon", &sock]);
    assert_eq!(line(&mut attached).trim(), "ready 100");
    let _after = Iwarpd::start_on(
        None,
        "127.0.0.1",
        "many",
        &["--take-over", h, "--handover", h],
    );
    exits_by_itself(&mut before, "the upgrade");
    let j = stat(&sock, true);
    assert_eq!(counter(&j, "clients"), 1, "{j}");
    assert_eq!(counter(&j, "queue_pairs"), 100, "{j}");
    // Both hold their queue pairs until told to stop, then leave cleanly.
    for mut c in [attached, listener] {
        drop(c.stdin.take());
        ok(&finish(c, Duration::from_secs(30)), "qp-hold");
    }
    let _ = std::fs::remove_file(&handover);
}

#[test]
fn a_session_the_successor_does_not_take_resumes_in_the_daemon_before() {
    let handover = handover_path("nak");
    let h = handover.as_str();
    let mut before = Iwarpd::start_on(None, "127.0.0.1", "nak", &["--handover", h]);
    let sock = before.sock.to_str().unwrap().to_owned();
    // A verified rping loop with both ends attached; any step taking over 2 s ends a
    // client with an error.
    let p = port();
    let mut server = spawn(
        RPING,
        &["-s", "-a", "127.0.0.1", "-p", &p, "--daemon", &sock],
    );
    std::thread::sleep(Duration::from_millis(300));
    let mut client = rping_client(&sock, &p, &["0", "-V", "--timeout", "2"]);
    wait_counter(&sock, "connections", 2);
    // A successor that serves no local applications: it refuses both sessions, which
    // resume in the daemon before where they stopped.
    let after = Iwarpd::start_on(
        None,
        "127.0.0.1",
        "nak",
        &["--take-over", h, "--control", "off"],
    );
    std::thread::sleep(Duration::from_secs(3));
    assert!(
        before.child.try_wait().unwrap().is_none(),
        "the daemon before serves the sessions that stayed"
    );
    assert!(client.try_wait().unwrap().is_none(), "the pings go on");
    interrupt_rping(client, "rping client across a refused handover");
    // Once its applications are gone, the daemon before exits by itself.
    let _ = server.kill();
    let _ = server.wait();
    exits_by_itself(&mut before, "once its applications left");
    drop(after);
    let _ = std::fs::remove_file(&handover);
}

#[test]
fn an_upgrade_moves_attached_applications_with_their_connections() {
    let handover = handover_path("up");
    let h = handover.as_str();
    let mut before = Iwarpd::start_on(None, "127.0.0.1", "upgrade", &["--handover", h]);
    let sock = before.sock.to_str().unwrap().to_owned();
    // Two verified rping loops (Send, RDMA Read and RDMA Write, every ping's data checked):
    // one whose server is attached and whose client is an embedded peer that must notice
    // nothing, one with both ends attached.
    let (p1, p2) = (port(), port());
    let rping_server = |p: &str| {
        spawn(
            RPING,
            &["-s", "-a", "127.0.0.1", "-p", p, "--daemon", &sock],
        )
    };
    let servers = [rping_server(&p1), rping_server(&p2)];
    std::thread::sleep(Duration::from_millis(300));
    let embedded = spawn(
        RPING,
        &[
            "-c",
            "-a",
            "127.0.0.1",
            "-p",
            &p1,
            "-C",
            "0",
            "-V",
            "-S",
            "4096",
        ],
    );
    let attached = rping_client(&sock, &p2, &["0", "-V", "-S", "4096"]);
    let mut clients = [embedded, attached];
    let flowing = |sock: &str| {
        // The pings go on in the daemon that serves them now.
        let at = |s: &str| counter(&stat(s, true), "bytes_placed");
        let (first, start) = (at(sock), Instant::now());
        while at(sock) <= first {
            assert!(
                start.elapsed() < Duration::from_secs(20),
                "no pings in the daemon at {sock}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    };
    wait_counter(&sock, "clients", 3);
    flowing(&sock);

    // Ten upgrades, one after another, while the pings run.
    for n in 0..10 {
        let after = Iwarpd::start_on(
            None,
            "127.0.0.1",
            "upgrade",
            &["--take-over", h, "--handover", h],
        );
        // Everything moved: the daemon before has nothing left, and exits by itself.
        exits_by_itself(&mut before, &format!("upgrade {n}"));
        let j = stat(&sock, true);
        assert_eq!(counter(&j, "clients"), 3, "upgrade {n}: {j}");
        flowing(&sock);
        for c in &mut clients {
            assert!(
                c.try_wait().unwrap().is_none(),
                "upgrade {n}: an rping client ended"
            );
        }
        before = after;
    }

    // Interrupted, each client ends its run with every ping verified.
    for c in clients {
        interrupt_rping(c, "rping client across the upgrades");
    }
    for mut s in servers {
        let _ = s.kill();
        let _ = s.wait();
    }
    // New applications attach to the last successor.
    rping(&sock, "5");
    drop(before);
    let _ = std::fs::remove_file(&handover);
}

/// A connect the daemon makes for an application and TCP refuses reads as it does
/// embedded: nothing is listening there, in the user's words (not "invalid request").
#[test]
fn a_refused_connect_through_the_daemon_reads_as_it_does_embedded() {
    let d = Iwarpd::start("refused", &[]);
    let sock = d.sock.to_str().unwrap();
    let p = port();
    let out = finish(rping_client(sock, &p, &["1"]), Duration::from_secs(20));
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!(
            "connecting to 127.0.0.1:{p}: nothing is listening"
        )) && !err.contains("invalid"),
        "{err}"
    );
}

fn scrape(addr: &str, path: &str) -> String {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    write!(s, "GET {path} HTTP/1.1\r\nHost: {addr}\r\n\r\n").unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    out
}

fn stat(sock: &str, json: bool) -> String {
    let mut args = vec!["stat", "--control", sock];
    if json {
        args.push("--json");
    }
    let out = Command::new(iwarpd_bin()).args(&args).output().unwrap();
    ok(&out, "iwarpd stat");
    String::from_utf8(out.stdout).unwrap()
}

/// The counter at `path` (`connections`, `octets_sent.write`, `push.executed`) in
/// `iwarpd stat --json`'s output.
fn counter(json: &str, path: &str) -> u64 {
    let v: serde_json::Value = serde_json::from_str(json).expect("iwarpd stat --json is JSON");
    path.split('.')
        .fold(&v, |v, key| &v[key])
        .as_u64()
        .unwrap_or_else(|| panic!("{path} in {json}"))
}

/// `iwarpd --max-queue-depth` bounds what an application's queue pair may ask for:
/// `iwarp-devinfo` reports it as `max_qp_wr`, and an `iwperf` client (which asks for
/// 1024) is refused in words that name the setting.
#[test]
fn max_queue_depth_is_reported_and_enforced() {
    let d = Iwarpd::start_on(None, "127.0.0.1", "depth", &["--max-queue-depth", "512"]);
    let sock = d.sock.to_str().unwrap();
    let info = finish(
        spawn(
            env!("CARGO_BIN_EXE_iwarp-devinfo"),
            &["-v", "--daemon", sock],
        ),
        Duration::from_secs(10),
    );
    ok(&info, "iwarp-devinfo");
    let text = String::from_utf8_lossy(&info.stdout);
    assert!(text.contains("max_qp_wr:\t\t\t512"), "{text}");
    // Nothing needs to listen: the daemon refuses before it connects.
    let out = finish(
        spawn(
            IWPERF,
            &["write_bw", "--daemon", sock, "-p", &port(), "127.0.0.1"],
        ),
        Duration::from_secs(30),
    );
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("max_queue_depth") && err.contains("1024"),
        "{err}"
    );
}

/// An application running as an unprivileged user, attached to a root iwarpd (whose
/// socket lets it in), gets no more than it would have itself: listening on a privileged
/// port is refused by name; on another port it serves as usual.
#[test]
fn an_unprivileged_application_gets_no_privileged_port_through_iwarpd() {
    use std::os::unix::fs::MetadataExt as _;
    if std::fs::metadata("/proc/self").map_or(true, |m| m.uid() != 0) {
        println!("SKIPPED: needs root (iwarpd as root, the application as nobody)");
        return;
    }
    use std::os::unix::fs::PermissionsExt as _;
    let d = Iwarpd::start("privport", &[]);
    std::fs::set_permissions(&d.sock, std::fs::Permissions::from_mode(0o666)).unwrap();
    let sock = d.sock.to_str().unwrap();
    let as_nobody = |args: &[&str]| {
        Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups", RPING])
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("setpriv")
    };
    let refused = finish(
        as_nobody(&["-s", "-a", "127.0.0.1", "-p", "81", "--daemon", sock]),
        Duration::from_secs(30),
    );
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success(), "{refused:?}");
    assert!(
        stderr.contains("port 81 is privileged") && stderr.contains("uid 65534"),
        "{stderr}"
    );
    let p = port();
    let mut server = as_nobody(&["-s", "-a", "127.0.0.1", "-p", &p, "--daemon", sock]);
    std::thread::sleep(Duration::from_millis(300));
    let client = rping_client(sock, &p, &["3", "-V"]);
    ok(&finish(client, Duration::from_secs(60)), "rping client");
    let _ = server.kill();
    let _ = server.wait();
}

/// One user cannot take every descriptor and mapping iwarpd may use: past half of them
/// it is refused by name, whichever of its applications asks, and an application of
/// another user still gets its regions. (Before, the first took all, and the second's
/// registrations failed; then the share was per application, and one user's two
/// applications took it all between them.)
#[test]
fn one_user_takes_at_most_half_of_the_daemons_descriptors() {
    use std::os::unix::fs::MetadataExt as _;
    if std::fs::metadata("/proc/self").map_or(true, |m| m.uid() != 0) {
        println!("SKIPPED: needs root (the other application runs as nobody)");
        return;
    }
    // An open-file limit of 512: iwarpd may map 256 memory files, 128 for one user.
    let d = Iwarpd::with("share").nofile(512).start();
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(&d.sock, std::fs::Permissions::from_mode(0o666)).unwrap();
    let sock = d.sock.to_str().unwrap();
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap().to_string();
    // It holds until its standard input closes: at once for a null one.
    let hold = |regions: &str, stdin: Stdio, nobody: bool| {
        let args = [
            "--connect",
            &addr,
            "-n",
            "0",
            "--regions",
            regions,
            "--daemon",
            sock,
        ];
        let mut cmd = if nobody {
            let mut c = Command::new("setpriv");
            c.args(["--reuid=65534", "--regid=65534", "--clear-groups", QP_HOLD]);
            c
        } else {
            Command::new(QP_HOLD)
        };
        cmd.args(args)
            .stdin(stdin)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let greedy = finish(hold("300", Stdio::null(), false), Duration::from_secs(60));
    let stderr = String::from_utf8_lossy(&greedy.stderr);
    assert!(!greedy.status.success(), "{greedy:?}");
    assert!(stderr.contains("half, its share"), "{stderr}");
    // The greedy one exited; one that holds most of its user's half keeps it: another
    // application of the same user is refused, one of another user registers.
    let mut first = hold("120", Stdio::piped(), false);
    let mut out = BufReader::new(first.stdout.take().unwrap());
    let mut lines = String::new();
    for _ in 0..2 {
        out.read_line(&mut lines).unwrap();
    }
    assert_eq!(lines, "ready 0\nregions 120\n");
    let same_user = finish(hold("100", Stdio::null(), false), Duration::from_secs(60));
    assert!(!same_user.status.success(), "{same_user:?}");
    assert!(
        String::from_utf8_lossy(&same_user.stderr).contains("half, its share"),
        "{same_user:?}"
    );
    let out2 = finish(hold("100", Stdio::null(), true), Duration::from_secs(60));
    assert!(out2.status.success(), "{out2:?}");
    assert!(String::from_utf8_lossy(&out2.stdout).contains("regions 100"));
    drop(first.stdin.take());
    let _ = first.wait();
}
