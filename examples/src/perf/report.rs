//! perftest-style result lines.

use super::msg::BwReport;

/// The dashed rule perftest prints around its tables.
pub const RULE: &str =
    "---------------------------------------------------------------------------------------";

/// Computes the report for `iters` messages of `size` octets moved in `secs` seconds.
/// We time the whole run, so the peak equals the average.
pub fn compute(size: usize, iters: u64, secs: f64, gbits: bool) -> BwReport {
    let secs = secs.max(1e-9);
    let bytes = size as f64 * iters as f64;
    let bw = if gbits {
        bytes * 8.0 / 1e9 / secs
    } else {
        bytes / f64::from(1u32 << 20) / secs
    };
    BwReport {
        size: size as u64,
        iters,
        bw_peak: bw,
        bw_avg: bw,
        msg_rate: iters as f64 / secs / 1e6,
    }
}

/// The header line.
pub fn header(gbits: bool) -> String {
    let unit = if gbits { "Gb/sec" } else { "MB/sec" };
    format!(" #bytes     #iterations    BW peak[{unit}]    BW average[{unit}]   MsgRate[Mpps]")
}

/// The result line.
pub fn line(r: &BwReport) -> String {
    format!(
        " {:<10} {:<10}       {:.2}               {:.2}   \t\t   {:.6}",
        r.size, r.iters, r.bw_peak, r.bw_avg, r.msg_rate
    )
}

/// The whole table.
pub fn table(r: &BwReport, gbits: bool) -> String {
    format!("{RULE}\n{}\n{}\n{RULE}", header(gbits), line(r))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compute_mib_and_gbits() {
        let r = compute(4096, 256, 1.0, false);
        assert!((r.bw_avg - 1.0).abs() < 1e-9);
        assert!((r.msg_rate - 0.000256).abs() < 1e-12);
        let g = compute(1_000_000, 1000, 8.0, true);
        assert!((g.bw_avg - 1.0).abs() < 1e-9);
        assert_eq!(g.bw_peak, g.bw_avg);
    }

    #[test]
    fn table_columns() {
        let t = table(&compute(4096, 16, 1.0, false), false);
        assert!(t.contains("BW average[MB/sec]"), "{t}");
        assert!(t.contains(" 4096       16 "), "{t}");
    }
}
