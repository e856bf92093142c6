//! Fault injection: two engines talk through a userspace TCP proxy (this kernel has no
//! netem) that re-chunks the stream into 1 to 7 octets with random delays, stalls one
//! direction, flips one bit (in a payload, a CRC, a DDP header, the MPA key) or resets
//! the connection mid-transfer. Every run ends with the data intact or with a clean,
//! named error on both sides within the configured timeout; corrupt data is never
//! placed. The client killed with SIGKILL is `offload-engine/tests/iwarpd.rs`'s
//! `a_client_killed_with_sigkill_is_cleaned_up` (a real `iwarpd check` process).

use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use offload_engine::tpt::{Base, PdId};
use offload_engine::{Cq, Engine, EngineConfig, Qp, QpEnd, QpInit, Srq};
use rdmap::testing::XorShift;
use rdmap::{Access, Payload, RecvWr, RemoteBuf, STag, SendFlags, SendOp, SendWr, Sge, WcStatus};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Notify;
use tokio::time::Instant;

const LEN: usize = 64 * 1024;
const RW: Access = Access::REMOTE_READ
    .union(Access::REMOTE_WRITE)
    .union(Access::LOCAL_READ)
    .union(Access::LOCAL_WRITE);

/// What the proxy does to one direction.
#[derive(Clone, Copy, Debug)]
enum Fault {
    /// Pass everything as it comes.
    None,
    /// Forward in pieces of 1 to 7 octets, now and then after a pause.
    Rechunk(u64),
    /// After `after` octets, forward nothing for `pause`.
    Stall { after: usize, pause: Duration },
    /// Flip bit `bit` of the octet at stream offset `at`.
    Flip { at: usize, bit: u8 },
    /// After `after` octets, reset both connections.
    Reset { after: usize },
}

/// Copies `from` to `to` applying `fault`, until `from` ends, a write fails or `stop`
/// fires; true when it stopped to reset the connection (the caller then resets both).
async fn pump(
    mut from: impl AsyncRead + Unpin,
    mut to: impl AsyncWrite + Unpin,
    fault: Fault,
    stop: &Notify,
) -> bool {
    let mut buf = vec![0u8; 16 * 1024];
    let mut pos = 0usize;
    let mut rng = XorShift::new(match fault {
        Fault::Rechunk(seed) => seed,
        _ => 1,
    });
    let mut stalled = false;
    loop {
        let n = tokio::select! {
            r = from.read(&mut buf) => match r {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            },
            // The other direction resets: no FIN from here, only the RST.
            () = stop.notified() => return false,
        };
        let chunk = &mut buf[..n];
        match fault {
            Fault::Flip { at, bit } if (pos..pos + n).contains(&at) => chunk[at - pos] ^= 1 << bit,
            Fault::Reset { after } if pos + n > after => {
                let keep = after.saturating_sub(pos);
                let _ = to.write_all(&chunk[..keep]).await;
                // One other pump: a stored permit reaches it even if it is not waiting yet.
                stop.notify_one();
                return true;
            }
            Fault::Stall { after, pause } if !stalled && pos + n > after => {
                stalled = true;
                let keep = after.saturating_sub(pos);
                if to.write_all(&chunk[..keep]).await.is_err() {
                    break;
                }
                tokio::time::sleep(pause).await;
                if to.write_all(&chunk[keep..]).await.is_err() {
                    break;
                }
                pos += n;
                continue;
            }
            _ => {}
        }
        if let Fault::Rechunk(_) = fault {
            let mut at = 0;
            while at < n {
                let k = rng.range(1, 8).min(n - at);
                if to.write_all(&chunk[at..at + k]).await.is_err() {
                    return false;
                }
                at += k;
                if rng.range(0, 64) == 0 {
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
            }
        } else if to.write_all(chunk).await.is_err() {
            break;
        }
        pos += n;
    }
    // Pass the end on (a half close), as TCP would.
    let _ = to.shutdown().await;
    false
}

/// A proxy for one connection: client -> upstream with `up`, back with `down`.
async fn proxy(upstream: SocketAddr, up: Fault, down: Fault) -> SocketAddr {
    let l = TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], 0)))
        .await
        .unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move {
        let (mut client, _) = l.accept().await.unwrap();
        let mut server = TcpStream::connect(upstream).await.unwrap();
        client.set_nodelay(true).unwrap();
        server.set_nodelay(true).unwrap();
        let stop = Notify::new();
        let (a, b) = {
            let (cr, cw) = client.split();
            let (sr, sw) = server.split();
            tokio::join!(pump(cr, sw, up, &stop), pump(sr, cw, down, &stop))
        };
        if a || b {
            // Linger 0: closing sends a RST to both ends.
            for s in [&client, &server] {
                #[allow(deprecated)]
                let _ = s.set_linger(Some(Duration::ZERO));
            }
        }
    });
    addr
}

