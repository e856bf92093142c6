//! `--json`: one flat JSON object per result line, written by hand (strings escaped,
//! numbers that are not finite written as `null`).

use std::fmt::Write as _;

/// A flat JSON object under construction.
#[derive(Clone, Debug, Default)]
pub struct Object {
    body: String,
}

impl Object {
    /// An empty object.
    pub fn new() -> Self {
        Self::default()
    }

    fn key(&mut self, key: &str) {
        if !self.body.is_empty() {
            self.body.push(',');
        }
        push_str(&mut self.body, key);
        self.body.push(':');
    }

    /// Adds a string member.
    pub fn str(mut self, key: &str, value: &str) -> Self {
        self.key(key);
        push_str(&mut self.body, value);
        self
    }

    /// Adds an integer member.
    pub fn int(mut self, key: &str, value: u64) -> Self {
        self.key(key);
        let _ = write!(self.body, "{value}");
        self
    }

    /// Adds a number member (`null` if it is NaN or infinite).
    pub fn num(mut self, key: &str, value: f64) -> Self {
        self.key(key);
        if value.is_finite() {
            // Display never uses an exponent, so this is always a valid JSON number.
            let _ = write!(self.body, "{value}");
        } else {
            self.body.push_str("null");
        }
        self
    }

    /// The object's text.
    pub fn finish(&self) -> String {
        format!("{{{}}}", self.body)
    }
}

/// Appends `s` as a JSON string literal.
fn push_str(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if u32::from(c) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A minimal reader for the flat objects [`Object`] writes: `(key, raw value)` pairs
    /// with strings unescaped; `None` if the text is not such an object.
    pub(crate) fn parse_flat(text: &str) -> Option<Vec<(String, String)>> {
        let inner = text.trim().strip_prefix('{')?.strip_suffix('}')?;
        let mut out = Vec::new();
        let mut chars = inner.chars().peekable();
        while chars.peek().is_some() {
            let key = read_string(&mut chars)?;
            if chars.next()? != ':' {
                return None;
            }
            let value = if chars.peek() == Some(&'"') {
                read_string(&mut chars)?
            } else {
                let mut v = String::new();
                while let Some(&c) = chars.peek() {
                    if c == ',' {
                        break;
                    }
                    v.push(c);
                    chars.next();
                }
                v
            };
            out.push((key, value));
            match chars.next() {
                Some(',') | None => {}
                Some(_) => return None,
            }
        }
        Some(out)
    }

    fn read_string(chars: &mut std::iter::Peekable<std::str::Chars<'_>>) -> Option<String> {
        if chars.next()? != '"' {
            return None;
        }
        let mut s = String::new();
        loop {
            match chars.next()? {
                '"' => return Some(s),
                '\\' => match chars.next()? {
                    'n' => s.push('\n'),
                    'r' => s.push('\r'),
                    't' => s.push('\t'),
                    'u' => {
                        let hex: String = chars.by_ref().take(4).collect();
                        s.push(char::from_u32(u32::from_str_radix(&hex, 16).ok()?)?);
                    }
                    c => s.push(c),
                },
                c => s.push(c),
            }
        }
    }

    #[test]
    fn escapes_and_numbers() {
        let o = Object::new()
            .str("test", "a\"b\\c\nd\u{1}")
            .int("bytes", 65536)
            .num("bw", 1.5)
            .num("tiny", 1e-7)
            .num("bad", f64::NAN)
            .finish();
        assert_eq!(
            o,
            r#"{"test":"a\"b\\c\nd\u0001","bytes":65536,"bw":1.5,"tiny":0.0000001,"bad":null}"#
        );
        let back = parse_flat(&o).unwrap();
        assert_eq!(back[0], ("test".into(), "a\"b\\c\nd\u{1}".into()));
        assert_eq!(back[1], ("bytes".into(), "65536".into()));
        assert_eq!(back[4], ("bad".into(), "null".into()));
        assert_eq!(parse_flat("{\"a\":1"), None);
    }
}
