//! The messages perftest's `-R` (rdma_cm) side channel carries, byte for byte as
//! `ib_write_bw -R` on Linux siw sends them (captures `write-bw.pcapng`,
//! `read-bw.pcapng` in the siw lab). Every message is one Send on the first
//! ("comm") connection; the client sends first and the server answers with the same
//! kind of message. Multi-octet integers are big-endian (perftest converts with
//! `htonl`/`htonll` when rdma_cm is in use).

/// perftest's version string, NUL-padded to 16 octets (`"6.06"` in the captures).
pub const VERSION: &str = "6.06";

/// Length of the version message.
pub const VERSION_LEN: usize = 16;

/// The version message: `version` NUL-padded (or cut) to 16 octets.
pub fn version(version: &str) -> [u8; VERSION_LEN] {
    let mut out = [0u8; VERSION_LEN];
    for (o, b) in out.iter_mut().zip(version.bytes()) {
        *o = b;
    }
    out
}

/// Where iwperf marks its version message, after the NUL that ends the version
/// text (perftest reads the text only: `atof`, `%s`).
const TAG_AT: usize = 8;

/// The mark itself.
const TAG: &[u8] = b"iwperf";

/// Where, after the mark, iwperf says it exchanges [`Settings`] (0 in builds that did not).
const SETTINGS_AT: usize = TAG_AT + TAG.len();

/// Our version message: `version` as [`version`] makes it, plus the iwperf mark and the
/// settings exchange's version, so a peer iwperf can tell it is not talking to perftest.
pub fn version_tagged(version: &str) -> [u8; VERSION_LEN] {
    let mut out = self::version(version);
    if let Some(dst) = out.get_mut(TAG_AT..TAG_AT + TAG.len())
        && version.len() < TAG_AT
    {
        dst.copy_from_slice(TAG);
        out[SETTINGS_AT] = Settings::VERSION;
    }
    out
}

/// Whether a received version message says its iwperf exchanges [`Settings`].
pub fn exchanges_settings(data: &[u8]) -> bool {
    is_iwperf(data)
        && data
            .get(SETTINGS_AT)
            .is_some_and(|&v| v >= Settings::VERSION)
}

/// What two iwperf peers must agree on, exchanged right after the preamble (iwperf
/// only: perftest's exchange is unchanged): a mismatch is refused at once, on both sides,
/// naming both.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Settings {
    /// The test's name (`write_bw`, ...).
    pub test: String,
    /// `-s`, or with `-a` the largest size.
    pub size: u64,
    /// `-a`.
    pub all_sizes: bool,
    /// `-n`, unless `-D` runs for a time.
    pub iters: u64,
    /// `-D`, in milliseconds (0: `-n` counts).
    pub duration_ms: u64,
    /// `-q`.
    pub qps: u32,
    /// `--imm` (`send_lat`).
    pub imm: bool,
    /// `-b`.
    pub bidirectional: bool,
    /// `--run_infinitely`.
    pub infinitely: bool,
}

impl Settings {
    /// The exchange's version, in the version message.
    pub const VERSION: u8 = 1;
    const MAGIC: &'static [u8; 4] = b"iwps";
    const LEN: usize = 4 + 12 + 8 + 1 + 8 + 8 + 4 + 1;

