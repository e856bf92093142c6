//! An `iwarpd` upgrade without disconnecting anyone (live migration between processes,
//! seed 003 §3.1): ten times, a new daemon process takes the listening socket and the
//! connection over from the running one (`take_over`/`handover`), while a client runs a
//! continuous, verified loop of RDMA Writes, Reads and echoed Sends over one connection.

mod common;

use std::net::SocketAddr;
use std::os::fd::{AsFd as _, BorrowedFd};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use common::daemon::{Daemon, IWARPD};
use offload_engine::tpt::Base;
use offload_engine::{Cq, Engine, EngineConfig, Qp, QpInit};
use rdmap::{
    Access, Payload, QpState, RecvWr, RemoteBuf, SendFlags, SendOp, SendWr, Sge, WcOpcode, WcStatus,
};

fn pattern(len: usize, seed: u64) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u64).wrapping_mul(31).wrapping_add(seed * 7) as u8 ^ (i >> 11) as u8)
        .collect()
}

/// The client's side of the loop: one connection, every Read and echo compared.
struct Client {
    engine: Engine,
    pd: offload_engine::tpt::PdId,
    qp: Qp,
    cq: Cq,
    remote: RemoteBuf,
    sink: rdmap::STag,
    inbox: rdmap::STag,
    recv_size: u32,
}

impl Client {
    async fn connect(addr: SocketAddr) -> Self {
        let engine = Engine::new(EngineConfig::default());
        let pd = engine.alloc_pd();
        let cq = Cq::new(1024);
        let rw = Access::LOCAL_READ | Access::LOCAL_WRITE;
        let sink = engine
            .tpt()
            .alloc_region(pd, 512 << 10, Base::ZeroBased, rw)
            .unwrap();
        let inbox = engine
            .tpt()
            .alloc_region(pd, 64 << 10, Base::ZeroBased, rw)
            .unwrap();
        let (qp, private) = engine
            .connect(addr, QpInit::new(pd, &cq), b"")
            .await
            .unwrap();
        let remote = RemoteBuf::decode(&private[..16]).unwrap();
        let recv_size = u32::from_be_bytes(private[20..24].try_into().unwrap());
        Self {
            engine,
            pd,
            qp,
            cq,
            remote,
            sink,
            inbox,
            recv_size,
        }
    }

    async fn complete(&self, what: &str, opcode: WcOpcode) -> u32 {
        let wc = tokio::time::timeout(Duration::from_secs(20), self.cq.next())
            .await
            .unwrap_or_else(|_| panic!("{what}: no completion in 20 s"))
            .unwrap();
        assert_eq!(
            (wc.wc.status, wc.wc.opcode),
            (WcStatus::Success, opcode),
            "{what}: {wc:?}"
        );
        wc.wc.byte_len
    }

