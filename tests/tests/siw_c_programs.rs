//! Debian's own C programs through this stack's rdma-core library (crate `cverbs`,
//! `LD_LIBRARY_PATH`), against the Linux kernel's soft-iWARP driver (siw) in the lab VM,
//! `rping -V` (every ping's data checked) in both roles, and siw's perftest clients
//! (`ib_write_bw`, `ib_read_bw`, `ib_send_bw`, `-R`) against Debian's perftest servers,
//! with the engine in the program's process and, for rping, through our `iwarpd` in the
//! lab's netns (`IWARP_DEVICE`).
//!
//! Opt-in, as `tests/siw.rs` (see its documentation for the lab's settings): every test
//! is `#[ignore]`d, and runs with
//!
//! ```text
//! sudo IWARP_SIW_LAB=1 cargo test -p tests --test siw_c_programs -- --ignored --test-threads=1
//! ```
//!
//! CI runs `ci_smoke_siw_clients_against_c_servers` (siw's clients against Debian's servers)
//! after the Rust tools' smoke.

use std::path::PathBuf;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use tests::siw_lab::{
    Daemon, HOST, LAB_LOCK, Lab, RUN_LIMIT, Server, VM1, in_netns, lab_command, require_lab, run,
};

/// How long the VM serves one test.
const VM_SECS: u32 = 240;
/// perftest's size and iterations on both sides: small, as siw under emulation is slow.
const PERFTEST: [&str; 4] = ["-s", "4096", "-n", "16"];

/// The library, linked once per test binary.
fn library() -> PathBuf {
    static DIR: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    DIR.get_or_init(tests::rdma_core_library).clone()
}

/// Debian's `program ARGS` through the library in the lab's netns (the engine in its
/// process, or `daemon`'s if given).
fn debian(program: &str, args: &[&str], daemon: Option<&Daemon>) -> Command {
    let mut cmd = in_netns(program.as_ref(), RUN_LIMIT);
    cmd.args(args).env("LD_LIBRARY_PATH", library());
    match daemon {
        Some(d) => cmd.env("IWARP_DEVICE", format!("unix:{}", d.sock)),
        None => cmd.env_remove("IWARP_DEVICE"),
    };
    cmd
}

/// Runs a client made by `make` until it succeeds, for a minute at most (siw's server
/// starts a moment after the VM says it serves, and rping does not retry a refused
/// connect); returns the last output.
fn client(make: impl Fn() -> Command) -> Output {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let out = run(make());
        if out.status.success() || Instant::now() >= deadline {
            return out;
        }
        std::thread::sleep(Duration::from_secs(1));
    }
}

/// A shell command that runs `cmd` up to five times until it succeeds (see
/// [`siw_perftest_client_against_server`]).
fn retried(cmd: &str) -> String {
    format!("for i in 1 2 3 4 5; do {cmd} && break; sleep 1; done")
}

/// Asserts that siw's program in vm1 exited 0, from the VM's console log.
fn siw_exited_0(lab: &mut Lab, what: &str) -> String {
    let console = lab
        .wait_vm_exit(Duration::from_secs(60))
        .expect("the VM's console log");
    assert!(
        console.contains("LAB[vm1] EXIT rc=0"),
        "siw's {what} did not exit 0:\n{console}"
    );
    console
}

/// How many connections the rping client makes, one after the other, to one siw server:
/// the window `EngineConfig::first_fpdu_delay` closes caught 4 in 100 without it.
const RPING_RUNS: usize = 25;

/// Debian's `rping -c -V -C 10` through the library against siw's `rping -s -P` (the
/// lab's default server), [`RPING_RUNS`] times back to back, through `iwarpd` if
/// `daemon`.
fn rping_client_against_siw(daemon: bool) {
    require_lab();
    let _guard = LAB_LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let _lab = Lab::serve(VM_SECS, "", None);
    let daemon = daemon.then(|| Daemon::start(&["--crc", "false"]));
    let rping = || {
        debian(
            "rping",
            &["-c", "-a", VM1, "-v", "-V", "-C", "10"],
            daemon.as_ref(),
        )
    };
    // The first waits for the server to come up; every later one must pass at once.
    let mut out = client(rping);
    for n in 1..=RPING_RUNS {
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "rping -c run {n} failed: {out:?}");
        assert_eq!(text.matches("ping data: rdma-ping-").count(), 10, "{text}");
        if n < RPING_RUNS {
            out = run(rping());
        }
    }
}