    /// The message.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(Self::LEN);
        out.extend_from_slice(Self::MAGIC);
        let mut name = [0u8; 12];
        for (d, b) in name.iter_mut().zip(self.test.bytes()) {
            *d = b;
        }
        out.extend_from_slice(&name);
        out.extend_from_slice(&self.size.to_be_bytes());
        out.push(u8::from(self.all_sizes));
        out.extend_from_slice(&self.iters.to_be_bytes());
        out.extend_from_slice(&self.duration_ms.to_be_bytes());
        out.extend_from_slice(&self.qps.to_be_bytes());
        // One octet of flags (an iwperf before `-b` sent 0 or 1 here: `--imm`).
        let flags = u8::from(self.imm)
            | (u8::from(self.bidirectional) << 1)
            | (u8::from(self.infinitely) << 2);
        out.push(flags);
        out
    }

    /// A received message, if it is one.
    pub fn decode(data: &[u8]) -> Option<Self> {
        let data = data.get(..Self::LEN)?;
        if &data[..4] != Self::MAGIC {
            return None;
        }
        let u64_at = |at: usize| Some(u64::from_be_bytes(data.get(at..at + 8)?.try_into().ok()?));
        Some(Self {
            test: crate::rping::c_str(&data[4..16]),
            size: u64_at(16)?,
            all_sizes: data[24] != 0,
            iters: u64_at(25)?,
            duration_ms: u64_at(33)?,
            qps: u32::from_be_bytes(data.get(41..45)?.try_into().ok()?),
            imm: data[45] & 1 != 0,
            bidirectional: data[45] & 2 != 0,
            infinitely: data[45] & 4 != 0,
        })
    }

    /// True if a peer with `other` can run the test with us. The server of `write_bw`
    /// and `read_bw` is passive (it prints the client's report), so there `-n` and `-D`
    /// are the client's alone, as with perftest (but `-b` makes it run too); every other
    /// server counts or times the test itself.
    pub fn agrees(&self, other: &Self) -> bool {
        let passive = matches!(self.test.as_str(), "write_bw" | "read_bw") && !self.bidirectional;
        let count = |s: &Self| (!passive).then_some((s.iters, s.duration_ms));
        let flags = |s: &Self| (s.imm, s.bidirectional, s.infinitely);
        self.test == other.test
            && (self.size, self.all_sizes, self.qps) == (other.size, other.all_sizes, other.qps)
            && flags(self) == flags(other)
            && count(self) == count(other)
    }

    /// The settings as the command line that gives them.
    pub fn describe(&self) -> String {
        let mut s = self.test.clone();
        if self.all_sizes {
            s += &format!(" -a (up to {} octets)", self.size);
        } else {
            s += &format!(" -s {}", self.size);
        }
        if self.duration_ms > 0 {
            s += &format!(" -D {}", self.duration_ms as f64 / 1000.0);
        } else {
            s += &format!(" -n {}", self.iters);
        }
        s += &format!(" -q {}", self.qps);
        for (on, flag) in [
            (self.imm, " --imm"),
            (self.bidirectional, " -b"),
            (self.infinitely, " --run_infinitely"),
        ] {
            if on {
                s += flag;
            }
        }
        s
    }
}

/// Whether a received version message carries the iwperf mark.
pub fn is_iwperf(data: &[u8]) -> bool {
    data.get(TAG_AT..TAG_AT + TAG.len()) == Some(TAG)
}

/// The text of a received version message, up to its first NUL.
pub fn parse_version(data: &[u8]) -> String {
    crate::rping::c_str(data)
}

/// perftest's `check_sys_data`/`check_mtu` values as siw's perftest sends them:
/// the cycle buffer (4096, big-endian), the cache line size (64, big-endian) and
/// the two-octet MTU message (`33 00`). Our side sends the same.
pub const SYS_DATA: [&[u8]; 3] = [&[0, 0, 0x10, 0], &[0, 0, 0, 0x40], &[0x33, 0]];

/// Our cycle buffer, the first of [`SYS_DATA`].
pub const CYCLE_BUFFER: usize = 4096;

/// One QP's address, perftest's `struct pingpong_dest` in network byte order:
/// 56 octets.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct Dest {
    /// `lid` (0 on iWARP).
    pub lid: u32,
    /// `out_reads`: outstanding RDMA Reads (1 for write tests, 128 for read tests on siw).
    pub out_reads: u32,
    /// `qpn`.
    pub qpn: u32,
    /// `psn` (random 24 bits).
    pub psn: u32,
    /// `rkey`: the STag of the buffer the peer targets.
    pub rkey: u32,
    /// `vaddr`: the tagged offset of that buffer.
    pub vaddr: u64,
    /// `gid` (on siw: the MAC address, then zeros).
    pub gid: [u8; 16],
    /// `srqn`.
    pub srqn: u32,
    /// `gid_index`.
    pub gid_index: u32,
}

mod field {
    use core::ops::Range;
    pub(super) const LID: Range<usize> = 0..4;
    pub(super) const OUT_READS: Range<usize> = 4..8;
    pub(super) const QPN: Range<usize> = 8..12;
    pub(super) const PSN: Range<usize> = 12..16;
    pub(super) const RKEY: Range<usize> = 16..20;
    // 20..24: C struct padding before the 8-octet `vaddr` (perftest leaves it uninitialised).
    pub(super) const VADDR: Range<usize> = 24..32;
    pub(super) const GID: Range<usize> = 32..48;
    pub(super) const SRQN: Range<usize> = 48..52;
    pub(super) const GID_INDEX: Range<usize> = 52..56;
}

fn be32(data: &[u8], r: core::ops::Range<usize>) -> Option<u32> {
    Some(u32::from_be_bytes(data.get(r)?.try_into().ok()?))
}

impl Dest {
    /// Encoded length.
    pub const LEN: usize = 56;

