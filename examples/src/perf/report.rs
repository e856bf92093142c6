//! perftest-style result lines (or `--json` objects) and the numbers in them.

use super::msg::BwReport;
use super::opts::Output;
use super::stats::{LatStats, peak_op_time};
use super::{Opts, Test};

/// The dashed rule perftest prints around its tables.
pub const RULE: &str =
    "---------------------------------------------------------------------------------------";

/// One latency result line.
#[derive(Copy, Clone, Debug, Default, PartialEq)]
pub struct LatReport {
    /// Message size in octets.
    pub size: u64,
    /// Iterations measured.
    pub iters: u64,
    /// The statistics, in microseconds.
    pub stats: LatStats,
}

/// One result line of either kind.
#[derive(Copy, Clone, Debug, PartialEq)]
pub enum Outcome {
    /// A bandwidth test's line.
    Bw(BwReport),
    /// A latency test's line.
    Lat(LatReport),
}

/// Post and completion timestamps of a bandwidth run, nanoseconds from one epoch
/// shared by all QPs of the run; completion `i` is the `i`-th to complete.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Timeline {
    /// When each operation was posted.
    pub posted: Vec<u64>,
    /// When each operation completed, in completion order.
    pub completed: Vec<u64>,
}

impl Timeline {
    /// The timelines of several QPs as one (both lists sorted).
    pub fn merge(parts: impl IntoIterator<Item = Self>) -> Self {
        let mut all = Self::default();
        for p in parts {
            all.posted.extend(p.posted);
            all.completed.extend(p.completed);
        }
        all.posted.sort_unstable();
        all.completed.sort_unstable();
        all
    }

    /// A receiver's timeline from its receive times: operation `i` counts from
    /// receive `i - 1` (the first from itself). Only its average means much: receives
    /// complete in bursts.
    pub fn from_receives(at: Vec<u64>) -> Self {
        let mut posted = Vec::with_capacity(at.len());
        posted.extend(at.first().copied());
        posted.extend(at.iter().copied().take(at.len().saturating_sub(1)));
        Self {
            posted,
            completed: at,
        }
    }
}

/// Octets per second in the report's unit: MiB/s, or Gb/s with `gbits`.
pub fn scale(bytes_per_sec: f64, gbits: bool) -> f64 {
    if gbits {
        bytes_per_sec * 8.0 / 1e9
    } else {
        bytes_per_sec / f64::from(1u32 << 20)
    }
}

/// The report for `size`-octet operations timed by `tl`, printed with `iters`
/// iterations. The average spans the first post to the last completion; the peak is
/// perftest's (see [`peak_op_time`]).
pub fn from_timeline(size: usize, iters: u64, tl: &Timeline, gbits: bool) -> BwReport {
    let n = tl.completed.len();
    let first = tl.posted.iter().min().copied().unwrap_or(0);
    let last = tl.completed.iter().max().copied().unwrap_or(first);
    let secs = (last.saturating_sub(first) as f64 / 1e9).max(1e-9);
    let bytes = size as f64 * n as f64;
    let bw_avg = scale(bytes / secs, gbits);
    let bw_peak = peak_op_time(&tl.posted, &tl.completed)
        .map_or(bw_avg, |ns| scale(size as f64 / (ns / 1e9), gbits));
    BwReport {
        size: size as u64,
        iters,
        bw_peak,
        bw_avg,
        msg_rate: n as f64 / secs / 1e6,
    }
}

/// Where result lines go: perftest's table, `--json` objects, or `--output`'s one
/// number per line.
#[derive(Copy, Clone, Debug)]
pub struct Printer {
    test: Test,
    gbits: bool,
    json: bool,
    output: Option<Output>,
}

impl Printer {
    /// The printer for `opts`.
    pub fn new(opts: &Opts) -> Self {
        Self {
            test: opts.test,
            gbits: opts.gbits,
            json: opts.json,
            output: opts.output,
        }
    }

    /// Stdout holds only the result lines (`--json`, `--output`), no table around them.
    fn bare(&self) -> bool {
        self.json || self.output.is_some()
    }

    /// An informational line: stdout for the table, stderr with `--json` or `--output`
    /// (stdout then holds only the result lines).
    pub fn info(&self, line: &str) {
        if self.bare() {
            crate::errln!("{line}");
        } else {
            crate::outln!("{line}");
        }
    }

    /// The rule and column header before the first result line.
    pub fn header(&self) {
        if !self.bare() {
            crate::outln!("{RULE}");
            crate::outln!("{}", self.header_text());
        }
    }

    /// The column header.
    pub fn header_text(&self) -> String {
        if self.test.is_lat() {
            " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    \
             t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] "
                .to_owned()
        } else {
            let unit = unit(self.gbits);
            format!(
                " #bytes     #iterations    BW peak[{unit}]    BW average[{unit}]   MsgRate[Mpps]"
            )
        }
    }

    /// Prints one result line.
    pub fn line(&self, o: &Outcome) {
        crate::outln!("{}", self.line_text(o));
    }

