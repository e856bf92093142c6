//! Debian's rdma-core programs, unmodified, through this library and a local iwarpd
//! (`IWARP_DEVICE=unix:SOCK`): the program's own buffers registered in place (moved onto
//! the library's memory file, which iwarpd maps). Same requirements as `programs.rs`.

mod common;

use common::*;

/// perftest's six tests at a size that goes through the daemon's send queue and at one
/// the library writes to the shared socket itself, the Send tests on a shared receive
/// queue, rping with verified data, ucmatose, and rdma_server/rdma_client: both sides
/// through iwarpd, each side's own checks pass.
#[test]
fn perftest_rping_and_ucmatose_run_through_iwarpd() {
    if !have_rdma_core() {
        return;
    }
    let d = Iwarpd::start("cverbs-perftest");
    for test in [
        "ib_write_bw",
        "ib_read_bw",
        "ib_send_bw",
        "ib_write_lat",
        "ib_read_lat",
        "ib_send_lat",
    ] {
        for size in ["8", "65536"] {
            perftest(test, &["-s", size], |c| d.through(c));
        }
    }
    for test in ["ib_send_bw", "ib_send_lat"] {
        perftest(test, &["--use-srq"], |c| d.through(c));
    }
    let p = port();
    pair(
        d.through(debian(
            "rping",
            &["-s", "-a", "127.0.0.1", "-p", &p, "-C", "100"],
        )),
        d.through(debian(
            "rping",
            &["-c", "-a", "127.0.0.1", "-p", &p, "-C", "100", "-V"],
        )),
    );
    let p = port();
    let out = pair(
        d.through(debian("ucmatose", &["-p", &p])),
        d.through(debian("ucmatose", &["-s", "127.0.0.1", "-p", &p])),
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("return status 0"));
    rdma_server_and_client(|c| d.through(c));
}

/// A C program through iwarpd against this stack's Rust iwarp-rping embedded, both
/// ways, data verified.
#[test]
fn rping_through_iwarpd_and_an_embedded_iwarp_rping_interoperate() {
    if !have_rdma_core() {
        return;
    }
    let d = Iwarpd::start("cverbs-rping");
    rping_against_iwarp_rping("50", |c| d.through(c));
}

/// From C, through iwarpd: buffers are registered in place (same address, contents kept,
/// a neighbour on the same page untouched, overlapping registrations), memory that cannot
/// move is refused with errno, and deregistration gives the pages back; the embedded
/// program's checks (objects.c) hold through the daemon too.
#[test]
fn a_c_program_registers_its_own_memory_in_place_through_iwarpd() {
    if !have_rdma_core() {
        return;
    }
    let d = Iwarpd::start("cverbs-in-place");
    for name in ["in_place", "objects", "windows"] {
        c_program_passes(name, Some(&d.device()));
    }
}

/// Between two hosts (two network namespaces joined by a veth), an iwarpd on each: rping
/// with verified data, ib_write_bw, and ib_write_lat at a size that goes through the
/// daemon (the responder sends first: peer-to-peer MPA through iwarpd).
#[test]
fn rping_and_perftest_between_two_network_namespaces_through_iwarpd() {
    if !have_rdma_core() {
        return;
    }
    let Some(net) = tests::netns::two_hosts_or_skip() else {
        return;
    };
    let (a, b) = (net.a(), net.b());
    let server = a.addr().to_string();
    let da = Iwarpd::start_in("cverbs-ns-a", Some(a.name()), &server);
    let db = Iwarpd::start_in("cverbs-ns-b", Some(b.name()), &b.addr().to_string());
    pair(
        da.through(debian_in(
            Some(a.name()),
            "rping",
            &["-s", "-a", &server, "-p", "7174", "-C", "100"],
        )),
        db.through(debian_in(
            Some(b.name()),
            "rping",
            &["-c", "-a", &server, "-p", "7174", "-C", "100", "-V"],
        )),
    );
    for (test, size) in [("ib_write_bw", "65536"), ("ib_write_lat", "4096")] {
        let args = ["-R", "-p", "18515", "-n", "300", "-s", size];
        let client = [&args[..], &[server.as_str()]].concat();
        let out = pair(
            da.through(debian_in(Some(a.name()), test, &args)),
            db.through(debian_in(Some(b.name()), test, &client)),
        );
        let text = String::from_utf8_lossy(&out.stdout);
        // The result line: the size, then the 300 iterations it ran.
        let result = text.lines().any(|l| {
            let mut w = l.split_whitespace();
            w.next() == Some(size) && w.next() == Some("300")
        });
        assert!(result, "{test}: {text}");
    }
}