    /// The all-zero message perftest uses as a barrier before and after the test
    /// connection is made.
    pub const SYNC: [u8; Self::LEN] = [0; Self::LEN];

    /// Encodes into 56 octets (padding zero).
    pub fn encode(&self) -> [u8; Self::LEN] {
        let mut out = [0u8; Self::LEN];
        let mut put = |r: core::ops::Range<usize>, b: &[u8]| {
            if let Some(dst) = out.get_mut(r) {
                dst.copy_from_slice(b);
            }
        };
        put(field::LID, &self.lid.to_be_bytes());
        put(field::OUT_READS, &self.out_reads.to_be_bytes());
        put(field::QPN, &self.qpn.to_be_bytes());
        put(field::PSN, &self.psn.to_be_bytes());
        put(field::RKEY, &self.rkey.to_be_bytes());
        put(field::VADDR, &self.vaddr.to_be_bytes());
        put(field::GID, &self.gid);
        put(field::SRQN, &self.srqn.to_be_bytes());
        put(field::GID_INDEX, &self.gid_index.to_be_bytes());
        out
    }

    /// Decodes; `None` if shorter than 56 octets.
    pub fn decode(data: &[u8]) -> Option<Self> {
        Some(Self {
            lid: be32(data, field::LID)?,
            out_reads: be32(data, field::OUT_READS)?,
            qpn: be32(data, field::QPN)?,
            psn: be32(data, field::PSN)?,
            rkey: be32(data, field::RKEY)?,
            vaddr: u64::from_be_bytes(data.get(field::VADDR)?.try_into().ok()?),
            gid: data.get(field::GID)?.try_into().ok()?,
            srqn: be32(data, field::SRQN)?,
            gid_index: be32(data, field::GID_INDEX)?,
        })
    }
}

/// The client's results, sent after the test as five 8-octet messages
/// (perftest's `xchg_bw_reports`, peer version >= 5.33): size, iterations, then the
/// IEEE-754 bit patterns of peak BW, average BW (both MB/s, or Gb/s with
/// `--report_gbits`) and the message rate (Mpps).
#[derive(Copy, Clone, Debug, Default, PartialEq)]
pub struct BwReport {
    /// Message size in octets.
    pub size: u64,
    /// Iterations.
    pub iters: u64,
    /// Peak bandwidth.
    pub bw_peak: f64,
    /// Average bandwidth.
    pub bw_avg: f64,
    /// Message rate in millions of messages per second.
    pub msg_rate: f64,
}

impl BwReport {
    /// Length of each of the five messages.
    pub const PART_LEN: usize = 8;

    /// The five messages, in sending order.
    pub fn encode(&self) -> [[u8; Self::PART_LEN]; 5] {
        [
            self.size.to_be_bytes(),
            self.iters.to_be_bytes(),
            self.bw_peak.to_bits().to_be_bytes(),
            self.bw_avg.to_bits().to_be_bytes(),
            self.msg_rate.to_bits().to_be_bytes(),
        ]
    }

    /// perftest's bidirectional line: this side's report with the peer's numbers added.
    pub fn plus(self, peer: &Self) -> Self {
        Self {
            bw_peak: self.bw_peak + peer.bw_peak,
            bw_avg: self.bw_avg + peer.bw_avg,
            msg_rate: self.msg_rate + peer.msg_rate,
            ..self
        }
    }