    /// The text of one result line (a JSON object with `--json`, one number with
    /// `--output`, printed as perftest prints it).
    pub fn line_text(&self, o: &Outcome) -> String {
        let name = self.test.name();
        match (o, self.output) {
            (Outcome::Bw(r), Some(Output::Bandwidth)) => return format!("{:.6}", r.bw_avg),
            (Outcome::Bw(r), Some(Output::MessageRate)) => return format!("{:.6}", r.msg_rate),
            (Outcome::Lat(r), Some(Output::Latency)) => return format!("{:.6}", r.stats.typical),
            _ => {}
        }
        match (o, self.json) {
            (Outcome::Bw(r), false) => format!(
                " {:<10} {:<10}       {:.2}               {:.2}   \t\t   {:.6}",
                r.size, r.iters, r.bw_peak, r.bw_avg, r.msg_rate
            ),
            (Outcome::Lat(r), false) => {
                let s = &r.stats;
                format!(
                    " {:<7} {:<10}    {:<14.2} {:<12.2} {:<18.2} {:<14.2} {:<15.2} {:<22.2} {:.2}",
                    r.size, r.iters, s.min, s.max, s.typical, s.avg, s.stdev, s.p99, s.p999
                )
            }
            // A number that is not finite becomes null.
            (Outcome::Bw(r), true) => serde_json::json!({
                "test": name,
                "bytes": r.size,
                "iterations": r.iters,
                "bw_peak": r.bw_peak,
                "bw_avg": r.bw_avg,
                "msg_rate": r.msg_rate,
                "unit": unit(self.gbits),
            })
            .to_string(),
            (Outcome::Lat(r), true) => {
                let s = &r.stats;
                serde_json::json!({
                    "test": name,
                    "bytes": r.size,
                    "iterations": r.iters,
                    "t_min": s.min,
                    "t_max": s.max,
                    "t_typical": s.typical,
                    "t_avg": s.avg,
                    "t_stdev": s.stdev,
                    "p99": s.p99,
                    "p99_9": s.p999,
                    "unit": "usec",
                })
                .to_string()
            }
        }
    }

    /// The closing rule.
    pub fn footer(&self) {
        if !self.bare() {
            crate::outln!("{RULE}");
        }
    }
}

fn unit(gbits: bool) -> &'static str {
    if gbits { "Gb/sec" } else { "MB/sec" }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts(test: &str, extra: &str) -> Opts {
        Opts::parse(
            format!("{test} {extra}")
                .split_whitespace()
                .map(String::from),
        )
        .unwrap()
    }

    #[test]
    fn average_and_peak_from_timestamps() {
        // 4 x 1 MiB: posted at 0, completed at 0.25 s, 0.5 s, 0.75 s, 1 s.
        let q = 250_000_000;
        let tl = Timeline {
            posted: vec![0; 4],
            completed: vec![q, 2 * q, 3 * q, 4 * q],
        };
        let r = from_timeline(1 << 20, 4, &tl, false);
        assert!((r.bw_avg - 4.0).abs() < 1e-9, "{}", r.bw_avg);
        assert!((r.msg_rate - 4e-6).abs() < 1e-12);
        // Best run: all four, 0.25 s per op -> 4 MiB/s; a burst of faster completions
        // raises the peak above the average.
        assert!((r.bw_peak - 4.0).abs() < 1e-9, "{}", r.bw_peak);
        let burst = Timeline {
            posted: vec![0; 4],
            completed: vec![q, q + 1000, q + 2000, 4 * q],
        };
        let b = from_timeline(1 << 20, 4, &burst, true);
        assert!(b.bw_peak > b.bw_avg, "{b:?}");
    }

    #[test]
    fn merge_and_receives() {
        let a = Timeline {
            posted: vec![5, 1],
            completed: vec![9, 3],
        };
        let m = Timeline::merge([a.clone(), a]);
        assert_eq!(m.posted, vec![1, 1, 5, 5]);
        let r = Timeline::from_receives(vec![10, 20, 35]);
        assert_eq!(r.posted, vec![10, 10, 20]);
    }

    #[test]
    fn table_and_json_lines() {
        let p = Printer::new(&opts("write_bw", ""));
        let rep = BwReport {
            size: 4096,
            iters: 16,
            bw_peak: 2.0,
            bw_avg: 1.0,
            msg_rate: 0.000256,
        };
        assert!(p.header_text().contains("BW average[MB/sec]"));
        assert!(p.line_text(&Outcome::Bw(rep)).contains(" 4096       16 "));
        let j = Printer::new(&opts("write_bw", "--json --report_gbits"));
        let got: serde_json::Value = serde_json::from_str(&j.line_text(&Outcome::Bw(rep))).unwrap();
        let want = serde_json::json!({"test": "write_bw", "bytes": 4096, "iterations": 16,
            "bw_peak": 2.0, "bw_avg": 1.0, "msg_rate": 0.000256, "unit": "Gb/sec"});
        assert_eq!(got, want);
        // A rate that is not a number (no time measured) is null, still valid JSON.
        let nan = Outcome::Bw(BwReport {
            bw_avg: f64::NAN,
            ..rep
        });
        let got: serde_json::Value = serde_json::from_str(&j.line_text(&nan)).unwrap();
        assert!(got["bw_avg"].is_null(), "{got}");
        let l = Printer::new(&opts("send_lat", ""));
        assert!(l.header_text().contains("t_typical[usec]"));
        let lat = Outcome::Lat(LatReport {
            size: 2,
            iters: 1000,
            stats: LatStats {
                min: 1.5,
                typical: 2.25,
                ..LatStats::default()
            },
        });
        let line = l.line_text(&lat);
        assert!(line.starts_with(" 2       1000          1.50"), "{line}");
        assert!(line.contains("2.25"), "{line}");
        // --output: perftest's "%lf" of one number, nothing else.
        let l = Printer::new(&opts("send_lat", "--output latency"));
        assert_eq!(l.line_text(&lat), "2.250000");
        let rep = Outcome::Bw(BwReport {
            bw_avg: 1234.5,
            msg_rate: 0.25,
            ..BwReport::default()
        });
        let b = Printer::new(&opts("write_bw", "--output bandwidth"));
        assert_eq!(b.line_text(&rep), "1234.500000");
        let m = Printer::new(&opts("write_bw", "--output message_rate"));
        assert_eq!(m.line_text(&rep), "0.250000");
    }
}