/// The server: an engine with a zeroed region advertised in the private data and one
/// receive posted; the client: an engine with a source region of a pattern.
struct Pair {
    server: Engine,
    server_pd: PdId,
    region: STag,
    server_qp: tokio::task::JoinHandle<Qp>,
    client: Engine,
    client_pd: PdId,
    src: STag,
    qp: Qp,
    cq: Cq,
    remote: RemoteBuf,
}

fn pattern() -> Vec<u8> {
    XorShift::new(77).bytes(LEN)
}

async fn pair(up: Fault, down: Fault, cfg: EngineConfig) -> Result<Pair, mpa::ConnectError> {
    let server = Engine::new(cfg.clone());
    let server_pd = server.alloc_pd();
    let region = server
        .tpt()
        .register(server_pd, vec![0; LEN], Base::ZeroBased, RW)
        .unwrap();
    let inbox = server
        .tpt()
        .register(server_pd, vec![0; 64], Base::ZeroBased, RW)
        .unwrap();
    let listener = server
        .listen(SocketAddr::from(([127, 0, 0, 1], 0)))
        .await
        .unwrap();
    let upstream = listener.local_addr();
    let remote = RemoteBuf {
        stag: region,
        to: 0,
        len: LEN as u32,
    };
    let (s, spd) = (server.clone(), server_pd);
    let server_qp = tokio::spawn(async move {
        let inc = listener.accept().await.unwrap();
        let srq = Srq::new();
        srq.post_recv(RecvWr {
            wr_id: 1,
            sgl: Sge {
                stag: inbox,
                to: 0,
                len: 64,
            }
            .into(),
        });
        let cq = Cq::new(64);
        let init = QpInit {
            srq: Some(srq),
            ..QpInit::new(spd, &cq)
        };
        let qp = inc.accept(init, &remote.encode()).await.expect("accept");
        drop(s);
        qp
    });
    let addr = proxy(upstream, up, down).await;
    let client = Engine::new(cfg);
    let client_pd = client.alloc_pd();
    let src = client
        .tpt()
        .register(client_pd, pattern(), Base::ZeroBased, RW)
        .unwrap();
    let cq = Cq::new(64);
    let (qp, _) = client
        .connect(addr, QpInit::new(client_pd, &cq), b"")
        .await?;
    Ok(Pair {
        server,
        server_pd,
        region,
        server_qp,
        client,
        client_pd,
        src,
        qp,
        cq,
        remote,
    })
}

impl Pair {
    /// A Write of the whole pattern, a Read of it back into the second half of the
    /// source region's twin, and a Send: returns each completion's status in order.
    async fn traffic(&self) -> Vec<WcStatus> {
        let sink = self
            .client
            .tpt()
            .register(self.client_pd, vec![0; LEN], Base::ZeroBased, RW)
            .unwrap();
        let wrs = [
            SendOp::Write {
                data: Payload::Sgl(
                    Sge {
                        stag: self.src,
                        to: 0,
                        len: LEN as u32,
                    }
                    .into(),
                ),
                dst: self.remote,
            },
            SendOp::Read {
                src: self.remote,
                dst: Sge {
                    stag: sink,
                    to: 0,
                    len: LEN as u32,
                },
            },
            SendOp::Send {
                data: Payload::Bytes(Bytes::from_static(b"done")),
                invalidate: None,
                immediate: None,
            },
        ];
        for (i, op) in wrs.into_iter().enumerate() {
            self.qp
                .post_send(SendWr {
                    wr_id: i as u64,
                    op,
                    flags: SendFlags::SIGNALED,
                })
                .unwrap();
        }
        let mut out = Vec::new();
        for _ in 0..3 {
            let wc = tokio::time::timeout(Duration::from_secs(120), self.cq.next())
                .await
                .expect("every request completes")
                .unwrap();
            out.push(wc.wc.status);
        }
        if out.iter().all(|s| *s == WcStatus::Success) {
            let mut back = vec![0; LEN];
            self.client
                .tpt()
                .read(self.client_pd, sink, 0, &mut back)
                .unwrap();
            assert!(back == pattern(), "the Read brought back what was written");
        }
        out
    }

