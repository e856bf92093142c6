//! Debian's own rdma-core programs, unmodified, through this library (`LD_LIBRARY_PATH`
//! at the shared object `scripts/rdma_core_lib.sh` links from this build).
//!
//! Needs `ibverbs-utils`, `perftest`, `rdmacm-utils`, `libibverbs-dev` and a C compiler
//! (`.ci/run` installs them, and sets `IWARP_RDMA_CORE_REQUIRED`). Without them each test
//! prints `SKIPPED` and what to install, and passes; with that variable set, it fails.

mod common;

use common::*;

#[test]
fn ibv_devinfo_and_ibv_devices_see_the_iwarp_device() {
    if !have_rdma_core() {
        return;
    }
    let out = run("ibv_devinfo", &["-v"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for want in [
        "hca_id:\tiwarp0",
        "transport:\t\t\tiWARP (1)",
        "phys_port_cnt:\t\t\t1",
        "state:\t\t\tPORT_ACTIVE (4)",
        "link_layer:\t\tEthernet",
        "GID[  0]:\t\t0000:0000:0000:0000:0000:ffff:",
    ] {
        assert!(text.contains(want), "no {want:?} in:\n{text}");
    }
    let out = run("ibv_devices", &[]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success() && text.contains("iwarp0"), "{text}");
}

/// Every program of Debian's ibverbs-utils, perftest and rdmacm-utils loads against the
/// library: each symbol it asks for (with its version) is there, so what the library does
/// not carry out fails with its reason when called, never as a loader error.
#[test]
fn every_debian_rdma_program_finds_each_symbol_it_needs() {
    if !have_rdma_core() {
        return;
    }
    let list = std::process::Command::new("dpkg")
        .args(["-L", "ibverbs-utils", "perftest", "rdmacm-utils"])
        .output()
        .unwrap();
    let programs: Vec<String> = String::from_utf8_lossy(&list.stdout)
        .lines()
        .filter(|l| l.starts_with("/usr/bin/"))
        .map(str::to_owned)
        .collect();
    assert!(programs.len() > 20, "{programs:?}");
    let mut missing = Vec::new();
    for p in &programs {
        let out = std::process::Command::new("ldd")
            .args(["-r", p])
            .env("LD_LIBRARY_PATH", library())
            .output()
            .unwrap();
        let said = String::from_utf8_lossy(&out.stderr).into_owned()
            + &String::from_utf8_lossy(&out.stdout);
        missing.extend(
            said.lines()
                .filter(|l| l.contains("undefined symbol"))
                .map(str::to_owned),
        );
    }
    assert!(missing.is_empty(), "{}", missing.join("\n"));
}

/// Protection domains and regions on malloc'ed memory, from C, embedded; and misuse
/// (freed twice, in the wrong order, never ours) refused, not a crash.
#[test]
fn a_c_program_registers_its_own_memory_and_misuse_is_refused() {
    if !have_rdma_core() {
        return;
    }
    c_program_passes("objects", None);
}

/// An identifier's events end with it (cm_events.c): none queued is handed out after
/// `rdma_destroy_id`, which waits for the acknowledgement of one another thread holds.
/// Without it rping's client crashed, 1 run in a few hundred, at its end.
#[test]
fn a_destroyed_identifier_s_events_end_with_it() {
    if !have_rdma_core() {
        return;
    }
    c_program_passes("cm_events", None);
}

/// A connect made before its listener exists is tried again for a moment
/// (late_listener.c): perftest's race against a slow server, which its own retry cannot
/// survive; a port that stays closed is still refused.
#[test]
fn a_connect_waits_a_moment_for_a_late_listener() {
    if !have_rdma_core() {
        return;
    }
    c_program_passes("late_listener", None);
}

/// rdma_listen's backlog bounds the requests waiting for the program (backlog.c): those
/// beyond are rejected, and taking one makes room for the next.
#[test]
fn a_listener_holds_at_most_its_backlog_of_requests() {
    if !have_rdma_core() {
        return;
    }
    c_program_passes("backlog", None);
}

/// Memory windows from C (windows.c): type 1 bound by ibv_bind_mw, type 2 by
/// IBV_WR_BIND_MW under the window's next key, each written through by the peer and
/// completing as IBV_WC_BIND_MW; unbound or invalidated, a window refuses the peer.
#[test]
fn memory_windows_of_both_types_work_from_c() {
    if !have_rdma_core() {
        return;
    }
    c_program_passes("windows", None);
}

/// rping, both sides unmodified through the library (the engine in each process): 100
/// pings of Send, RDMA Read and RDMA Write, the client verifying each (`-V`).
#[test]
fn rping_runs_through_the_library_with_verified_data() {
    if !have_rdma_core() {
        return;
    }
    let p = port();
    pair(
        debian("rping", &["-s", "-a", "127.0.0.1", "-p", &p, "-C", "100"]),
        debian(
            "rping",
            &["-c", "-a", "127.0.0.1", "-p", &p, "-C", "100", "-V"],
        ),
    );
}

/// Debian's rping against this stack's own iwarp-rping, both ways: a C program on one
/// side and a Rust one on the other, data verified.
#[test]
fn rping_and_iwarp_rping_interoperate_both_ways() {
    if !have_rdma_core() {
        return;
    }
    rping_against_iwarp_rping("100", |c| c);
}

/// perftest's six tests (`-R`: through the connection manager, as iWARP requires), the
/// Send tests on a shared receive queue, and ucmatose, both sides unmodified through the
/// library; each side's own checks pass (exit 0) and the client prints its results.
#[test]
fn perftest_and_ucmatose_run_through_the_library() {
    if !have_rdma_core() {
        return;
    }
    for test in [
        "ib_write_bw",
        "ib_read_bw",
        "ib_send_bw",
        "ib_write_lat",
        "ib_read_lat",
        "ib_send_lat",
    ] {
        perftest(test, &[], |c| c);
    }
    // The Send tests again on a shared receive queue.
    for test in ["ib_send_bw", "ib_send_lat"] {
        perftest(test, &["--use-srq"], |c| c);
    }
    let p = port();
    let out = pair(
        debian("ucmatose", &["-p", &p]),
        debian("ucmatose", &["-s", "127.0.0.1", "-p", &p]),
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("return status 0"), "{text}");
}

/// rdma-core's synchronous examples (`rdma_create_ep`, `rdma_get_request`, queues the
/// library makes, messages in global variables), both sides through the library.
#[test]
fn rdma_server_and_rdma_client_run_through_the_library() {
    if !have_rdma_core() {
        return;
    }
    rdma_server_and_client(|c| c);
}

/// Between two hosts (two network namespaces joined by a veth): rping with verified data
/// and ib_write_bw, each side a Debian program through the library.
#[test]
fn rping_and_ib_write_bw_between_two_network_namespaces() {
    if !have_rdma_core() {
        return;
    }
    let Some(net) = tests::netns::two_hosts_or_skip() else {
        return;
    };
    let (a, b) = (net.a(), net.b());
    let server = a.addr().to_string();
    pair(
        debian_in(
            Some(a.name()),
            "rping",
            &["-s", "-a", &server, "-p", "7174", "-C", "100"],
        ),
        debian_in(
            Some(b.name()),
            "rping",
            &["-c", "-a", &server, "-p", "7174", "-C", "100", "-V"],
        ),
    );
    let out = pair(
        debian_in(
            Some(a.name()),
            "ib_write_bw",
            &["-R", "-p", "18515", "-n", "500"],
        ),
        debian_in(
            Some(b.name()),
            "ib_write_bw",
            &["-R", "-p", "18515", "-n", "500", &server],
        ),
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("65536      500"), "{text}");
}