    /// One verified round: a Write, the Read of it, and a Send whose echo must match.
    async fn round(&self, n: u64) {
        let len = [1usize, 100, 4096, 65_537, 300 << 10][n as usize % 5];
        let to = (n * 8192) % (u64::from(self.remote.len) - (300 << 10));
        let data = pattern(len, n);
        let dst = RemoteBuf {
            stag: self.remote.stag,
            to,
            len: len as u32,
        };
        let post = |op| {
            self.qp
                .post_send(SendWr {
                    wr_id: n,
                    op,
                    flags: SendFlags::SIGNALED,
                })
                .unwrap()
        };
        post(SendOp::Write {
            data: Payload::Bytes(Bytes::from(data.clone())),
            dst,
        });
        self.complete("write", WcOpcode::Write).await;
        post(SendOp::Read {
            src: dst,
            dst: Sge {
                stag: self.sink,
                to: 0,
                len: len as u32,
            },
        });
        self.complete("read", WcOpcode::Read).await;
        let mut back = vec![0; len];
        self.engine
            .tpt()
            .read(self.pd, self.sink, 0, &mut back)
            .unwrap();
        assert!(back == data, "round {n}: the Read returned other octets");

        let msg = pattern((len % self.recv_size as usize).max(8), n ^ 0xabc);
        let msg = [&n.to_be_bytes()[..], &msg[8..]].concat();
        self.qp
            .post_recv(RecvWr {
                wr_id: n,
                sgl: [Sge {
                    stag: self.inbox,
                    to: 0,
                    len: self.recv_size,
                }]
                .into(),
            })
            .unwrap();
        post(SendOp::Send {
            data: Payload::Bytes(Bytes::from(msg.clone())),
            invalidate: None,
            immediate: None,
        });
        // The Send's completion and the echo's, in either order.
        let mut got = 0;
        for _ in 0..2 {
            let wc = tokio::time::timeout(Duration::from_secs(20), self.cq.next())
                .await
                .expect("send or echo: no completion in 20 s")
                .unwrap();
            assert_eq!(wc.wc.status, WcStatus::Success, "round {n}: {wc:?}");
            if wc.wc.opcode == WcOpcode::Recv {
                got = wc.wc.byte_len;
            }
        }
        assert_eq!(got as usize, msg.len(), "round {n}: echo length");
        let mut echo = vec![0; msg.len()];
        self.engine
            .tpt()
            .read(self.pd, self.inbox, 0, &mut echo)
            .unwrap();
        assert!(echo == msg, "round {n}: the echo differs");
    }
}

/// A new client is served by the daemon at `addr` (`iwarpd check`: Writes, Reads and
/// echoed Sends, verified).
fn check_passes(addr: &str) {
    iwarpd_succeeds(&["check", addr, "--count", "4", "--size", "64K"]);
}