    /// Every octet of the server's region is the pattern's (placed) or still zero (not
    /// placed: FPDUs before a corrupt one may have been); anything else is corrupt data.
    fn server_region_is_clean(&self) -> bool {
        let mut v = vec![0; LEN];
        self.server
            .tpt()
            .read(self.server_pd, self.region, 0, &mut v)
            .unwrap();
        v.iter()
            .zip(pattern())
            .all(|(&got, want)| got == want || got == 0)
    }
}

#[tokio::test(flavor = "current_thread")]
async fn rechunked_into_one_to_seven_octets_with_pauses_the_data_arrives_intact() {
    for seed in 1..=3 {
        let p = pair(
            Fault::Rechunk(seed),
            Fault::Rechunk(seed + 100),
            EngineConfig::default(),
        )
        .await
        .expect("connect through the re-chunking proxy");
        assert_eq!(p.traffic().await, [WcStatus::Success; 3], "seed {seed}");
        assert!(p.server_region_is_clean());
        let mut v = vec![0; LEN];
        p.server
            .tpt()
            .read(p.server_pd, p.region, 0, &mut v)
            .unwrap();
        assert!(v == pattern(), "the Write was placed whole");
        p.qp.disconnect();
        assert_eq!(p.qp.closed().await, QpEnd::Closed);
        drop(p.server_qp.await);
    }
}

/// A stall shorter than the stall timeout is only a delay; a longer one ends the queue
/// pair that waits with `TimedOut` within the timeout, its work flushed, and the other
/// side learns of it as a lost connection.
#[tokio::test(start_paused = true)]
async fn stalls_shorter_than_the_timeout_delay_and_longer_ones_end_cleanly() {
    let mut cfg = EngineConfig::default();
    cfg.timeouts.stall = Some(Duration::from_secs(10));
    for (up, down) in [
        (
            Fault::Stall {
                after: 30_000,
                pause: Duration::from_secs(6),
            },
            Fault::None,
        ),
        (
            Fault::None,
            Fault::Stall {
                after: 30_000,
                pause: Duration::from_secs(6),
            },
        ),
    ] {
        let p = pair(up, down, cfg.clone()).await.expect("connect");
        assert_eq!(p.traffic().await, [WcStatus::Success; 3], "{up:?} {down:?}");
        drop(p);
    }
    for (up, down) in [
        (
            Fault::Stall {
                after: 30_000,
                pause: Duration::from_secs(60),
            },
            Fault::None,
        ),
        (
            Fault::None,
            Fault::Stall {
                after: 30_000,
                pause: Duration::from_secs(60),
            },
        ),
    ] {
        let p = pair(up, down, cfg.clone()).await.expect("connect");
        let start = Instant::now();
        let st = p.traffic().await;
        assert!(st.contains(&WcStatus::Flushed), "{up:?} {down:?}: {st:?}");
        let end = p.qp.closed().await;
        assert_eq!(end, QpEnd::TimedOut, "{up:?} {down:?}");
        assert!(
            start.elapsed() < Duration::from_secs(12),
            "{:?}",
            start.elapsed()
        );
        assert!(p.server_region_is_clean());
        let server_end = p.server_qp.await.unwrap().closed().await;
        assert!(
            matches!(
                server_end,
                QpEnd::ConnectionLost | QpEnd::TimedOut | QpEnd::Closed
            ),
            "{server_end}"
        );
    }
}

/// Request 24 octets (Rev 2 with the IRD/ORD block), then the Write's first FPDU: length
/// (2), tagged header (14), payload, CRC.
const FIRST_FPDU: usize = 24;

