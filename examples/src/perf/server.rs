//! The server: accepts the side channel and the test connections, answers the
//! exchange, and either stays passive (`write_bw`, `read_bw`: it prints the client's
//! report), receives (`send_bw`: it prints its own measurement) or plays its part
//! of a latency test.

use tokio::sync::watch;
use verbs::{Device, Listener};

use super::msg::BwReport;
use super::report::{self, Outcome, Printer, Timeline};
use super::rounds::{TEST_WAIT, inboxes, receive_round, reported_iters, test_wait};
use super::session::Session;
use super::{BUF_VA, Error, Opts, Test, latency};

/// Serves one perftest client on `listener`; returns the result lines it printed.
pub async fn serve(dev: &Device, listener: &Listener, opts: &Opts) -> Result<Vec<Outcome>, Error> {
    let s = Session::server(dev, listener, opts).await?;
    let p = Printer::new(opts);
    super::interrupt::watch(opts.infinitely)?;
    let out = match opts.test {
        _ if opts.bidirectional => super::duplex::run(opts, &s, &p).await,
        Test::WriteBw | Test::ReadBw | Test::AtomicBw => passive(opts, &s, &p).await,
        Test::SendBw => send_bw(opts, &s, &p).await,
        Test::WriteLat | Test::ReadLat | Test::SendLat | Test::AtomicLat => {
            latency::run(opts, &s, &p).await
        }
    };
    let out = s.finish(opts, out).await?;
    s.close(opts).await?;
    Ok(out)
}

/// `write_bw`/`read_bw`: the client works on our buffer; we wait for its report.
async fn passive(opts: &Opts, s: &Session, p: &Printer) -> Result<Vec<Outcome>, Error> {
    // A perftest client walks small messages over its cycle buffer: ours spans it.
    let len = s.peer_version.target_len(opts.buf_size());
    let buf = s.register(vec![0xa5; len], BUF_VA)?;
    let mine = s.dests(opts, &buf);
    s.exchange(opts, p, &mine).await?;
    let first = mine.first().copied().unwrap_or_default();
    // The client's test runs on our buffer; if a test connection ends meanwhile (the
    // client broke a rule and we sent a Terminate, or it went away), the client will
    // not come to the barrier: say why at once instead of waiting.
    let barrier = first.encode();
    tokio::select! {
        r = s.comm.xchg_within(&barrier, "end barrier", test_wait(opts)) => {
            r?;
        }
        _ = s.first_end() => return Err("the client did not come to the end barrier".into()),
        // The client measures: nothing to print here.
        () = super::interrupt::wait() => return Ok(Vec::new()),
    }
    let mut parts: [Vec<u8>; 5] = Default::default();
    for part in &mut parts {
        *part = s
            .comm
            .xchg(&[0; BwReport::PART_LEN], "report message")
            .await?;
    }
    let rep = BwReport::decode(&parts).ok_or("a report message shorter than 8 octets")?;
    s.comm.xchg(&first.encode(), "closing barrier").await?;
    let planned = opts.iters.saturating_mul(opts.qps as u64);
    if opts.duration.is_none() && rep.iters < planned {
        // An interrupted client ends its run early and reports what it measured.
        crate::errln!(
            "iwperf: the client ended the test early: {} of {planned} iterations",
            rep.iters
        );
    }
    p.header();
    p.line(&Outcome::Bw(rep));
    p.footer();
    Ok(vec![Outcome::Bw(rep)])
}

/// The report of a receiving side's timeline. Receives complete in bursts (many per
/// TCP read), so intervals between them say nothing about a peak rate: the receiver
/// reports its average as the peak.
pub(crate) fn receive_report(opts: &Opts, size: usize, tl: &Timeline) -> BwReport {
    let mut rep = report::from_timeline(size, reported_iters(tl), tl, opts.gbits);
    rep.bw_peak = rep.bw_avg;
    rep
}

/// `send_bw`: receives on every link, writes credits, measures. Its address messages
/// name credit buffers as the client's do (perftest's server sends its own too; only a
/// bidirectional run uses them).
async fn send_bw(opts: &Opts, s: &Session, p: &Printer) -> Result<Vec<Outcome>, Error> {
    let inboxes = inboxes(opts, s)?;
    let (_credits, mine) = super::rounds::credit_buffers(opts, s)?;
    let rem = s.exchange(opts, p, &mine).await?;
    p.header();
    let first = mine.first().copied().unwrap_or_default();
    let mut out = Vec::new();
    for (n, size) in opts.sizes().into_iter().enumerate() {
        if opts.all_sizes && n > 0 {
            super::size_barrier(&s.comm, &first, "before").await?;
        }
        let (stop_tx, stop_rx) = watch::channel(false);
        let round = receive_round(opts, s, (p, size), &inboxes, &rem, &stop_rx);
        let tl = if opts.duration.is_some() {
            // -D, --run_infinitely: the client's end barrier ends the receives.
            let end = async {
                tokio::select! {
                    r = s.comm.recv("end barrier", test_wait(opts)) => {
                        r?;
                    }
                    // Ctrl-C here ends the receives too.
                    () = super::interrupt::wait() => {}
                }
                let _ = stop_tx.send(true);
                Ok::<_, Error>(())
            };
            let (tl, ended) = tokio::join!(round, end);
            ended?;
            tl?
        } else {
            round.await?
        };
        if !opts.infinitely {
            // (--run_infinitely printed its lines every interval.)
            let rep = receive_report(opts, size, &tl);
            p.line(&Outcome::Bw(rep));
            out.push(Outcome::Bw(rep));
        }
        if super::interrupted() {
            // Ctrl-C here: the client is still sending, no barrier to meet.
            p.footer();
            return Ok(out);
        }
        if opts.infinitely {
            break;
        }
        if opts.all_sizes {
            super::size_barrier(&s.comm, &first, "after").await?;
        }
    }
    p.footer();
    if opts.duration.is_some() {
        s.comm.send(&first.encode(), "end barrier").await?;
    } else {
        s.comm
            .xchg_within(&first.encode(), "end barrier", TEST_WAIT)
            .await?;
    }
    Ok(out)
}