/// siw's `rping -c -V -C 3` against Debian's `rping -s -V -C 3` through the library.
fn siw_rping_client_against_rping_server() {
    require_lab();
    let _guard = LAB_LOCK.lock().unwrap_or_else(|e| e.into_inner());
    // The netns first, so our server listens before siw's rping connects.
    assert!(lab_command(&["net-up"]).status().expect("net-up").success());
    let server = Server::spawn(debian(
        "rping",
        &["-s", "-a", HOST, "-v", "-V", "-C", "3"],
        None,
    ));
    let mut lab = Lab::serve(
        VM_SECS,
        "",
        Some(&format!("sleep 5; rping -c -a {HOST} -v -V -C 3")),
    );
    let out = server.wait();
    let console = siw_exited_0(&mut lab, "rping -c");
    drop(lab);
    assert!(out.status.success(), "rping -s failed: {out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        text.matches("server ping data: rdma-ping-").count(),
        3,
        "{text}"
    );
    assert_eq!(
        console.matches("ping data: rdma-ping-").count(),
        3,
        "{console}"
    );
}

/// siw's `ib_TEST -R` client against Debian's server through the library. Debian's
/// perftest 4.5 connects its test connection right after the handshake over its control
/// connection, while the server is still moving to its second listener; a server that is
/// late gets the connect refused (REJECTED, -111), and perftest's own retry then reuses
/// the ids it destroyed. Both sides run again when that happens. The other direction is
/// [`perftest_client_against_siw_server`].
fn siw_perftest_client_against_server(test: &str) {
    require_lab();
    let _guard = LAB_LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let program = format!("ib_{test}");
    assert!(lab_command(&["net-up"]).status().expect("net-up").success());
    // Five runs at most, until one succeeds.
    let mut args = vec![
        "-c",
        "for i in 1 2 3 4 5; do \"$0\" \"$@\" && exit 0; done; exit 1",
    ];
    args.extend([program.as_str(), "-R"]);
    args.extend(PERFTEST);
    let server = Server::spawn(debian("sh", &args, None));
    let siw = format!(
        "sleep 5; {}",
        retried(&format!(
            "{program} -d siw0 -F -R {} {HOST}",
            PERFTEST.join(" ")
        ))
    );
    let mut lab = Lab::serve(VM_SECS, "", Some(&siw));
    let out = server.wait();
    siw_exited_0(&mut lab, &format!("{program} client"));
    drop(lab);
    assert!(out.status.success(), "{program} server failed: {out:?}");
}

/// Debian's `ib_TEST -R` client through the library against siw's server. The race
/// above, the other way round: the library tries a refused connect again for a moment
/// (`cverbs` `REFUSED_GRACE`), so perftest's test connection reaches siw's late listener
/// instead of failing every time. Each run of the client waits for the VM's server.
fn perftest_client_against_siw_server(test: &str) {
    require_lab();
    let _guard = LAB_LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let program = format!("ib_{test}");
    let siw = format!("{program} -d siw0 -F -R {}", PERFTEST.join(" "));
    let mut lab = Lab::serve(VM_SECS, "", Some(&siw));
    let mut args = vec!["-R"];
    args.extend(PERFTEST);
    args.push(VM1);
    let out = client(|| debian(&program, &args, None));
    siw_exited_0(&mut lab, &format!("{program} server"));
    drop(lab);
    assert!(out.status.success(), "{program} client failed: {out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("#bytes"), "{text}");
}

#[test]
#[ignore = "needs the siw lab: sudo IWARP_SIW_LAB=1 cargo test -p tests --test siw_c_programs -- --ignored --test-threads=1"]
fn perftest_clients_against_siw_servers() {
    for test in ["write_bw", "read_bw", "send_bw"] {
        perftest_client_against_siw_server(test);
    }
}

#[test]
#[ignore = "needs the siw lab: sudo IWARP_SIW_LAB=1 cargo test -p tests --test siw_c_programs -- --ignored --test-threads=1"]
fn ci_smoke_siw_clients_against_c_servers() {
    siw_rping_client_against_rping_server();
    siw_perftest_client_against_server("write_bw");
}

#[test]
#[ignore = "needs the siw lab: sudo IWARP_SIW_LAB=1 cargo test -p tests --test siw_c_programs -- --ignored --test-threads=1"]
fn ci_smoke_rping_client_against_siw_embedded() {
    rping_client_against_siw(false);
}

#[test]
#[ignore = "needs the siw lab: sudo IWARP_SIW_LAB=1 cargo test -p tests --test siw_c_programs -- --ignored --test-threads=1"]
fn rping_through_iwarpd_against_siw() {
    rping_client_against_siw(true);
}

#[test]
#[ignore = "needs the siw lab: sudo IWARP_SIW_LAB=1 cargo test -p tests --test siw_c_programs -- --ignored --test-threads=1"]
fn siw_perftest_clients_against_read_and_send_bw_servers() {
    for test in ["read_bw", "send_bw"] {
        siw_perftest_client_against_server(test);
    }
}