    /// Decodes the five received messages; `None` if one is shorter than 8 octets.
    pub fn decode(parts: &[Vec<u8>; 5]) -> Option<Self> {
        let n = |i: usize| -> Option<u64> {
            Some(u64::from_be_bytes(
                parts.get(i)?.get(..Self::PART_LEN)?.try_into().ok()?,
            ))
        };
        Some(Self {
            size: n(0)?,
            iters: n(1)?,
            bw_peak: f64::from_bits(n(2)?),
            bw_avg: f64::from_bits(n(3)?),
            msg_rate: f64::from_bits(n(4)?),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_round_trip_and_the_version_message_announces_them() {
        let st = Settings {
            test: "send_lat".into(),
            size: 1 << 20,
            all_sizes: true,
            iters: 0,
            duration_ms: 2500,
            qps: 3,
            imm: true,
            bidirectional: true,
            infinitely: false,
        };
        let m = st.encode();
        assert!(m.len() <= 56 && m.starts_with(b"iwps"));
        assert_eq!(Settings::decode(&m), Some(st.clone()));
        assert_eq!(Settings::decode(&m[..m.len() - 1]), None);
        assert_eq!(
            st.describe(),
            "send_lat -a (up to 1048576 octets) -D 2.5 -q 3 --imm -b"
        );
        let v = version_tagged(VERSION);
        assert!(is_iwperf(&v) && exchanges_settings(&v));
        // An older iwperf: the mark without the settings byte.
        let mut old = v;
        old[SETTINGS_AT] = 0;
        assert!(is_iwperf(&old) && !exchanges_settings(&old));
        assert!(!exchanges_settings(&version(VERSION)), "perftest");
    }

    fn hex(s: &str) -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    // write-bw.pcapng frame 29: siw's server dest (MSN 7), padding 747f0000.
    const SERVER_DEST: &str = "000000000000000100000002006aa86443783a00747f0000\
                               00005650022980005254001a0001000000000000000000000000000000000000";

    #[test]
    fn version_matches_capture() {
        // write-bw.pcapng frame 8.
        assert_eq!(
            version(VERSION).to_vec(),
            hex("362e3036000000000000000000000000")
        );
        assert_eq!(
            parse_version(&hex("362e3036000000000000000000000000")),
            "6.06"
        );
    }

    #[test]
    fn tagged_version_reads_as_perftest_version() {
        let v = version_tagged(VERSION);
        assert_eq!(parse_version(&v), "6.06");
        assert!(is_iwperf(&v));
        assert!(!is_iwperf(&version(VERSION)));
        assert!(!is_iwperf(&[0; 4]));
    }

    #[test]
    fn sys_data_matches_capture() {
        // frames 11, 13, 15.
        assert_eq!(SYS_DATA[0], hex("00001000").as_slice());
        assert_eq!(SYS_DATA[0], (CYCLE_BUFFER as u32).to_be_bytes());
        assert_eq!(SYS_DATA[1], hex("00000040").as_slice());
        assert_eq!(SYS_DATA[2], hex("3300").as_slice());
    }

    #[test]
    fn dest_decode_capture() {
        let d = Dest::decode(&hex(SERVER_DEST)).unwrap();
        assert_eq!(d.lid, 0);
        assert_eq!(d.out_reads, 1);
        assert_eq!(d.qpn, 2);
        assert_eq!(d.psn, 0x006a_a864);
        // The STag and TO of the RDMA Writes that follow in the capture.
        assert_eq!(d.rkey, 0x4378_3a00);
        assert_eq!(d.vaddr, 0x5650_0229_8000);
        assert_eq!(&d.gid[..6], &[0x52, 0x54, 0x00, 0x1a, 0x00, 0x01]);
        assert_eq!(d.srqn, 0);
        assert_eq!(d.gid_index, 0);
    }

    #[test]
    fn dest_emit_matches_capture_except_padding() {
        let raw = hex(SERVER_DEST);
        let d = Dest::decode(&raw).unwrap();
        let mut want = raw;
        want[20..24].fill(0);
        assert_eq!(d.encode().to_vec(), want);
        // Frame 31 (MSN 8) has zero padding: byte-exact.
        let raw8 = hex("000000000000000100000002006aa86443783a0000000000\
             00005650022980005254001a0001000000000000000000000000000000000000");
        assert_eq!(Dest::decode(&raw8).unwrap().encode().to_vec(), raw8);
    }

    #[test]
    fn dest_too_short() {
        assert_eq!(Dest::decode(&[0; 55]), None);
        assert_eq!(Dest::decode(&Dest::SYNC), Some(Dest::default()));
    }

    #[test]
    fn report_matches_capture() {
        // write-bw.pcapng frames 152, 154, 156, 158, 160.
        let parts = [
            hex("0000000000001000"),
            hex("0000000000000010"),
            hex("4027c00c614cbbfd"),
            hex("40230834a06dc5b9"),
            hex("3f63f4e0b985f66f"),
        ];
        let r = BwReport::decode(&parts).unwrap();
        assert_eq!(r.size, 4096);
        assert_eq!(r.iters, 16);
        assert!((r.bw_peak - 11.875).abs() < 0.01, "{}", r.bw_peak);
        assert!((r.bw_avg - 9.516).abs() < 0.01, "{}", r.bw_avg);
        assert!((r.msg_rate - 0.002436).abs() < 0.0001, "{}", r.msg_rate);
        let enc = r.encode();
        for (e, p) in enc.iter().zip(parts.iter()) {
            assert_eq!(e.as_slice(), p.as_slice());
        }
        let short = [vec![0; 8], vec![0; 8], vec![0; 7], vec![0; 8], vec![0; 8]];
        assert_eq!(BwReport::decode(&short), None);
    }
}
