//! The connections of one run, for both roles: the side channel with its preamble,
//! then `-q` test connections and the barrier after them (perftest's order on siw).

use std::time::{Duration, Instant};

use verbs::{
    Access, ConnectError, Cq, Device, Listener, Mr, Pd, Qp, QpConfig, QpEnd, RemoteBuf, STag,
};

use super::comm::{Comm, Side};
use super::msg::Dest;
use super::report::Outcome;
use super::report::{Printer, RULE};
use super::{Error, Interrupted, Opts, check_settings, preamble, step};

/// Pause between connection attempts the server refused.
const CONNECT_RETRY: Duration = Duration::from_millis(100);
/// How long an interrupted run waits for its connections' closes to be answered.
const CLOSE_NOW_WAIT: Duration = Duration::from_secs(2);
/// Waits longer than this are announced.
const NOTICE_AFTER: Duration = Duration::from_secs(2);

/// Completion queue depth of a test connection (its receives complete there).
const CQ_DEPTH: usize = super::opts::QUEUE_DEPTH + 16;

/// The access our test buffers are registered with.
pub const ACCESS: Access = Access::LOCAL_WRITE
    .union(Access::REMOTE_WRITE)
    .union(Access::REMOTE_READ)
    .union(Access::REMOTE_ATOMIC);

/// One test connection.
#[derive(Debug)]
pub struct Link {
    /// Its QP.
    pub qp: Qp,
    /// The CQ its send queue's work completes on (and its receives, but in `send_bw`).
    pub cq: Cq,
    /// The CQ its receives complete on: `send_bw`'s own (its bidirectional run sends
    /// and receives at once, each side's loop on its own CQ), else [`Self::cq`].
    pub recv_cq: Cq,
}

impl Link {
    /// The CQs of a test connection for `opts`, and the QP configuration naming them.
    fn cqs(dev: &Device, opts: &Opts) -> (Cq, Cq, QpConfig) {
        let cq = dev.create_cq(CQ_DEPTH);
        let recv_cq = if opts.test == super::Test::SendBw {
            dev.create_cq(CQ_DEPTH)
        } else {
            cq.clone()
        };
        let cfg = QpConfig::new(&cq).recv_cq(&recv_cq);
        (cq, recv_cq, cfg)
    }
}

/// A connected run.
#[derive(Debug)]
pub struct Session {
    /// The device.
    pub dev: Device,
    /// The protection domain of every buffer.
    pub pd: Pd,
    /// The side channel.
    pub comm: Comm,
    /// The test connections (`-q`).
    pub links: Vec<Link>,
    /// The peer's perftest version, and whether it is iwperf.
    pub peer_version: super::Peer,
    /// Who the peer is, for the banner.
    pub peer: String,
    /// The memory the peer may reach, kept registered until the session ends (see
    /// [`Self::hold`]).
    held: std::sync::Mutex<Vec<Mr>>,
}

impl Session {
    /// The first test connection to end, and how; pending while none has.
    pub async fn first_end(&self) -> (usize, QpEnd) {
        let mut ends = tokio::task::JoinSet::new();
        for (n, l) in self.links.iter().enumerate() {
            let qp = l.qp.clone();
            ends.spawn(async move { (n, qp.closed().await) });
        }
        match ends.join_next().await {
            Some(Ok(end)) => end,
            _ => std::future::pending().await,
        }
    }

