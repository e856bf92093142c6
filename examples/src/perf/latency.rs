//! The latency tests for both roles on a session's one link: buffers, the address
//! exchanges, every size's measured loop ([`super::lat`]) and the closing exchange.
//!
//! From captures of perftest 6.06 on siw: four address exchanges precede the test;
//! `write_lat` ends without another exchange, `read_lat` and `send_lat` with one
//! (the `read_lat` server idles until then and prints no result).

use super::lat::{self, Run};
use super::msg::Dest;
use super::report::{LatReport, Outcome, Printer};
use super::send::Inbox;
use super::session::{Link, Session, remote};
use super::stats::Intervals;
use super::{BUF_VA, Error, Opts, Test};
use verbs::{Mr, RemoteBuf};

/// Why the `write_lat` server cannot serve perftest's client.
const WRITE_LAT_SERVER: &str = "write_lat server against perftest's client: perftest's \
    server writes first, but this stack, as an MPA Responder, sends nothing before the \
    client's first FPDU (RFC 5044) and perftest's client waits for the server; run \
    iwperf as the write_lat client instead (siw's ib_write_lat as the server)";

/// Receives kept posted in `send_lat` (one is in use at a time).
const SEND_LAT_RX: usize = 16;

/// How long the `read_lat` server waits for the client to finish.
const READ_WAIT: std::time::Duration = std::time::Duration::from_secs(3600);

/// Runs `opts.test` (a latency test) on `s` and returns the result lines printed.
pub async fn run(opts: &Opts, s: &Session, p: &Printer) -> Result<Vec<Outcome>, Error> {
    let link = s.links.first().ok_or("no test connection")?;
    let client = opts.server.is_some();
    let size = opts.buf_size();
    match opts.test {
        Test::WriteLat => {
            // perftest's server writes first, but our stack follows RFC 5044: an MPA
            // Responder sends nothing before the Initiator's first FPDU. Between two
            // iwperf the client writes first; against perftest only the client role works.
            let first = match (client, s.peer_version.iwperf) {
                (true, peer_iwperf) => peer_iwperf,
                (false, true) => false,
                (false, false) => return Err(WRITE_LAT_SERVER.into()),
            };
            // Outgoing message at 0, the peer's Writes land at `size` (perftest's two
            // halves of one buffer).
            let buf = s.register(vec![0; 2 * size], BUF_VA)?;
            let mine = [Session::dest(opts, link, &buf, size)];
            let rem = s.exchange(opts, p, &mine).await?;
            let dst = rem.first().map(remote).ok_or("no peer address")?;
            let kind = Kind::Write {
                buf: &buf,
                inbox: size,
                dst,
                first,
            };
            sizes(opts, p, link, &kind, None).await
        }
        Test::ReadLat | Test::AtomicLat => {
            let fill = if client { 0 } else { 0xa5 };
            let buf = s.register(vec![fill; size], BUF_VA)?;
            let mine = [Session::dest(opts, link, &buf, 0)];
            let rem = s.exchange(opts, p, &mine).await?;
            let out = if client {
                let src = rem.first().map(remote).ok_or("no peer address")?;
                let kind = if opts.test == Test::AtomicLat {
                    Kind::Atomic {
                        buf: &buf,
                        dst: src,
                    }
                } else {
                    Kind::Read { buf: &buf, src }
                };
                let out = sizes(opts, p, link, &kind, None).await?;
                if !super::interrupted() {
                    s.comm.xchg(&mine[0].encode(), "closing barrier").await?;
                }
                out
            } else {
                let barrier = mine[0].encode();
                let closing = s.comm.xchg_within(&barrier, "closing barrier", READ_WAIT);
                tokio::select! {
                    r = closing => {
                        r?;
                    }
                    // The client measures: nothing to print here.
                    () = super::interrupt::wait() => {}
                }
                Vec::new()
            };
            Ok(out)
        }
        Test::SendLat => {
            let inbox = Inbox::new(&s.pd, SEND_LAT_RX, size)?;
            s.hold(inbox.mr());
            inbox.post_all(&link.qp)?;
            let buf = s.register(vec![0; size], BUF_VA)?;
            let mine = [Session::dest(opts, link, &buf, 0)];
            s.exchange(opts, p, &mine).await?;
            let kind = Kind::Send {
                inbox: &inbox,
                buf: &buf,
                first: client,
            };
            let out = sizes(opts, p, link, &kind, Some((s, &mine[0]))).await?;
            if !super::interrupted() {
                s.comm.xchg(&mine[0].encode(), "closing barrier").await?;
            }
            Ok(out)
        }
        Test::WriteBw | Test::ReadBw | Test::SendBw | Test::AtomicBw => {
            Err(format!("{} is not a latency test", opts.test.name()).into())
        }
    }
}

/// One latency test's buffers and role.
#[derive(Debug)]
enum Kind<'a> {
    /// `write_lat`: our message at 0 of `buf`, the peer's at `inbox`.
    Write {
        buf: &'a Mr,
        inbox: usize,
        dst: RemoteBuf,
        first: bool,
    },
    /// `read_lat` (client).
    Read { buf: &'a Mr, src: RemoteBuf },
    /// `atomic_lat` (client): `-A` on the peer's word at `dst`, results into `buf`.
    Atomic { buf: &'a Mr, dst: RemoteBuf },
    /// `send_lat`.
    Send {
        inbox: &'a Inbox,
        buf: &'a Mr,
        first: bool,
    },
}

/// Runs the test for every size and prints its line. `barriers`: `send_lat`'s
/// session and first address, for perftest's barrier before every size after the first.
async fn sizes(
    opts: &Opts,
    p: &Printer,
    link: &Link,
    kind: &Kind<'_>,
    barriers: Option<(&Session, &Dest)>,
) -> Result<Vec<Outcome>, Error> {
    p.header();
    let mut out = Vec::new();
    for (n, size) in opts.sizes().into_iter().enumerate() {
        if let Some((s, first)) = barriers
            && n > 0
        {
            super::size_barrier(&s.comm, first, "before").await?;
        }
        let mut run = Run::new(opts, size);
        let posted = match *kind {
            Kind::Write {
                buf,
                inbox,
                dst,
                first,
            } => lat::write(&mut run, &link.qp, buf, inbox, dst, first).await?,
            Kind::Read { buf, src } => lat::read(&mut run, &link.qp, &link.cq, buf, src).await?,
            Kind::Atomic { buf, dst } => {
                let op = (opts.atomic, dst);
                lat::atomic(&mut run, &link.qp, &link.cq, buf, op).await?
            }
            Kind::Send { inbox, buf, first } => {
                lat::send(&mut run, &link.qp, &link.cq, inbox, buf, first).await?
            }
        };
        if let Some(o) = outcome(opts, size, &posted) {
            p.line(&o);
            out.push(o);
        }
        if super::interrupted() {
            // Ctrl-C: no more sizes.
            break;
        }
    }
    p.footer();
    Ok(out)
}

/// The latency line of one run from its post timestamps.
pub fn outcome(opts: &Opts, size: usize, posted: &Intervals) -> Option<Outcome> {
    let stats = posted.stats(opts.test.rtt_factor())?;
    // -D, or a run Ctrl-C cut short: what was measured.
    let iters = match opts.duration {
        None if !super::interrupted() => opts.iters,
        _ => posted.posts(),
    };
    Some(Outcome::Lat(LatReport {
        size: size as u64,
        iters,
        stats,
    }))
}
