//! Counts in words: `1 ping`, `2 pings`, `0 pings`, so that no line says "1 slots".

/// `n` followed by `one` when `n` is 1 and by `many` otherwise: `count(1, "ping",
/// "pings")` is `"1 ping"`.
pub fn count(n: u64, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

#[cfg(test)]
mod tests {
    use super::count;

    #[test]
    fn one_is_singular_and_every_other_count_plural() {
        assert_eq!(count(1, "ping", "pings"), "1 ping");
        assert_eq!(count(0, "ping", "pings"), "0 pings");
        assert_eq!(count(2, "connection", "connections"), "2 connections");
    }
}
