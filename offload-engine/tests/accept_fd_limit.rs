//! A listener in a process out of file descriptors: every accept fails (EMFILE) while the
//! connection stays in the kernel's queue. The accept loop must rest between tries instead
//! of spinning a processor, and take connections again once descriptors are free.
//!
//! Its own test binary: it lowers the process's descriptor limit, which would break any
//! test running beside it.

use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::time::Duration;

use offload_engine::{Cq, Engine, EngineConfig, QpInit};
use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};

/// Processor time this process has used so far (user and system), from /proc.
fn cpu_time() -> Duration {
    let stat = std::fs::read_to_string("/proc/self/stat").expect("/proc/self/stat");
    // Fields after the command name (which may hold spaces): utime and stime are the
    // 14th and 15th fields of the whole line, in clock ticks (100 per second on Linux).
    let rest = &stat[stat.rfind(')').expect("comm") + 2..];
    let f: Vec<u64> = rest
        .split_whitespace()
        .skip(11)
        .take(2)
        .map(|v| v.parse().expect("a tick count"))
        .collect();
    Duration::from_millis((f[0] + f[1]) * 10)
}

/// The number the next descriptor would get: the lowest free one. A limit of it leaves
/// none to spare.
fn next_descriptor() -> u64 {
    use std::os::fd::AsRawFd as _;
    let probe = std::fs::File::open("/dev/null").expect("/dev/null");
    probe.as_raw_fd() as u64
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn out_of_descriptors_the_accept_loop_rests_and_recovers() {
    let server = Engine::new(EngineConfig::default());
    let listener = server
        .listen(SocketAddr::from(([127, 0, 0, 1], 0)))
        .await
        .unwrap();
    let addr = listener.local_addr();
    // Another process connects while this one has no descriptor to spare (spawning needs
    // descriptors, so it starts first and connects a little later).
    let mut peer = Command::new("bash")
        .arg("-c")
        .arg(format!(
            "sleep 0.3; exec 3<>/dev/tcp/127.0.0.1/{}; sleep 2",
            addr.port()
        ))
        .stdin(Stdio::null())
        .spawn()
        .expect("bash");
    let before = getrlimit(Resource::Nofile);
    let cpu_before = cpu_time();
    // No descriptor to spare: every accept fails with EMFILE.
    setrlimit(
        Resource::Nofile,
        Rlimit {
            current: Some(next_descriptor()),
            maximum: before.maximum,
        },
    )
    .expect("lower the descriptor limit");
    std::thread::sleep(Duration::from_millis(1500));
    setrlimit(Resource::Nofile, before).expect("restore the descriptor limit");
    let busy = cpu_time() - cpu_before;
    // Spinning would have used about the whole 1.2 s the accepts failed for, on one
    // processor; resting uses next to nothing.
    assert!(
        busy < Duration::from_millis(600),
        "the accept loop spun while out of descriptors: {busy:?} of processor time"
    );
    // Descriptors free again: an honest client is served.
    let client = Engine::new(EngineConfig::default());
    let cq = Cq::new(4);
    let accept = tokio::spawn(async move {
        loop {
            let inc = listener.accept().await.unwrap();
            let pd = server.alloc_pd();
            let cq = Cq::new(4);
            // The bash peer's connection (it never sends a Request) never gets here; the
            // first to arrive is the honest one.
            if inc.accept(QpInit::new(pd, &cq), b"").await.is_ok() {
                return;
            }
        }
    });
    client
        .connect(addr, QpInit::new(client.alloc_pd(), &cq), b"")
        .await
        .expect("served again once descriptors are free");
    tokio::time::timeout(Duration::from_secs(10), accept)
        .await
        .expect("accepted")
        .unwrap();
    let _ = peer.kill();
    let _ = peer.wait();
}