    /// The client: connects to `opts.socket_addr()`, retrying while the server is not
    /// listening yet (perftest's `retry_rdma_connect`).
    pub async fn client(opts: &Opts) -> Result<Self, Error> {
        let dev = Device::open(opts.device_config())?;
        let pd = dev.alloc_pd()?;
        let (mut comm, cfg) = Comm::prepare(&pd, dev.create_cq(16), Side::Client, opts.timeout)?;
        let first = ("connecting to the server", opts.connect_wait);
        let c = connect(opts, &dev, &pd, cfg, first).await?;
        comm.attach(c.qp);
        first_delay(opts).await;
        let peer_version = preamble(&comm).await?;
        tracing::info!(?peer_version, "side channel ready");
        check_settings(&comm, opts, &peer_version).await?;
        let mut links = Vec::with_capacity(opts.qps);
        for i in 0..opts.qps {
            let (cq, recv_cq, cfg) = Link::cqs(&dev, opts);
            let what = format!("test connection {}", i + 1);
            let t = connect(opts, &dev, &pd, cfg, (&what, opts.timeout)).await?;
            links.push(Link {
                qp: t.qp,
                cq,
                recv_cq,
            });
            first_delay(opts).await;
        }
        check_extensions(opts, &links)?;
        comm.xchg(&Dest::SYNC, "barrier").await?;
        let peer = opts.socket_addr().to_string();
        Ok(Self {
            dev,
            pd,
            comm,
            links,
            peer_version,
            peer,
            held: Default::default(),
        })
    }

    /// The server: accepts one client's side channel and test connections on
    /// `listener`.
    pub async fn server(dev: &Device, listener: &Listener, opts: &Opts) -> Result<Self, Error> {
        let incoming = listener.accept().await?;
        let peer = incoming.peer_addr().to_string();
        tracing::info!(%peer, "side channel request");
        let pd = dev.alloc_pd()?;
        let (mut comm, cfg) = Comm::prepare(&pd, dev.create_cq(16), Side::Server, opts.timeout)?;
        let qp = step(
            opts.timeout,
            "the side-channel accept",
            incoming.accept(&pd, cfg, b""),
        )
        .await??;
        comm.attach(qp);
        let peer_version = preamble(&comm).await?;
        check_settings(&comm, opts, &peer_version).await?;
        let mut links = Vec::with_capacity(opts.qps);
        for i in 0..opts.qps {
            let what = format!("test connection {}", i + 1);
            let incoming = step(opts.timeout, &what, listener.accept()).await??;
            let (cq, recv_cq, cfg) = Link::cqs(dev, opts);
            let qp = step(opts.timeout, &what, incoming.accept(&pd, cfg, b"")).await??;
            links.push(Link { qp, cq, recv_cq });
        }
        check_extensions(opts, &links)?;
        comm.xchg(&Dest::SYNC, "barrier").await?;
        Ok(Self {
            dev: dev.clone(),
            pd,
            comm,
            links,
            peer_version,
            peer,
            held: Default::default(),
        })
    }

    /// Registers `data` at tagged offset `va` with [`ACCESS`], held as [`Self::hold`]
    /// holds it.
    pub fn register(&self, data: Vec<u8>, va: u64) -> Result<Mr, Error> {
        let mr = self.pd.register_va(data, va, ACCESS)?;
        self.hold(&mr);
        Ok(mr)
    }

    /// Keeps `mr` registered until the session ends: the peer may reach it until the
    /// connections close, and a run Ctrl-C ended returns (dropping its buffers) before
    /// they do; the peer would meet an invalid STag instead of the close.
    pub fn hold(&self, mr: &Mr) {
        self.held
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(mr.clone());
    }

    /// Our address message for `link`: `buf` at `offset` is where the peer's
    /// operations go.
    pub fn dest(opts: &Opts, link: &Link, buf: &Mr, offset: usize) -> Dest {
        Dest {
            out_reads: opts.out_reads(),
            qpn: link.qp.num().0,
            psn: 0x006a_a864,
            rkey: buf.stag().to_u32(),
            vaddr: buf.to() + offset as u64,
            ..Dest::default()
        }
    }

    /// Our address messages for every link, all pointing at the start of `buf`.
    pub fn dests(&self, opts: &Opts, buf: &Mr) -> Vec<Dest> {
        self.links
            .iter()
            .map(|l| Self::dest(opts, l, buf, 0))
            .collect()
    }

