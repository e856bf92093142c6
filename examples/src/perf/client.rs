//! The client: connects, exchanges parameters, runs the test for every size and
//! prints the result lines.

use super::msg::BwReport;
use super::report::{self, Outcome, Printer};
use super::rounds::{credit_buffers, rdma_round, reported_iters, send_round};
use super::session::Session;
use super::{BUF_VA, Error, Opts, Test, latency};

/// Work requests kept in flight by default (perftest's TX depth).
pub const TX_DEPTH: usize = super::opts::DEFAULT_TX_DEPTH;

/// Runs the client side of `opts.test` against the server at `opts.socket_addr()`,
/// prints perftest's table (or JSON) and returns the result lines.
pub async fn run_client(opts: &Opts) -> Result<Vec<Outcome>, Error> {
    let s = Session::client(opts).await?;
    let p = Printer::new(opts);
    super::interrupt::watch(opts.infinitely)?;
    let out = match opts.test {
        _ if opts.bidirectional => super::duplex::run(opts, &s, &p).await,
        Test::WriteBw | Test::ReadBw | Test::AtomicBw => rdma_bw(opts, &s, &p).await,
        Test::SendBw => send_bw(opts, &s, &p).await,
        Test::WriteLat | Test::ReadLat | Test::SendLat | Test::AtomicLat => {
            latency::run(opts, &s, &p).await
        }
    };
    let out = s.finish(opts, out).await?;
    let who = if opts.daemon.is_some() {
        "iwarpd"
    } else {
        "the engine"
    };
    for (i, link) in s.links.iter().enumerate() {
        let st = link.qp.stats().push;
        if st.executed + st.sq_path == 0 {
            // The push path is off: nothing to say.
            continue;
        }
        let discards: Vec<String> = verbs::PUSH_DISCARD_REASONS
            .iter()
            .zip(st.discards)
            .filter(|(_, n)| *n > 0)
            .map(|(r, n)| format!("{r} {n}"))
            .collect();
        // Through iwarpd: how often its servant slept (each a wake-up on the path).
        let slept = match opts.daemon {
            Some(_) => format!(
                "; iwarpd slept {}, read {} itself",
                crate::words::count(st.daemon_sleeps, "time", "times"),
                crate::words::count(st.daemon_reads, "input", "inputs")
            ),
            None => String::new(),
        };
        crate::errln!(
            "iwperf: QP {}: {who} ran {} from pushed messages, {} from the send \
             queue; push discards: {}{slept}",
            i + 1,
            crate::words::count(st.executed, "request", "requests"),
            st.sq_path,
            if discards.is_empty() {
                "none".to_owned()
            } else {
                discards.join(", ")
            }
        );
    }
    s.close(opts).await?;
    Ok(out)
}

/// `write_bw`/`read_bw`: every QP Writes (Reads) at the server's buffer; then the
/// report goes to the server.
async fn rdma_bw(opts: &Opts, s: &Session, p: &Printer) -> Result<Vec<Outcome>, Error> {
    // Small messages walk a cycle buffer on both sides, as perftest's do.
    let len = s.peer_version.target_len(opts.buf_size());
    let buf = s.register(vec![0x5a; len], BUF_VA)?;
    let mine = s.dests(opts, &buf);
    let rem = s.exchange(opts, p, &mine).await?;
    p.header();
    let cycle = s.peer_version.target_len(0);
    let mut out = Vec::new();
    let mut last = BwReport::default();
    for size in opts.rounds() {
        let tl = rdma_round(opts, s, &buf, &rem, size, cycle).await?;
        last = report::from_timeline(size, reported_iters(&tl), &tl, opts.gbits);
        p.line(&Outcome::Bw(last));
        out.push(Outcome::Bw(last));
    }
    p.footer();
    let first = mine.first().copied().unwrap_or_default();
    s.comm.xchg(&first.encode(), "end barrier").await?;
    for part in last.encode() {
        s.comm.xchg(&part, "report message").await?;
    }
    s.comm.xchg(&first.encode(), "closing barrier").await?;
    Ok(out)
}

/// `send_bw`: every QP Sends, paced by the credits the server writes into that QP's
/// credit buffer. `-a`: perftest's barriers around every size (see [`super::size_barrier`]).
async fn send_bw(opts: &Opts, s: &Session, p: &Printer) -> Result<Vec<Outcome>, Error> {
    let payload = s.register(vec![0x5a; opts.buf_size()], BUF_VA)?;
    let (credits, mine) = credit_buffers(opts, s)?;
    s.exchange(opts, p, &mine).await?;
    p.header();
    let first = mine.first().copied().unwrap_or_default();
    let mut out = Vec::new();
    // --run_infinitely: the Sends of every interval so far, per link (one count).
    let mut sent = 0;
    for (n, size) in opts.rounds().enumerate() {
        if opts.all_sizes && n > 0 {
            super::size_barrier(&s.comm, &first, "before").await?;
        }
        let tl = send_round(opts, s, &credits, &payload, size, sent).await?;
        if opts.infinitely {
            sent += (tl.completed.len() / s.links.len().max(1)) as u64;
        }
        let rep = report::from_timeline(size, reported_iters(&tl), &tl, opts.gbits);
        p.line(&Outcome::Bw(rep));
        out.push(Outcome::Bw(rep));
        if super::interrupted() && !opts.infinitely && opts.duration.is_none() {
            // The server counts -n receives: it will not come to a barrier now.
            p.footer();
            return Ok(out);
        }
        if opts.all_sizes {
            super::size_barrier(&s.comm, &first, "after").await?;
        }
    }
    p.footer();
    if opts.infinitely && !s.peer_version.iwperf {
        // perftest's server receives until it is killed: there is no end to agree on.
        return Ok(out);
    }
    // send_bw's server measures its own receives: no report, no second barrier.
    s.comm.xchg(&first.encode(), "end barrier").await?;
    Ok(out)
}
