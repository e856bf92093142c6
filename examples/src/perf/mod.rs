//! `iwperf`: perftest's `ib_{write,read,send}_{bw,lat} -R` on this stack.
//!
//! perftest with `-R` makes two rdma_cm connections to the same port: a side channel
//! ([`comm`]) for its parameter exchange ([`msg`]), then the test connection. The
//! sequence, taken from captures of siw's perftest 6.06 (client sends first each time,
//! the server answers in kind):
//!
//! 1. side channel: version (16 octets), cycle buffer (4), cache line (4), MTU (2),
//!    a 56-octet all-zero barrier;
//! 2. the client connects the test QP; another zero barrier;
//! 3. three 56-octet [`msg::Dest`] exchanges (STag and address of each side's buffer);
//! 4. the test: the client RDMA Writes (or Reads) `-n` times `-s` octets at the
//!    server's buffer; the server is passive. `send_bw` makes four Dest exchanges and
//!    the client Sends instead, paced by the server's credit Writes ([`send`]);
//! 5. a Dest exchange, the five-part [`msg::BwReport`] (client to server; the server's
//!    answers are ignored), a final Dest exchange (`send_bw`: only the first Dest
//!    exchange; its server prints its own measurement); both disconnect.
//!
//! The latency tests ([`latency`], [`lat`]; captures `write-lat`, `read-lat`,
//! `send-lat` of perftest 6.06 on siw) share steps 1 and 2, then make four Dest
//! exchanges. `write_lat`: a ping-pong of RDMA Writes, the server first, each side
//! polling the last octet of its buffer for the peer's message number, and no
//! closing exchange. `send_lat`: a Send ping-pong, the client first, then one Dest
//! exchange. `read_lat`: the client Reads one at a time while the server waits in a
//! final Dest exchange.
//!
//! `-a` runs every size in one session, with perftest's barriers between sizes for the
//! Send tests ([`size_barrier`]); `-q N` makes N test connections, whose Dest exchanges
//! go in perftest's order (see `dest_order`).

pub mod bw;
pub mod client;
pub mod comm;
pub mod duplex;
pub mod interrupt;
pub mod lat;
pub mod latency;
pub mod msg;
pub mod opts;
pub mod progress;
pub mod report;
mod rounds;
pub mod send;
pub mod server;
pub mod session;
pub mod stats;

pub use client::run_client;
pub use opts::{Opts, Test};
pub use report::Outcome;
pub use server::serve;

/// Errors, boxed.
pub use crate::Error;
pub(crate) use crate::step;

pub use interrupt::Interrupted;
pub(crate) use interrupt::{interrupt, interrupted};

/// Longer than any run (a century): what a `--run_infinitely` run waits at most.
pub(crate) const FOREVER: std::time::Duration =
    std::time::Duration::from_secs(100 * 365 * 24 * 3600);

/// The tagged offset our test buffers are registered at.
pub const BUF_VA: u64 = 0x0000_5650_0000_0000;

/// The tagged offset of `send_bw`'s credit buffer.
pub const CREDIT_VA: u64 = 0x0000_5651_0000_0000;

/// The address exchanges of `test` (perftest's `ctx_hand_shake`s) for the links whose
/// addresses are `mine`; returns the peer's address for each link. See [`dest_order`].
pub(crate) async fn exchange_dests(
    comm: &comm::Comm,
    mine: &[msg::Dest],
    test: Test,
) -> Result<Vec<msg::Dest>, Error> {
    let mut rem = vec![msg::Dest::default(); mine.len()];
    for i in dest_order(test, mine.len()) {
        let got = comm.xchg(&mine[i].encode(), "address message").await?;
        rem[i] = msg::Dest::decode(&got)
            .ok_or_else(|| format!("address message of {} octets, want 56", got.len()))?;
    }
    Ok(rem)
}

/// One of the barriers `-a` puts between sizes in the Send tests, as perftest's
/// `send_bw` and `send_lat` do (perftest 4.5-0.17 `src/send_bw.c`, `send_lat.c`): each
/// size after the first begins with a Dest exchange (the receiving side has posted its
/// receives for it by then; the address exchanges before the test are the first
/// size's), and in `send_bw` each size also ends with one. Without the one before, the
/// client's Sends of the next size reach a perftest server before its receives.
pub(crate) async fn size_barrier(
    comm: &comm::Comm,
    first: &msg::Dest,
    when: &str,
) -> Result<(), Error> {
    comm.xchg(&first.encode(), &format!("barrier {when} a size"))
        .await?;
    Ok(())
}