    /// The end of a run whose test gave `out`: its result lines, or why not. A run that
    /// Ctrl-C ended (not `--run_infinitely`) closes its connections at once, so that the
    /// peer learns it, and is [`Interrupted`]; a failure is explained by the connection
    /// that ended ([`Self::explain`]).
    pub async fn finish(
        &self,
        opts: &Opts,
        out: Result<Vec<Outcome>, Error>,
    ) -> Result<Vec<Outcome>, Error> {
        if super::interrupted() && !opts.infinitely {
            if let Err(e) = &out {
                tracing::debug!(%e, "after the interrupt");
            }
            self.close_now().await;
            let lines = out.as_ref().map_or(0, Vec::len);
            return Err(Interrupted { lines }.into());
        }
        match out {
            Ok(out) => Ok(out),
            Err(e) => Err(self.explain(e).await),
        }
    }

    /// `e`, a failed test, explained by the test connection that ended (the peer sent a
    /// Terminate, or went away) if one did within a second: that is what broke the run.
    /// A peer that goes away shows first as a flushed request, which names nothing
    /// (through iwarpd the flush arrives before the end's cause); a connection that
    /// closed, or was lost, under a running test is the peer exiting or ending the test
    /// early (an interrupted iwperf closes its connections).
    pub async fn explain(&self, e: Error) -> Error {
        let Ok((n, end)) = tokio::time::timeout(Duration::from_secs(1), self.first_end()).await
        else {
            return e;
        };
        // What failed here (a flushed request, a receive that cannot come) follows from it.
        tracing::debug!(%e, "after the connection ended");
        crate::end_explains(end, &format!("test connection {}", n + 1), &e).into()
    }

    /// Closes every connection now, waiting a moment at most for the peer's answers:
    /// an interrupted run's end.
    async fn close_now(&self) {
        let qps: Vec<Qp> = self
            .links
            .iter()
            .map(|l| l.qp.clone())
            .chain(self.comm.qp().ok().cloned())
            .collect();
        for qp in &qps {
            qp.disconnect();
        }
        let deadline = tokio::time::Instant::now() + CLOSE_NOW_WAIT;
        for qp in &qps {
            let _ = tokio::time::timeout_at(deadline, qp.closed()).await;
        }
    }

    /// The address exchanges for every link (`mine[i]` for link `i`), then perftest's
    /// banner; returns the peer's answers.
    pub async fn exchange(
        &self,
        opts: &Opts,
        p: &Printer,
        mine: &[Dest],
    ) -> Result<Vec<Dest>, Error> {
        let rem = super::exchange_dests(&self.comm, mine, opts.test).await?;
        self.banner(opts, p, mine, &rem);
        Ok(rem)
    }

    /// Prints perftest's banner: the test, the peer and both addresses.
    fn banner(&self, opts: &Opts, p: &Printer, mine: &[Dest], rem: &[Dest]) {
        let role = if opts.server.is_some() {
            "client"
        } else {
            "server"
        };
        p.info(RULE);
        p.info(&format!(
            "                    {} (iwperf {role}, perftest -R exchange, peer {} {} {})",
            opts.test.title(),
            self.peer,
            if self.peer_version.iwperf {
                "iwperf"
            } else {
                "perftest"
            },
            self.peer_version.version
        ));
        let (ird, ord) = self.links.first().map_or((0, 0), |l| l.qp.ird_ord());
        let mulpdu = self.links.first().map_or(0, |l| l.qp.mulpdu());
        let framing = self
            .links
            .first()
            .map(|l| l.qp.framing())
            .unwrap_or_default();
        let ext = self
            .links
            .first()
            .map_or(verbs::Extensions::NONE, |l| l.qp.extensions());
        p.info(&format!(
            " Transport: IW  QPs: {}  TX depth: {}  Inline: {}[B] (recorded only)  \
             IRD/ORD: {ird}/{ord}  CRC: {}  FPDU: up to {mulpdu}[B]{}  Extensions: {ext}",
            opts.qps,
            opts.tx_depth,
            opts.inline_size,
            // What is in force: the peer may turn CRC on, and through iwarpd its settings
            // apply.
            match (framing.crc, opts.crc || opts.daemon.is_some()) {
                (true, true) => "on",
                (true, false) => "on (the peer asked)",
                (false, _) => "off",
            },
            if opts.large_fpdus {
                " (large asked)"
            } else {
                ""
            }
        ));
        if opts.test.reads() {
            // What bounds the Reads (Atomics) in flight: the ORD in force (`-o` offers it).
            p.info(&format!(" Outstand reads: {ord}"));
        }
        if framing.markers_tx || framing.markers_rx {
            p.info(&format!(" MPA: {framing}"));
        }
        for (side, list) in [("local", mine), ("remote", rem)] {
            for d in list {
                p.info(&format!(
                    " {side} address: QPN {:#06x} RKey {:#010x} VAddr {:#018x}",
                    d.qpn, d.rkey, d.vaddr
                ));
            }
        }
    }

