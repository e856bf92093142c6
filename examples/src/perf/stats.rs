//! The numbers behind perftest's result lines: latency statistics from post
//! timestamps, and the peak bandwidth from per-completion timestamps.

/// perftest's latency summary, in microseconds.
#[derive(Copy, Clone, Debug, Default, PartialEq)]
pub struct LatStats {
    /// Smallest sample.
    pub min: f64,
    /// Largest sample.
    pub max: f64,
    /// The median (perftest's `t_typical`).
    pub typical: f64,
    /// The mean.
    pub avg: f64,
    /// The standard deviation.
    pub stdev: f64,
    /// The 99th percentile.
    pub p99: f64,
    /// The 99.9th percentile.
    pub p999: f64,
}

impl LatStats {
    /// The statistics of the intervals between consecutive post timestamps `posted`
    /// (nanoseconds), each divided by `rtt_factor` (perftest's 2 for the ping-pong tests,
    /// 1 for `read_lat`). `None` with fewer than two timestamps.
    pub fn from_posts(posted: &[u64], rtt_factor: f64) -> Option<Self> {
        let mut deltas: Vec<f64> = posted
            .windows(2)
            .map(|w| match w {
                [a, b] => b.saturating_sub(*a) as f64 / 1e3 / rtt_factor,
                _ => 0.0,
            })
            .collect();
        if deltas.is_empty() {
            return None;
        }
        deltas.sort_by(f64::total_cmp);
        let n = deltas.len();
        let avg = deltas.iter().sum::<f64>() / n as f64;
        let var = deltas.iter().map(|d| (d - avg) * (d - avg)).sum::<f64>() / n as f64;
        let at = |i: usize| deltas.get(i.min(n - 1)).copied().unwrap_or(0.0);
        // perftest's get_median: the mean of the two middle samples for an even count.
        let typical = if n.is_multiple_of(2) {
            (at(n / 2 - 1) + at(n / 2)) / 2.0
        } else {
            at(n / 2)
        };
        Some(Self {
            min: at(0),
            max: at(n - 1),
            typical,
            avg,
            stdev: var.sqrt(),
            p99: at(rank(n, 990)),
            p999: at(rank(n, 999)),
        })
    }
}

/// The nearest-rank index of the `per_mille` percentile among `n` sorted samples.
fn rank(n: usize, per_mille: usize) -> usize {
    n.saturating_mul(per_mille).div_ceil(1000).saturating_sub(1)
}

/// Above this many operations the peak search looks at every `len / PEAK_GRID`-th
/// window edge instead of all of them (the search is quadratic).
const PEAK_GRID: usize = 4096;

/// perftest's peak: the smallest average time per operation over any run of
/// consecutive operations `i..=j`, `(completed[j] - posted[i]) / (j - i + 1)`, in
/// nanoseconds (timestamps in nanoseconds; completion `j` is the `j`-th to complete).
/// Beyond 4096 operations only a grid of 4096 window edges is searched. `None` if
/// there is nothing to measure.
pub fn peak_op_time(posted: &[u64], completed: &[u64]) -> Option<f64> {
    let n = posted.len().min(completed.len());
    if n == 0 {
        return None;
    }
    let step = n.div_ceil(PEAK_GRID).max(1);
    let mut edges: Vec<usize> = (0..n).step_by(step).collect();
    if edges.last() != Some(&(n - 1)) {
        edges.push(n - 1);
    }
    let mut best = f64::INFINITY;
    for (a, &i) in edges.iter().enumerate() {
        let Some(&start) = posted.get(i) else {
            continue;
        };
        for &j in edges.get(a..).unwrap_or_default() {
            let Some(&end) = completed.get(j) else {
                continue;
            };
            let t = end.saturating_sub(start) as f64 / (j - i + 1) as f64;
            if t < best {
                best = t;
            }
        }
    }
    best.is_finite().then_some(best.max(1.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn latency_of_known_intervals() {
        // Intervals 10, 20, 30, 40 us; halved for a ping-pong.
        let posted = [0, 10_000, 30_000, 60_000, 100_000];
        let s = LatStats::from_posts(&posted, 2.0).unwrap();
        assert_eq!((s.min, s.max), (5.0, 20.0));
        assert_eq!(s.typical, 12.5);
        assert_eq!(s.avg, 12.5);
        assert!(
            (s.stdev - 5.590_169_943_749_474).abs() < 1e-9,
            "{}",
            s.stdev
        );
        assert_eq!((s.p99, s.p999), (20.0, 20.0));
        let odd = LatStats::from_posts(&posted[..4], 1.0).unwrap();
        assert_eq!(odd.typical, 20.0);
        assert_eq!(LatStats::from_posts(&[5], 1.0), None);
    }

    #[test]
    fn percentiles_use_nearest_rank() {
        let posted: Vec<u64> = (0..=1000u64).map(|i| i * i * 1000).collect();
        let s = LatStats::from_posts(&posted, 1.0).unwrap();
        // Intervals are 2i+1 us for i in 0..1000.
        assert_eq!(s.min, 1.0);
        assert_eq!(s.p99, 2.0 * 989.0 + 1.0);
        assert_eq!(s.p999, 2.0 * 998.0 + 1.0);
        assert_eq!(s.max, 1999.0);
    }

    #[test]
    fn peak_finds_the_fastest_run() {
        // Four ops posted at once; completions at 40, 50, 60, 400: the run 0..=2 averages
        // 20 ns per op, better than any other.
        let posted = [0, 0, 0, 0];
        let completed = [40, 50, 60, 400];
        assert_eq!(peak_op_time(&posted, &completed), Some(20.0));
        assert_eq!(peak_op_time(&[], &[]), None);
    }

    #[test]
    fn peak_on_a_grid_for_long_runs() {
        let n = 10_000u64;
        let posted: Vec<u64> = (0..n).map(|i| i * 10).collect();
        let completed: Vec<u64> = (0..n).map(|i| i * 10 + 100).collect();
        let t = peak_op_time(&posted, &completed).unwrap();
        // The whole run: (99_990 + 100) / 10_000 ~ 10.009 ns per op.
        assert!((t - 10.009).abs() < 0.01, "{t}");
    }
}