/// `iwarpd ARGS` (a tool of it: `check`, `stat`) exits 0.
fn iwarpd_succeeds(args: &[&str]) {
    let out = std::process::Command::new(IWARPD)
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_upgrades_while_a_client_loops_over_one_connection() {
    let dir = std::env::temp_dir().join(format!("iwarpd-handover-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("handover.sock");
    let path = path.to_str().unwrap().to_owned();
    let common = ["--handover", &path, "--control", "off"];
    let mut daemon = Daemon::start(&common);
    let addr: SocketAddr = daemon.addr.parse().unwrap();
    let client = Arc::new(Client::connect(addr).await);

    let stop = Arc::new(AtomicBool::new(false));
    let rounds = Arc::new(AtomicU64::new(0));
    let looping = {
        let (client, stop, rounds) = (client.clone(), stop.clone(), rounds.clone());
        tokio::spawn(async move {
            let mut n = 0;
            while !stop.load(Ordering::Relaxed) {
                client.round(n).await;
                n += 1;
                rounds.store(n, Ordering::Relaxed);
            }
        })
    };

    for k in 0..10 {
        let before = rounds.load(Ordering::Relaxed);
        while rounds.load(Ordering::Relaxed) < before + 5 {
            assert!(
                !looping.is_finished(),
                "the client's loop failed before upgrade {k}"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let mut args = vec!["--take-over", path.as_str()];
        args.extend_from_slice(&common);
        // Started off the runtime: it blocks until the successor prints its address.
        let next = tokio::task::block_in_place(|| Daemon::start_with(&args));
        assert_eq!(
            next.addr, daemon.addr,
            "the successor listens where the daemon did"
        );
        let status = tokio::task::block_in_place(|| daemon.wait(Duration::from_secs(20)));
        assert!(status.success(), "the daemon before exited with {status}");
        let log = daemon.log();
        assert!(log.contains("handed over to a successor"), "{log}");
        assert!(log.contains("connections=1"), "{log}");
        next.wait_log("connection taken over");
        daemon = next;
    }
    let before = rounds.load(Ordering::Relaxed);
    while rounds.load(Ordering::Relaxed) < before + 5 {
        assert!(
            !looping.is_finished(),
            "the client's loop failed after the last upgrade"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    stop.store(true, Ordering::Relaxed);
    looping.await.expect("every round verified");
    eprintln!(
        "{} verified rounds (Write, Read, Send and echo each) across 10 upgrades",
        rounds.load(Ordering::Relaxed)
    );
    assert_eq!(client.qp.state(), QpState::Rts);
    assert_eq!(client.engine.stats().connections, 1, "no reconnect");
    assert_eq!(client.qp.stats().terminates_received, 0);

    // The listening socket came along: a new client is served by the last daemon.
    check_passes(&daemon.addr);
    // Its region took an STag index above every one the daemons before handed out, and
    // the margin each successor keeps for the entries still moving in: a new entry never
    // takes an index a moving domain needs.
    tokio::task::block_in_place(|| daemon.wait_log("connection accepted"));
    let log = daemon.log();
    let stag = log
        .lines()
        .filter(|l| l.contains("connection accepted"))
        .filter_map(|l| l.split("region=0x").nth(1))
        .filter_map(|r| u32::from_str_radix(r.get(..8)?, 16).ok())
        .next_back()
        .expect("the new connection's region in the log");
    assert!(stag >> 8 > 65_536, "index {} of STag {stag:#x}", stag >> 8);
    daemon.signal("-TERM");
    let status = tokio::task::block_in_place(|| daemon.wait(Duration::from_secs(20)));
    assert!(status.success());
    let _ = std::fs::remove_dir_all(&dir);
}

/// A TCP proxy to `to` that forwards the first `first` octets a client sends, tells
/// `forwarded`, and holds the rest until `release` fires; the other way is not held.
async fn holding_proxy(
    to: SocketAddr,
    first: usize,
) -> (
    SocketAddr,
    tokio::sync::oneshot::Receiver<()>,
    tokio::sync::oneshot::Sender<()>,
) {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let (forwarded_tx, forwarded) = tokio::sync::oneshot::channel();
    let (release, released) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(async move {
        let (client, _) = l.accept().await.unwrap();
        let server = tokio::net::TcpStream::connect(to).await.unwrap();
        let (mut cr, mut cw) = client.into_split();
        let (mut sr, mut sw) = server.into_split();
        tokio::spawn(async move {
            let _ = tokio::io::copy(&mut sr, &mut cw).await;
        });
        let mut head = vec![0; first];
        cr.read_exact(&mut head).await.unwrap();
        sw.write_all(&head).await.unwrap();
        let _ = forwarded_tx.send(());
        let _ = released.await;
        let _ = tokio::io::copy(&mut cr, &mut sw).await;
    });
    (addr, forwarded, release)
}

/// A client whose MPA Request was still arriving when the successor took the listening
/// socket is answered by the daemon before and moves with the other connections, instead
/// of being dropped with it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_still_arriving_at_the_handover_is_answered_and_moves() {
    let dir = std::env::temp_dir().join(format!("iwarpd-drain-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("handover.sock").to_str().unwrap().to_owned();
    let common = ["--handover", path.as_str(), "--control", "off"];
    let mut daemon = Daemon::start(&common);
    // The first 10 octets of the MPA Request reach the daemon, the rest waits.
    let (proxy, forwarded, release) = holding_proxy(daemon.addr.parse().unwrap(), 10).await;
    let connecting = tokio::spawn(Client::connect(proxy));
    forwarded.await.unwrap();
    // The daemon's accept task takes the connection off the backlog at once.
    tokio::time::sleep(Duration::from_millis(200)).await;

    let args: Vec<String> = ["--take-over", path.as_str()]
        .into_iter()
        .chain(common)
        .map(str::to_owned)
        .collect();
    let successor = tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        Daemon::start_with(&args)
    });
    tokio::task::block_in_place(|| {
        daemon.wait_log("the successor has the listening socket: answering the requests")
    });
    release.send(()).unwrap();
    let client = tokio::time::timeout(Duration::from_secs(20), connecting)
        .await
        .expect("the held client is answered")
        .unwrap();
    let next = successor.await.unwrap();
    let status = tokio::task::block_in_place(|| daemon.wait(Duration::from_secs(20)));
    assert!(status.success(), "the daemon before exited with {status}");
    let log = daemon.log();
    assert!(log.contains("connections=1"), "{log}");
    tokio::task::block_in_place(|| next.wait_log("connection taken over"));
    for n in 0..5 {
        client.round(n).await;
    }
    assert_eq!(client.qp.state(), QpState::Rts);
    assert_eq!(client.engine.stats().connections, 1, "no reconnect");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Whatever connects to the handover socket and is not a successor (silence, garbage, a
/// wrong version, a half message) leaves
/// the daemon serving: it says why in its log, and a client is served afterwards.
#[test]
fn a_bad_successor_leaves_the_daemon_serving() {
    use std::io::Write as _;
    use std::os::unix::net::UnixStream;

    let dir = std::env::temp_dir().join(format!("iwarpd-bad-successor-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("handover.sock");
    let p = path.to_str().unwrap();
    let daemon = Daemon::start(&["--handover", p, "--control", "off"]);
    use std::os::unix::fs::PermissionsExt as _;
    let mode = std::fs::metadata(&path).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600, "only the daemon's user may connect");
    // Silence: the daemon gives up on it after a few seconds.
    let silent = UnixStream::connect(&path).unwrap();
    daemon.wait_log("the successor said nothing for 5 s");
    drop(silent);
    // Garbage.
    UnixStream::connect(&path)
        .unwrap()
        .write_all(b"GET / HTTP/1.1\r\n\r\n")
        .unwrap();
    daemon.wait_log("handover failed: serving on");
    // A header announcing a body far too large, then nothing.
    let mut s = UnixStream::connect(&path).unwrap();
    s.write_all(&[1, 0xff, 0xff, 0xff, 0x7f, 0, 0]).unwrap();
    drop(s);
    // The right magic with another version.
    let mut s = UnixStream::connect(&path).unwrap();
    s.write_all(&[1, 5, 0, 0, 0, 0, 0]).unwrap();
    s.write_all(b"iWHO\x09").unwrap();
    let mut answer = Vec::new();
    let _ = std::io::Read::read_to_end(&mut s, &mut answer);
    assert!(
        String::from_utf8_lossy(&answer).contains("not a successor of this version"),
        "{answer:?}"
    );
    check_passes(&daemon.addr);
    assert!(!daemon.log().contains("panicked"), "{}", daemon.log());
    let _ = std::fs::remove_dir_all(&dir);
}

/// One message of the handover exchange, as the daemon frames it: kind, body length
/// (LE), descriptor count (LE), body; the descriptors ride on the first octet.
fn say(sock: &std::os::unix::net::UnixStream, kind: u8, body: &[u8], fds: &[BorrowedFd<'_>]) {
    try_say(sock, kind, body, fds).unwrap();
}

fn try_say(
    sock: &std::os::unix::net::UnixStream,
    kind: u8,
    body: &[u8],
    fds: &[BorrowedFd<'_>],
) -> std::io::Result<()> {
    use rustix::net::{SendAncillaryBuffer, SendAncillaryMessage, SendFlags};
    let mut msg = vec![kind];
    msg.extend_from_slice(&(body.len() as u32).to_le_bytes());
    msg.extend_from_slice(&(fds.len() as u16).to_le_bytes());
    msg.extend_from_slice(body);
    let mut space = [std::mem::MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(4))];
    let mut control = SendAncillaryBuffer::new(&mut space);
    assert!(control.push(SendAncillaryMessage::ScmRights(fds)));
    rustix::net::sendmsg(
        sock,
        &[std::io::IoSlice::new(&msg[..1])],
        &mut control,
        SendFlags::NOSIGNAL,
    )?;
    std::io::Write::write_all(&mut &*sock, &msg[1..])
}

/// The next message's kind and body (its descriptors, if any, are closed unread).
fn hear(sock: &std::os::unix::net::UnixStream) -> std::io::Result<(u8, Vec<u8>)> {
    use std::io::Read as _;
    let mut head = [0u8; 7];
    (&*sock).read_exact(&mut head)?;
    let mut body = vec![0; u32::from_le_bytes(head[1..5].try_into().unwrap()) as usize];
    (&*sock).read_exact(&mut body)?;
    Ok((head[0], body))
}

const HELLO: u8 = 1;
const LISTENER: u8 = 3;
const CONN: u8 = 4;
const ACK: u8 = 5;
const DONE: u8 = 7;
const CONTROL: u8 = 8;
const ABORT: u8 = 11;
const HELLO_BODY: &[u8] = b"iWHO\x06";

/// A daemon serving one client connection and local applications, with a handover
/// socket; the client has run two verified rounds.
async fn daemon_with_a_client(name: &str) -> (Daemon, Client, std::path::PathBuf) {
    let dir = std::env::temp_dir().join(format!("iwarpd-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (h, c) = (dir.join("handover.sock"), dir.join("control.sock"));
    let daemon = tokio::task::block_in_place(|| {
        Daemon::start(&[
            "--handover",
            h.to_str().unwrap(),
            "--control",
            c.to_str().unwrap(),
        ])
    });
    let client = Client::connect(daemon.addr.parse().unwrap()).await;
    for n in 0..2 {
        client.round(n).await;
    }
    (daemon, client, dir)
}

/// A successor's first steps: `HELLO`, then the listening socket, the control socket and
/// the client's connection arrive.
fn begin_as_successor(dir: &std::path::Path) -> std::os::unix::net::UnixStream {
    let s = std::os::unix::net::UnixStream::connect(dir.join("handover.sock")).unwrap();
    say(&s, HELLO, HELLO_BODY, &[]);
    for want in [LISTENER, CONTROL, CONN] {
        assert_eq!(hear(&s).unwrap().0, want);
    }
    s
}

/// `iwarpd stat` reaches the daemon on its control socket (a local application attaches).
fn stat_answers(dir: &std::path::Path) {
    iwarpd_succeeds(&[
        "stat",
        "--control",
        dir.join("control.sock").to_str().unwrap(),
    ]);
}

/// A successor that takes the listening and control sockets and is offered the client's
/// connection, then goes away without answering: the daemon takes everything back. It
/// accepts new connections and local applications again, and the client's connection,
/// never committed, goes on there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_successor_that_goes_away_mid_handover_leaves_everything_with_the_daemon() {
    let (daemon, client, dir) = daemon_with_a_client("gone-successor").await;
    tokio::task::block_in_place(|| {
        drop(begin_as_successor(&dir));
        daemon.wait_log("handover failed: serving on");
        check_passes(&daemon.addr);
        stat_answers(&dir);
    });
    for n in 2..6 {
        client.round(n).await;
    }
    assert_eq!(client.engine.stats().connections, 1, "no reconnect");
    assert!(!daemon.log().contains("panicked"), "{}", daemon.log());
    // The control socket is its own again: it removes the file when it stops.
    let mut daemon = daemon;
    daemon.signal("-TERM");
    tokio::task::block_in_place(|| daemon.wait(Duration::from_secs(20)));
    assert!(
        !dir.join("control.sock").exists(),
        "the control socket file stayed"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// A successor that answers the client's connection after the daemon stopped waiting:
/// the daemon told it `ABORT` (drop what you made ready) and `DONE`, and serves the
/// connection on. The connection runs in one process only: the client's verified rounds
/// go on without a reconnect.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_successor_that_answers_late_is_told_to_drop_what_it_made_ready() {
    let (daemon, client, dir) = daemon_with_a_client("late-successor").await;
    tokio::task::block_in_place(|| {
        let s = begin_as_successor(&dir);
        daemon.wait_log("the successor said nothing for 5 s");
        // The daemon may have closed its end already: what it said is still there.
        let _ = try_say(&s, ACK, &[], &[]);
        assert_eq!(hear(&s).unwrap().0, ABORT, "the late answer is refused");
        assert_eq!(hear(&s).unwrap().0, DONE);
    });
    for n in 2..6 {
        client.round(n).await;
    }
    assert_eq!(client.qp.state(), QpState::Rts);
    assert_eq!(client.engine.stats().connections, 1, "no reconnect");
    assert!(!daemon.log().contains("panicked"), "{}", daemon.log());
    let _ = std::fs::remove_dir_all(&dir);
}

/// A daemon that goes away after it handed over its listening socket: the successor
/// serves on with what it was given (here, the listening socket) instead of failing.
#[test]
fn a_daemon_that_goes_away_mid_handover_leaves_the_successor_serving() {
    let dir = std::env::temp_dir().join(format!("iwarpd-gone-before-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("handover.sock");
    let offer = std::os::unix::net::UnixListener::bind(&path).unwrap();
    let tcp = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = tcp.local_addr().unwrap().to_string();
    let p = path.to_str().unwrap().to_owned();
    let before = std::thread::spawn(move || {
        let (s, _) = offer.accept().unwrap();
        assert_eq!(hear(&s).unwrap(), (HELLO, HELLO_BODY.to_vec()));
        say(&s, LISTENER, &0u32.to_le_bytes(), &[tcp.as_fd()]);
        // Gone, without DONE.
    });
    let successor = Daemon::start_with(&["--take-over", &p, "--control", "off"]);
    before.join().unwrap();
    assert_eq!(successor.addr, addr, "it listens on the socket handed over");
    successor.wait_log("the daemon before went away in the middle of the handover");
    check_passes(&addr);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A local application that sends requests and does not read the replies cannot be
/// packed (its session is stuck writing to it): at an upgrade it stays with the daemon
/// before, which says why and serves it on; once it reads, every request was answered
/// there, in order, and the daemon exits by itself after it leaves.
#[test]
fn an_application_that_does_not_read_its_replies_stays_with_the_daemon_before() {
    use ipc::channel::{Inbox, send_all};
    use ipc::control::{Request, func, reply_fds};

    let dir = std::env::temp_dir().join(format!("iwarpd-no-reader-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (h, c) = (dir.join("handover.sock"), dir.join("control.sock"));
    let (h, c) = (h.to_str().unwrap(), c.to_str().unwrap());
    let mut before = Daemon::start(&["--handover", h, "--control", c]);
    let app = std::os::unix::net::UnixStream::connect(c).unwrap();
    // Far more replies than the socket and the session's queue hold.
    const ASKED: u64 = 20_000;
    let sender = {
        let app = app.try_clone().unwrap();
        std::thread::spawn(move || {
            send_all(app.as_fd(), &Request::Open { pid: 1 }.encode(0), &[]).unwrap();
            for txn in 1..=ASKED {
                send_all(app.as_fd(), &Request::Stats.encode(txn), &[]).unwrap();
            }
        })
    };
    std::thread::sleep(Duration::from_millis(500));
    let after = Daemon::start_with(&["--take-over", h, "--control", c, "--handover", h]);
    before.wait_log("did not stop in time: it stays here");
    after.wait_log("iwarpd listening");
    // It reads now: every reply comes, in order, from the daemon before.
    let mut inbox = Inbox::new();
    let mut next = 0;
    while next <= ASKED {
        while let Some(m) = inbox
            .next(|h: &ipc::control::Header, b: &[u8]| reply_fds(h.func, b))
            .unwrap()
        {
            let want = if next == 0 { func::OPEN } else { func::STATS };
            assert_eq!((m.header.func, m.header.txn), (want | func::REPLY, next));
            next += 1;
        }
        if next <= ASKED {
            inbox.recv(&app).unwrap();
        }
    }
    sender.join().unwrap();
    assert!(
        before.child.try_wait().unwrap().is_none(),
        "the daemon before serves the application that stayed"
    );
    drop(app);
    assert!(before.wait(Duration::from_secs(20)).success());
    assert!(!before.log().contains("panicked"), "{}", before.log());
    let _ = std::fs::remove_dir_all(&dir);
}
