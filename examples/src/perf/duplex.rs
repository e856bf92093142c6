//! `-b`: perftest's bidirectional bandwidth tests. Both sides run the test toward each
//! other at once, then swap their reports and print the sum, so the run is the same
//! for both roles. The barriers follow perftest 4.5-0.17 (`write_bw.c`, `send_bw.c`):
//!
//! - `write_bw`/`read_bw`: for every size a barrier, both run, with `-a` another
//!   barrier, then the five-part reports both ways;
//! - `send_bw`: both post receives and give each other credits as in one-way runs
//!   ([`super::send`]); for every size after the first a barrier, both Send and
//!   receive, the reports both ways (not with `-D`: each side prints its own), with
//!   `-a` another barrier;
//!
//! and a closing barrier. `--run_infinitely` (`write_bw`, `read_bw`) runs without
//! barriers or swaps until interrupted, each side printing its own numbers doubled, as
//! perftest does; then the closing barrier.

use std::pin::pin;

use tokio::sync::watch;
use verbs::Mr;

use super::msg::{BwReport, Dest};
use super::report::{self, Outcome, Printer};
use super::rounds::{
    credit_buffers, inboxes, rdma_round, receive_round, reported_iters, send_round,
};
use super::session::Session;
use super::{BUF_VA, Error, FOREVER, Opts, Test, interrupt, size_barrier};

/// Runs `opts.test` (a bandwidth test) in both directions on `s`; returns the lines
/// printed.
pub async fn run(opts: &Opts, s: &Session, p: &Printer) -> Result<Vec<Outcome>, Error> {
    match opts.test {
        Test::WriteBw | Test::ReadBw | Test::AtomicBw => rdma(opts, s, p).await,
        Test::SendBw => send(opts, s, p).await,
        t => Err(format!("-b: {} is not a bandwidth test", t.name()).into()),
    }
}

/// Both sides Write (Read) at each other's buffer.
async fn rdma(opts: &Opts, s: &Session, p: &Printer) -> Result<Vec<Outcome>, Error> {
    let len = s.peer_version.target_len(opts.buf_size());
    let buf = s.register(vec![0x5a; len], BUF_VA)?;
    let mine = s.dests(opts, &buf);
    let rem = s.exchange(opts, p, &mine).await?;
    let first = mine.first().copied().unwrap_or_default();
    let cycle = s.peer_version.target_len(0);
    p.header();
    if opts.infinitely {
        return rdma_forever(opts, s, p, (&buf, &rem, cycle), &first).await;
    }
    let mut out = Vec::new();
    for size in opts.sizes() {
        size_barrier(&s.comm, &first, "before").await?;
        let tl = rdma_round(opts, s, &buf, &rem, size, cycle).await?;
        let mine = report::from_timeline(size, reported_iters(&tl), &tl, opts.gbits);
        if super::interrupted() {
            return Ok(own_line_only(p, out, mine));
        }
        if opts.all_sizes {
            size_barrier(&s.comm, &first, "after").await?;
        }
        let line = Outcome::Bw(mine.plus(&swap_reports(s, &mine).await?));
        p.line(&line);
        out.push(line);
    }
    p.footer();
    s.comm.xchg(&first.encode(), "closing barrier").await?;
    Ok(out)
}

/// `--run_infinitely -b`: intervals without barriers or swapped reports, each side
/// printing its own numbers doubled (perftest's lines), until either side is
/// interrupted. Then each sends its closing message: the first one the other receives
/// while still running ends its run too.
async fn rdma_forever(
    opts: &Opts,
    s: &Session,
    p: &Printer,
    (buf, rem, cycle): (&Mr, &[Dest], usize),
    first: &Dest,
) -> Result<Vec<Outcome>, Error> {
    let rounds = async {
        let mut out = Vec::new();
        for size in opts.rounds() {
            let tl = rdma_round(opts, s, buf, rem, size, cycle).await?;
            let mine = report::from_timeline(size, reported_iters(&tl), &tl, opts.gbits);
            let line = Outcome::Bw(mine.plus(&mine));
            p.line(&line);
            out.push(line);
        }
        Ok::<_, Error>(out)
    };
    let peer_ended = async {
        let got = s.comm.recv("closing barrier", FOREVER).await;
        interrupt();
        got
    };
    let (mut rounds, mut peer_ended) = (pin!(rounds), pin!(peer_ended));
    let mut heard = false;
    let out = tokio::select! {
        out = &mut rounds => out?,
        got = &mut peer_ended => {
            got?;
            heard = true;
            rounds.await?
        }
    };
    p.footer();
    s.comm.send(&first.encode(), "closing barrier").await?;
    if !heard {
        s.comm.recv("closing barrier", opts.timeout).await?;
    }
    Ok(out)
}

