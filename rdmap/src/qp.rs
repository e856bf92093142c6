//! A queue pair's number and how it ended: the names the engine and the verbs API share.

use core::fmt;

use crate::term::TermCode;

/// A queue pair number, unique within one engine (one device).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct QpNum(pub u32);

impl fmt::Display for QpNum {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "qp{}", self.0)
    }
}

/// How a queue pair ended.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum QpEnd {
    /// Both sides closed gracefully.
    Closed,
    /// The peer sent this Terminate.
    TerminatedByPeer(TermCode),
    /// This side detected a fatal error and sent this Terminate.
    Terminated(TermCode),
    /// The TCP connection failed or the peer closed it without a graceful close.
    ConnectionLost,
    /// Nothing moved for longer than the engine's idle or stall timeout allows.
    TimedOut,
    /// The queue pair moved to another process (live migration between daemons), which
    /// runs the connection now; nothing was flushed here.
    MovedAway,
    /// Its completion queue overflowed: completions came faster than the application
    /// took them, past the queue's room. As an RNIC does, the queue pair was terminated
    /// (RDMAP local catastrophic error) and completions past the room were lost.
    CqOverrun,
    /// The application wrote into its queue pair's shared rings what no library writes
    /// (an entry or an index that cannot be used); the daemon closed the queue pair.
    Misused,
    /// The device under the queue pair went away (for example the daemon at this
    /// control socket exited or was restarted): nothing more runs on it.
    DeviceLost(&'static str),
}

impl fmt::Display for QpEnd {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Closed => f.write_str("closed gracefully"),
            Self::TerminatedByPeer(c) => write!(f, "the peer sent a Terminate: {c}"),
            Self::Terminated(c) => write!(f, "sent a Terminate: {c}"),
            Self::ConnectionLost => f.write_str("the TCP connection was lost"),
            Self::TimedOut => f.write_str(
                "nothing moved on the connection for longer than its idle or stall timeout",
            ),
            Self::MovedAway => f.write_str("moved to another process, which runs it now"),
            Self::CqOverrun => f.write_str(
                "its completion queue overflowed (completions came faster than the \
                 application took them), so it was terminated: poll the completion queue \
                 more often, or make it deeper",
            ),
            Self::Misused => f.write_str(
                "the application wrote garbage into its shared rings (an entry or index no \
                 library writes), so the daemon closed it",
            ),
            Self::DeviceLost(what) => {
                write!(
                    f,
                    "{what} went away (it exited or was restarted): open the device again"
                )
            }
        }
    }
}
