//! Text into HTML and SVG, safely: every string that came from a log (lines, hosts, job ids,
//! codes) goes through [`esc`] before it reaches a page.
//!
//! Escapes `& < > " '` (so the text is safe in element content and in quoted attributes alike),
//! shows C0 control characters as their Unicode control pictures (`␛` for ESC, `␀` for NUL),
//! and replaces C1 controls, bidirectional overrides and other invisible format characters
//! with a visible `[U+XXXX]`, so a line can neither run script nor hide or reorder text.

use crate::record::is_invisible;

/// `text`, safe in HTML and SVG element content and in quoted attribute values.
pub fn esc(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + text.len() / 8);
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            '\t' | '\n' => out.push(c),
            '\u{0}'..='\u{1f}' => {
                out.push(char::from_u32(0x2400 + c as u32).unwrap_or('\u{fffd}'));
            }
            '\u{7f}' => out.push('\u{2421}'),
            c if is_invisible(c) => out.push_str(&format!("[U+{:04X}]", c as u32)),
            c => out.push(c),
        }
    }
    out
}

/// A query-string component: everything but unreserved characters percent-encoded.
pub fn url_component(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' | b':' => {
                out.push(b as char)
            }
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hostile_text_stays_text() {
        let hostile = "<script>alert(\"x\")</script>' </svg>\u{1b}[31m\u{0}\u{202e}gpj.exe\u{85}";
        let out = esc(hostile);
        for bad in ['<', '>', '"', '\'', '\u{1b}', '\u{0}', '\u{202e}', '\u{85}'] {
            assert!(!out.contains(bad), "{bad:?} in {out}");
        }
        assert_eq!(
            out,
            "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;&#39; &lt;/svg&gt;\u{241b}[31m\u{2400}[U+202E]gpj.exe[U+0085]"
        );
        assert_eq!(esc("node-05 \u{3b1}\tok\n"), "node-05 \u{3b1}\tok\n");
        assert_eq!(
            url_component("a b&c=\"d\"/fp2:9"),
            "a%20b%26c%3D%22d%22%2Ffp2:9"
        );
    }
}
