//! What the analyzer reports: findings with a severity, the check that raised them and the
//! frame number.

use std::fmt;

use serde::Serialize;

/// Direction of a byte stream within a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Dir {
    /// From the MPA Initiator (the side that sent the Request) to the Responder.
    InitiatorToResponder,
    /// From the Responder to the Initiator.
    ResponderToInitiator,
}

impl Dir {
    /// The other direction.
    pub fn reverse(self) -> Self {
        match self {
            Self::InitiatorToResponder => Self::ResponderToInitiator,
            Self::ResponderToInitiator => Self::InitiatorToResponder,
        }
    }

    /// 0 for initiator-to-responder, 1 for the reverse (an index into per-direction arrays).
    pub fn index(self) -> usize {
        match self {
            Self::InitiatorToResponder => 0,
            Self::ResponderToInitiator => 1,
        }
    }

    /// Short arrow form: `I->R` or `R->I`.
    pub fn arrow(self) -> &'static str {
        match self {
            Self::InitiatorToResponder => "I->R",
            Self::ResponderToInitiator => "R->I",
        }
    }
}

/// How bad a finding is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Severity {
    /// Worth knowing; not an error (e.g. a Terminate message, requests unanswered at the
    /// end of the capture).
    Info,
    /// The analysis is incomplete here (missing TCP data, unframable stream).
    Warning,
    /// A protocol violation.
    Violation,
}

/// Which check raised a finding.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Check {
    /// MPA Request/Reply frame: invalid, reserved bits, reject.
    MpaFrame,
    /// TCP data missing from the capture.
    Gap,
    /// FPDU framing lost or found again, partial FPDU at the end.
    Framing,
    /// CRC32c mismatch.
    Crc,
    /// Marker with a wrong FPDUPTR or reserved half.
    Marker,
    /// ULPDU too short for its headers.
    Malformed,
    /// DDP or RDMAP version not 1.
    Version,
    /// Reserved bits or PAD octets not zero.
    Reserved,
    /// Queue number that does not fit the opcode, tagged/untagged mismatch, unknown opcode.
    QueueOpcode,
    /// MSN not in sequence on its queue.
    Msn,
    /// MO (untagged) or TO (tagged) not continuous within a message.
    Offset,
    /// Read Response / Atomic Response not matching the outstanding request.
    Pairing,
    /// More outstanding Read/Atomic requests than the peer's IRD.
    Ird,
    /// Peer-to-peer RTR missing, of a type not negotiated, or preceded by responder data.
    Rtr,
    /// Use of an STag after a Send with Invalidate invalidated it.
    InvalidatedStag,
    /// A Terminate message.
    Terminate,
    /// Requests still unanswered at the end of the capture.
    Unanswered,
}

/// One finding.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Finding {
    /// Frame number (1-based) where it was seen.
    pub frame: u64,
    /// Severity.
    pub severity: Severity,
    /// The check.
    pub check: Check,
    /// Direction of the data concerned, if any.
    pub dir: Option<Dir>,
    /// Human-readable explanation.
    pub message: String,
}

impl Finding {
    /// A violation found in `dir` at `frame`.
    pub fn violation(frame: u64, check: Check, dir: Dir, message: String) -> Self {
        Self {
            frame,
            severity: Severity::Violation,
            check,
            dir: Some(dir),
            message,
        }
    }

    /// A finding of any severity.
    pub fn new(
        frame: u64,
        severity: Severity,
        check: Check,
        dir: Option<Dir>,
        message: String,
    ) -> Self {
        Self {
            frame,
            severity,
            check,
            dir,
            message,
        }
    }
}

impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let sev = match self.severity {
            Severity::Info => "info",
            Severity::Warning => "warning",
            Severity::Violation => "VIOLATION",
        };
        write!(f, "frame {}: {sev} [{:?}]", self.frame, self.check)?;
        if let Some(d) = self.dir {
            write!(f, " {}", d.arrow())?;
        }
        write!(f, ": {}", self.message)
    }
}