    /// Disconnects every test connection, then the side channel.
    pub async fn close(&self, opts: &Opts) -> Result<(), Error> {
        for l in &self.links {
            l.qp.disconnect();
        }
        for l in &self.links {
            let _ = step(opts.timeout, "the test disconnect", l.qp.closed()).await;
        }
        let qp = self.comm.qp()?;
        qp.disconnect();
        let _ = step(opts.timeout, "the side-channel disconnect", qp.closed()).await;
        Ok(())
    }
}

/// The peer's buffer named by `d`.
pub fn remote(d: &Dest) -> RemoteBuf {
    RemoteBuf {
        stag: STag::from_u32(d.rkey),
        to: d.vaddr,
        len: 0,
    }
}

/// Connects, retrying for `wait` while nothing listens at the server's address: the
/// first connection for `--connect-wait` (perftest's client gives up after about 1 s
/// too), the test connections for `--timeout` (siw's perftest server needs a moment after
/// the side-channel barrier before it listens for them, and answers a SYN with RST then).
async fn connect(
    opts: &Opts,
    dev: &Device,
    pd: &Pd,
    cfg: QpConfig,
    (what, wait): (&str, Duration),
) -> Result<verbs::Connected, Error> {
    let deadline = Instant::now() + wait;
    let addr = opts.socket_addr();
    let mut told = false;
    loop {
        let limit = crate::connect_limit(opts.timeout);
        let res = step(limit, what, dev.connect(pd, addr, cfg.clone(), b"")).await?;
        match res {
            Ok(c) => return Ok(c),
            Err(ConnectError::Io(e)) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
                if Instant::now() >= deadline {
                    return Err(format!(
                        "{what}: nothing is listening at {addr} (connection refused): start the \
                         server first, or check the address and port (--connect-wait SECS waits \
                         for a server that is still starting)"
                    )
                    .into());
                }
                if !told && wait > NOTICE_AFTER {
                    // A long wait is announced instead of going quiet.
                    crate::errln!(
                        "iwperf: nothing is listening at {addr} yet; retrying for up to {} s",
                        wait.as_secs()
                    );
                    told = true;
                }
                tracing::debug!(%e, "{what}: retrying");
                tokio::time::sleep(CONNECT_RETRY).await;
            }
            Err(e) => return Err(format!("{what} at {addr}: {e}").into()),
        }
    }
}

async fn first_delay(opts: &Opts) {
    if !opts.first_delay.is_zero() {
        tokio::time::sleep(opts.first_delay).await;
    }
}

/// Refuses a run whose options need an extension a test connection did not negotiate,
/// as soon as the connections are up: each side says so in its own words, before a side
/// that stops first closes what the other still waits on.
fn check_extensions(opts: &Opts, links: &[Link]) -> Result<(), Error> {
    let agreed = |e| links.iter().all(|l| l.qp.extensions().contains(e));
    if opts.imm && !agreed(verbs::Extensions::SEND_IMMEDIATE) {
        return Err(
            "--imm needs Send with Immediate Data, which the peer did not agree to: \
                    run it with --imm too, without --extensions, or with one that lists \
                    send_imm (Linux siw and hardware RNICs have no such extension)"
                .into(),
        );
    }
    Ok(())
}