/// Both sides Send to each other and receive, each pacing its Sends by the credits
/// the other writes.
async fn send(opts: &Opts, s: &Session, p: &Printer) -> Result<Vec<Outcome>, Error> {
    let inboxes = inboxes(opts, s)?;
    let payload = s.register(vec![0x5a; opts.buf_size()], BUF_VA)?;
    let (credits, mine) = credit_buffers(opts, s)?;
    let rem = s.exchange(opts, p, &mine).await?;
    let first = mine.first().copied().unwrap_or_default();
    p.header();
    let mut out = Vec::new();
    for (n, size) in opts.sizes().into_iter().enumerate() {
        if n > 0 {
            size_barrier(&s.comm, &first, "before").await?;
        }
        let (stop_tx, stop_rx) = watch::channel(false);
        let sending = async {
            let tl = send_round(opts, s, &credits, &payload, size, 0).await;
            // -D: our Sends are done; our receives end once the peer's stop too.
            let _ = stop_tx.send(true);
            tl
        };
        let (sent, received) = tokio::join!(
            sending,
            receive_round(opts, s, (p, size), &inboxes, &rem, &stop_rx)
        );
        let (sent, _) = (sent?, received?);
        let mine = report::from_timeline(size, reported_iters(&sent), &sent, opts.gbits);
        if super::interrupted() {
            return Ok(own_line_only(p, out, mine));
        }
        let line = if opts.duration.is_some() {
            mine
        } else {
            mine.plus(&swap_reports(s, &mine).await?)
        };
        p.line(&Outcome::Bw(line));
        out.push(Outcome::Bw(line));
        if opts.all_sizes {
            size_barrier(&s.comm, &first, "after").await?;
        }
    }
    p.footer();
    s.comm.xchg(&first.encode(), "closing barrier").await?;
    Ok(out)
}

/// Ctrl-C during a bidirectional size: the peer is still running, so there is no
/// report to swap; `mine` alone ends the table and `out`.
fn own_line_only(p: &Printer, mut out: Vec<Outcome>, mine: BwReport) -> Vec<Outcome> {
    p.line(&Outcome::Bw(mine));
    p.footer();
    out.push(Outcome::Bw(mine));
    out
}

/// perftest's `xchg_bw_reports`: our report's five parts for the peer's.
async fn swap_reports(s: &Session, mine: &BwReport) -> Result<BwReport, Error> {
    let mut parts: [Vec<u8>; 5] = Default::default();
    for (got, part) in parts.iter_mut().zip(mine.encode()) {
        *got = s.comm.xchg(&part, "report message").await?;
    }
    BwReport::decode(&parts).ok_or_else(|| "a report message shorter than 8 octets".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_line_is_the_sum_of_both_sides() {
        let a = BwReport {
            size: 4096,
            iters: 100,
            bw_peak: 2.0,
            bw_avg: 1.5,
            msg_rate: 0.25,
        };
        let b = BwReport {
            size: 4096,
            iters: 100,
            bw_peak: 1.0,
            bw_avg: 0.5,
            msg_rate: 0.5,
        };
        let sum = a.plus(&b);
        assert_eq!((sum.size, sum.iters), (4096, 100));
        assert_eq!((sum.bw_peak, sum.bw_avg, sum.msg_rate), (3.0, 2.0, 0.75));
    }
}