#[tokio::test(flavor = "current_thread")]
async fn a_flipped_bit_is_an_mpa_crc_terminate_and_nothing_corrupt_is_placed() {
    for (what, at) in [
        ("payload", FIRST_FPDU + 2 + 14 + 100),
        ("DDP header (STag)", FIRST_FPDU + 2 + 3),
        ("ULPDU_Length", FIRST_FPDU + 1),
        ("payload of a later FPDU", FIRST_FPDU + 20_000),
    ] {
        let p = pair(
            Fault::Flip { at, bit: 2 },
            Fault::None,
            EngineConfig::default(),
        )
        .await
        .expect("connect");
        let st = p.traffic().await;
        assert!(st.iter().any(|s| *s != WcStatus::Success), "{what}: {st:?}");
        assert!(p.server_region_is_clean(), "{what}: corrupt data placed");
        let server_end = p.server_qp.await.unwrap().closed().await;
        assert_eq!(
            server_end,
            QpEnd::Terminated(rdmap::TermCode::MPA_CRC),
            "{what}"
        );
        assert_eq!(
            p.qp.closed().await,
            QpEnd::TerminatedByPeer(rdmap::TermCode::MPA_CRC),
            "{what}"
        );
    }
}

/// The CRC of the Write's first FPDU (its last four octets).
#[tokio::test(flavor = "current_thread")]
async fn a_flipped_crc_octet_is_an_mpa_crc_terminate() {
    // The first FPDU of the Write is as large as the loopback MSS allows; find its end
    // from the proxy's view: the Request, then ULPDU_Length at FIRST_FPDU.
    let mulpdu = usize::from(mpa::MAX_ULPDU).min(LEN + 14);
    let crc_at = FIRST_FPDU + (2 + mulpdu).div_ceil(4) * 4 + 1;
    let p = pair(
        Fault::Flip { at: crc_at, bit: 0 },
        Fault::None,
        EngineConfig::default(),
    )
    .await
    .expect("connect");
    let st = p.traffic().await;
    assert!(st.iter().any(|s| *s != WcStatus::Success), "{st:?}");
    assert!(p.server_region_is_clean());
    let server_end = p.server_qp.await.unwrap().closed().await;
    assert_eq!(server_end, QpEnd::Terminated(rdmap::TermCode::MPA_CRC));
}

/// A bit flipped in the MPA key: the Responder refuses the Request, the Initiator's
/// connect fails naming the cause.
#[tokio::test(flavor = "current_thread")]
async fn a_flipped_key_bit_fails_the_connect_with_a_named_error() {
    let flip = Fault::Flip { at: 5, bit: 1 };
    let Err(err) = pair(flip, Fault::None, EngineConfig::default()).await else {
        panic!("connected with a corrupt key")
    };
    let text = err.to_string();
    assert!(!text.is_empty(), "{err:?}");
    let mut reverse = EngineConfig::default();
    reverse.mpa.timeout = Duration::from_secs(2);
    let Err(err) = pair(Fault::None, Fault::Flip { at: 5, bit: 1 }, reverse).await else {
        panic!("connected with a corrupt Reply key")
    };
    assert!(err.to_string().contains("MPA"), "{err}");
}

/// A RST in the middle of the Write: both sides end with a lost connection, every request
/// completes (flushed), nothing corrupt is placed.
#[tokio::test(flavor = "current_thread")]
async fn a_reset_mid_transfer_ends_both_sides_cleanly() {
    for (up, down) in [
        (Fault::Reset { after: 20_000 }, Fault::None),
        (Fault::None, Fault::Reset { after: 5_000 }),
    ] {
        let p = pair(up, down, EngineConfig::default())
            .await
            .expect("connect");
        let st = p.traffic().await;
        assert!(st.iter().any(|s| *s != WcStatus::Success), "{up:?}: {st:?}");
        assert_eq!(p.qp.closed().await, QpEnd::ConnectionLost, "{up:?}");
        assert!(p.server_region_is_clean(), "{up:?}");
        let server_end = p.server_qp.await.unwrap().closed().await;
        assert!(
            matches!(server_end, QpEnd::ConnectionLost | QpEnd::Closed),
            "{up:?}: {server_end}"
        );
    }
}