/// Which link's address each exchange carries, for `links` links: perftest exchanges
/// every queue pair's address in a round over the queue pairs, twice, with barriers on
/// the first queue pair's around them (captures of perftest 6.06 on siw with `-q 2`:
/// `write_bw` 2,3,2,3,2; `send_bw` 2,3,2,2,3,2). With one link: 3 exchanges for
/// write_bw/read_bw, 4 for send_bw and the latency tests.
fn dest_order(test: Test, links: usize) -> Vec<usize> {
    let round = || 0..links;
    let one = || 0..1;
    let parts: Vec<std::ops::Range<usize>> = match test {
        Test::WriteBw | Test::ReadBw | Test::AtomicBw => vec![round(), round(), one()],
        Test::SendBw => vec![round(), one(), round(), one()],
        _ => vec![round(), one(), one(), one()],
    };
    parts.into_iter().flatten().collect()
}

#[cfg(test)]
mod dest_order_tests {
    use super::*;

    #[test]
    fn several_queue_pairs_exchange_in_two_rounds_as_perftest_does() {
        let one = [(Test::WriteBw, 3), (Test::ReadBw, 3), (Test::SendBw, 4)];
        for (test, n) in one.into_iter().chain([(Test::SendLat, 4)]) {
            assert_eq!(dest_order(test, 1).len(), n, "{test:?}");
        }
        assert_eq!(
            dest_order(Test::WriteBw, 2),
            [0, 1, 0, 1, 0],
            "write_bw -q 2 on siw"
        );
        assert_eq!(
            dest_order(Test::SendBw, 2),
            [0, 1, 0, 0, 1, 0],
            "send_bw -q 2 on siw"
        );
    }
}

/// The peer as the version message shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Peer {
    /// Its perftest version text.
    pub version: String,
    /// It is iwperf (its version message carries our mark).
    pub iwperf: bool,
    /// It exchanges [`msg::Settings`] (an iwperf of this version or later).
    pub settings: bool,
    /// Its cycle buffer (perftest: the page size): for messages up to half of it, a
    /// perftest client walks the remote address over this many octets, in steps of the
    /// size rounded up to a cache line, instead of writing one place.
    pub cycle_buffer: usize,
}

impl Peer {
    /// The octets a buffer the peer's client writes or reads must span for messages of
    /// up to `size` octets: perftest walks the cycle buffer (ours or the peer's, the larger)
    /// for sizes up to half of it.
    pub fn target_len(&self, size: usize) -> usize {
        size.max(self.cycle_buffer.max(msg::CYCLE_BUFFER))
    }
}

/// The side-channel steps before the test connection, common to both roles:
/// version, system data, MTU, barrier.
pub(crate) async fn preamble(comm: &comm::Comm) -> Result<Peer, Error> {
    let got = comm
        .xchg(&msg::version_tagged(msg::VERSION), "version message")
        .await?;
    let mut sys = Vec::new();
    for data in msg::SYS_DATA {
        sys.push(comm.xchg(data, "system data message").await?);
    }
    comm.xchg(&msg::Dest::SYNC, "barrier").await?;
    let cycle_buffer = sys
        .first()
        .and_then(|c| <[u8; 4]>::try_from(c.as_slice()).ok())
        .map_or(0, |c| u32::from_be_bytes(c) as usize)
        // A page at most 1 MiB (a peer sending more is not believed).
        .min(1 << 20);
    Ok(Peer {
        version: msg::parse_version(&got),
        iwperf: msg::is_iwperf(&got),
        settings: msg::exchanges_settings(&got),
        cycle_buffer,
    })
}

/// Between two iwperf: both sides' [`msg::Settings`] cross, and a mismatch ends the run
/// at once on both sides, naming both (perftest peers keep perftest's exchange).
pub(crate) async fn check_settings(
    comm: &comm::Comm,
    opts: &Opts,
    peer: &Peer,
) -> Result<(), Error> {
    if !peer.settings {
        return Ok(());
    }
    let mine = opts.settings();
    let got = comm.xchg(&mine.encode(), "settings message").await?;
    let theirs = msg::Settings::decode(&got).ok_or("the peer iwperf sent no settings message")?;
    if !mine.agrees(&theirs) {
        return Err(format!(
            "the two sides are set up for different tests: here `{}`, at the peer `{}`; \
             run both with the same test and flags",
            mine.describe(),
            theirs.describe()
        )
        .into());
    }
    Ok(())
}

#[cfg(test)]
mod tests;
