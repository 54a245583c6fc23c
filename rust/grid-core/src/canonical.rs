//! The pieces of two JSON serializations of the routing overlay:
//!
//! - RFC 8785 (JCS) canonical JSON, which the content digest is taken over: members
//!   ordered by the UTF-16 code units of their names ([`utf16_order`]), numbers as
//!   ECMAScript writes them ([`FiniteNumber::write_jcs`]), integers only within ±(2⁵³ − 1)
//!   ([`write_safe_integer`]), strings with the minimal escaping JCS prescribes
//!   ([`write_string`]);
//! - compact JSON in document order, as Python's `json.dumps(value, ensure_ascii=False,
//!   separators=(",", ":"))` writes it: the same string escaping, members in the order
//!   given, floats as Python's `repr` writes them ([`FiniteNumber::write_python`]).
//!
//! Walking a value tree (and refusing what is not JSON) is the caller's part; nesting is
//! bounded by [`MAX_DEPTH`] so that walking recursively cannot exhaust the stack.

use std::cmp::Ordering;
use std::fmt;

use ring::digest::{digest, SHA256};

/// The deepest nesting of arrays and objects either serialization accepts. Documents Grid
/// writes nest four levels; the bound keeps a recursive walk well inside a thread's stack.
pub const MAX_DEPTH: usize = 512;

/// The largest integer an IEEE 754 double carries exactly, with every integer below it
/// (`Number.MAX_SAFE_INTEGER`); JCS refuses integers beyond ±this.
pub const MAX_SAFE_INTEGER: i64 = (1 << 53) - 1;

/// A number that has no JCS form.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum NumberError {
    /// NaN or an infinity: JSON has no such number.
    NotFinite(f64),
    /// An integer a double cannot carry exactly.
    UnsafeInteger(i64),
}

impl fmt::Display for NumberError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NumberError::NotFinite(value) => {
                let name = if value.is_nan() {
                    "NaN"
                } else if *value > 0.0 {
                    "Infinity"
                } else {
                    "-Infinity"
                };
                write!(f, "{name} is not a JSON number")
            }
            NumberError::UnsafeInteger(value) => write!(
                f,
                "the integer {value} is beyond ±(2**53 - 1), the integers a JSON number carries exactly"
            ),
        }
    }
}

impl std::error::Error for NumberError {}

/// `a` against `b` by their UTF-16 code units, the order of JCS object members.
///
/// UTF-8 byte order is code point order, which differs from UTF-16 code unit order only
/// between a character above U+FFFF (a surrogate pair, units D800–DBFF) and one in
/// U+E000–U+FFFF; so bytes are compared, and the first differing characters are looked
/// at in UTF-16 only when both are beyond ASCII.
pub fn utf16_order(a: &str, b: &str) -> Ordering {
    let (left, right) = (a.as_bytes(), b.as_bytes());
    let Some(index) = left.iter().zip(right).position(|(x, y)| x != y) else {
        return left.len().cmp(&right.len());
    };
    if left[index] < 0x80 || right[index] < 0x80 {
        return left[index].cmp(&right[index]);
    }
    // Equal up to `index`, so both strings share the character boundary before it.
    let mut start = index;
    while !a.is_char_boundary(start) {
        start -= 1;
    }
    a[start..].encode_utf16().cmp(b[start..].encode_utf16())
}

/// Appends `value` as a JSON string: `"` and `\` escaped, the control characters as
/// `\b \t \n \f \r` or `\u00xx` (lowercase hex), everything else as its UTF-8. JCS and
/// Python's `json.dumps(..., ensure_ascii=False)` agree on this.
pub fn write_string(out: &mut Vec<u8>, value: &str) {
    let bytes = value.as_bytes();
    out.reserve(bytes.len() + 2);
    out.push(b'"');
    let mut written = 0;
    while let Some(offset) = first_to_escape(&bytes[written..]) {
        let index = written + offset;
        out.extend_from_slice(&bytes[written..index]);
        let byte = bytes[index];
        match byte {
            b'"' => out.extend_from_slice(b"\\\""),
            b'\\' => out.extend_from_slice(b"\\\\"),
            0x08 => out.extend_from_slice(b"\\b"),
            b'\t' => out.extend_from_slice(b"\\t"),
            b'\n' => out.extend_from_slice(b"\\n"),
            0x0c => out.extend_from_slice(b"\\f"),
            b'\r' => out.extend_from_slice(b"\\r"),
            _ => {
                out.extend_from_slice(b"\\u00");
                out.push(HEX_DIGITS[usize::from(byte >> 4)]);
                out.push(HEX_DIGITS[usize::from(byte & 0x0f)]);
            }
        }
        written = index + 1;
    }
    out.extend_from_slice(&bytes[written..]);
    out.push(b'"');
}

const HEX_DIGITS: &[u8; 16] = b"0123456789abcdef";

/// The index of the first byte of `bytes` that [`write_string`] escapes, looking at eight
/// bytes at a time while none is.
fn first_to_escape(bytes: &[u8]) -> Option<usize> {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGHS: u64 = 0x8080_8080_8080_8080;
    // A high bit set where a byte of `word` is zero (exact for the lowest such byte, which
    // is all that matters: any set bit sends the scan to the bytes themselves).
    let has_zero = |word: u64| word.wrapping_sub(ONES) & !word & HIGHS;
    let mut start = 0;
    while let Some(chunk) = bytes.get(start..start + 8) {
        let word = u64::from_le_bytes(<[u8; 8]>::try_from(chunk).unwrap_or_default());
        let below_space = word.wrapping_sub(ONES * 0x20) & !word & HIGHS;
        let quote = has_zero(word ^ (ONES * u64::from(b'"')));
        let backslash = has_zero(word ^ (ONES * u64::from(b'\\')));
        if below_space | quote | backslash != 0 {
            break;
        }
        start += 8;
    }
    bytes[start..]
        .iter()
        .position(|&byte| NEEDS_ESCAPE[usize::from(byte)])
        .map(|offset| start + offset)
}

/// The bytes [`write_string`] escapes: control characters, `"` and `\`.
static NEEDS_ESCAPE: [bool; 256] = {
    let mut table = [false; 256];
    let mut byte = 0;
    while byte < 0x20 {
        table[byte] = true;
        byte += 1;
    }
    table[b'"' as usize] = true;
    table[b'\\' as usize] = true;
    table
};

/// Appends `value` in decimal, refusing integers beyond ±[`MAX_SAFE_INTEGER`].
pub fn write_safe_integer(out: &mut Vec<u8>, value: i64) -> Result<(), NumberError> {
    if !(-MAX_SAFE_INTEGER..=MAX_SAFE_INTEGER).contains(&value) {
        return Err(NumberError::UnsafeInteger(value));
    }
    write_integer(out, value);
    Ok(())
}

/// Appends `value` in decimal.
pub fn write_integer(out: &mut Vec<u8>, value: i64) {
    let mut digits = [0u8; 20];
    let mut at = digits.len();
    let mut rest = value.unsigned_abs();
    loop {
        at -= 1;
        digits[at] = b'0' + (rest % 10) as u8;
        rest /= 10;
        if rest == 0 {
            break;
        }
    }
    if value < 0 {
        out.push(b'-');
    }
    out.extend_from_slice(&digits[at..]);
}

/// A finite double as its shortest round-tripping decimal digits, found once and written
/// in either notation.
#[derive(Debug, Clone, Copy)]
pub struct FiniteNumber {
    negative: bool,
    /// `d₁d₂…dₙ` without leading or trailing zeros (`len` 0 for either zero).
    digits: [u8; 17],
    len: usize,
    /// The value is `0.d₁d₂…dₙ × 10^point`.
    point: i32,
}

impl FiniteNumber {
    pub fn new(value: f64) -> Result<FiniteNumber, NumberError> {
        if !value.is_finite() {
            return Err(NumberError::NotFinite(value));
        }
        let mut number = FiniteNumber {
            negative: value.is_sign_negative(),
            digits: [0; 17],
            len: 0,
            point: 0,
        };
        if value != 0.0 {
            number.read_shortest(value.abs());
        }
        Ok(number)
    }

    /// Takes ryu's shortest representation (which, like ECMAScript and Python, picks the
    /// closest of the shortest candidates). ryu writes `ddd.ddd`, `d.ddde±x` or `de±x`;
    /// this reads any of them.
    fn read_shortest(&mut self, value: f64) {
        let mut buffer = ryu::Buffer::new();
        let text = buffer.format_finite(value).as_bytes();
        let (mantissa, exponent) = match text.iter().position(|&byte| byte == b'e') {
            Some(at) => (&text[..at], parse_exponent(&text[at + 1..])),
            None => (text, 0),
        };
        self.point = exponent;
        let mut seen_point = false;
        for &byte in mantissa {
            match byte {
                b'.' => seen_point = true,
                b'0' if self.len == 0 => {
                    // A leading zero: before the point it carries nothing, after it each
                    // moves the digits one place right.
                    if seen_point {
                        self.point -= 1;
                    }
                }
                digit => {
                    self.digits[self.len] = digit;
                    self.len += 1;
                    if !seen_point {
                        self.point += 1;
                    }
                }
            }
        }
        while self.len > 1 && self.digits[self.len - 1] == b'0' {
            self.len -= 1;
        }
    }

    fn digits(&self) -> &[u8] {
        &self.digits[..self.len]
    }

    /// ECMA-262 Number::toString, which RFC 8785 §3.2.2.3 adopts: plain notation from 1e-6
    /// up to below 1e21, otherwise `d.ddde±x`; both zeros as `0`.
    pub fn write_jcs(&self, out: &mut Vec<u8>) {
        if self.len == 0 {
            out.push(b'0');
            return;
        }
        if self.negative {
            out.push(b'-');
        }
        let digits = self.digits();
        let count = digits.len() as i32;
        let point = self.point;
        if count <= point && point <= 21 {
            out.extend_from_slice(digits);
            push_zeros(out, point - count);
        } else if 0 < point && point <= 21 {
            let (whole, fraction) = digits.split_at(point as usize);
            out.extend_from_slice(whole);
            out.push(b'.');
            out.extend_from_slice(fraction);
        } else if -6 < point && point <= 0 {
            out.extend_from_slice(b"0.");
            push_zeros(out, -point);
            out.extend_from_slice(digits);
        } else {
            write_scientific(out, digits, point - 1, 1);
        }
    }

    /// Python's `repr(float)`: plain notation with at least one fractional digit from 1e-4
    /// up to below 1e16, otherwise `d.ddde±xx`; `-0.0` keeps its sign.
    pub fn write_python(&self, out: &mut Vec<u8>) {
        if self.negative {
            out.push(b'-');
        }
        if self.len == 0 {
            out.extend_from_slice(b"0.0");
            return;
        }
        let digits = self.digits();
        let count = digits.len() as i32;
        let point = self.point;
        if point <= -4 || point > 16 {
            write_scientific(out, digits, point - 1, 2);
        } else if point <= 0 {
            out.extend_from_slice(b"0.");
            push_zeros(out, -point);
            out.extend_from_slice(digits);
        } else if point >= count {
            out.extend_from_slice(digits);
            push_zeros(out, point - count);
            out.extend_from_slice(b".0");
        } else {
            let (whole, fraction) = digits.split_at(point as usize);
            out.extend_from_slice(whole);
            out.push(b'.');
            out.extend_from_slice(fraction);
        }
    }
}

/// `d[.ddd]e±x`, the exponent written with at least `exponent_width` digits.
fn write_scientific(out: &mut Vec<u8>, digits: &[u8], exponent: i32, exponent_width: usize) {
    out.push(digits[0]);
    if digits.len() > 1 {
        out.push(b'.');
        out.extend_from_slice(&digits[1..]);
    }
    out.push(b'e');
    out.push(if exponent < 0 { b'-' } else { b'+' });
    let magnitude = exponent.unsigned_abs();
    if magnitude < 10 && exponent_width == 2 {
        out.push(b'0');
    }
    write_integer(out, i64::from(magnitude));
}

fn push_zeros(out: &mut Vec<u8>, count: i32) {
    out.resize(out.len() + count.max(0) as usize, b'0');
}

fn parse_exponent(text: &[u8]) -> i32 {
    let (negative, digits) = match text.split_first() {
        Some((b'-', rest)) => (true, rest),
        Some((b'+', rest)) => (false, rest),
        _ => (false, text),
    };
    let magnitude = digits
        .iter()
        .fold(0i32, |total, digit| total * 10 + i32::from(digit - b'0'));
    if negative {
        -magnitude
    } else {
        magnitude
    }
}

/// Lowercase hex SHA-256 of `bytes`.
pub fn sha256_hex(bytes: &[u8]) -> String {
    let hash = digest(&SHA256, bytes);
    let mut text = String::with_capacity(64);
    for byte in hash.as_ref() {
        text.push(char::from(HEX_DIGITS[usize::from(byte >> 4)]));
        text.push(char::from(HEX_DIGITS[usize::from(byte & 0x0f)]));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn jcs(value: f64) -> String {
        let mut out = Vec::new();
        FiniteNumber::new(value).unwrap().write_jcs(&mut out);
        String::from_utf8(out).unwrap()
    }

    fn python(value: f64) -> String {
        let mut out = Vec::new();
        FiniteNumber::new(value).unwrap().write_python(&mut out);
        String::from_utf8(out).unwrap()
    }

    fn string(value: &str) -> String {
        let mut out = Vec::new();
        write_string(&mut out, value);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn jcs_numbers_follow_ecmascript() {
        // RFC 8785 Appendix B, as IEEE 754 bit patterns and their canonical forms.
        let appendix_b: [(u64, &str); 20] = [
            (0x0000_0000_0000_0000, "0"),
            (0x8000_0000_0000_0000, "0"),
            (0x0000_0000_0000_0001, "5e-324"),
            (0x8000_0000_0000_0001, "-5e-324"),
            (0x7fef_ffff_ffff_ffff, "1.7976931348623157e+308"),
            (0xffef_ffff_ffff_ffff, "-1.7976931348623157e+308"),
            (0x4340_0000_0000_0000, "9007199254740992"),
            (0xc340_0000_0000_0000, "-9007199254740992"),
            (0x4430_0000_0000_0000, "295147905179352830000"),
            (0x44b5_2d02_c7e1_4af5, "9.999999999999997e+22"),
            (0x44b5_2d02_c7e1_4af6, "1e+23"),
            (0x44b5_2d02_c7e1_4af7, "1.0000000000000001e+23"),
            (0x444b_1ae4_d6e2_ef4e, "999999999999999700000"),
            (0x444b_1ae4_d6e2_ef4f, "999999999999999900000"),
            (0x444b_1ae4_d6e2_ef50, "1e+21"),
            (0x3eb0_c6f7_a0b5_ed8c, "9.999999999999997e-7"),
            (0x3eb0_c6f7_a0b5_ed8d, "0.000001"),
            (0x41b3_de43_5555_5553, "333333333.3333332"),
            (0x41b3_de43_5555_5554, "333333333.33333325"),
            (0x41b3_de43_5555_5555, "333333333.3333333"),
        ];
        for (bits, expected) in appendix_b {
            assert_eq!(jcs(f64::from_bits(bits)), expected, "{bits:#x}");
        }
        assert_eq!(
            jcs(f64::from_bits(0x4299_9999_9999_9999)),
            "7036874417766.399"
        );
        assert_eq!(jcs(1e21), "1e+21");
        assert_eq!(jcs(1e20), "100000000000000000000");
        assert_eq!(jcs(123e18), "123000000000000000000");
        assert_eq!(jcs(1e-6), "0.000001");
        assert_eq!(jcs(1e-7), "1e-7");
        assert_eq!(jcs(1.5e-7), "1.5e-7");
        assert_eq!(jcs(0.1), "0.1");
        assert_eq!(jcs(-2.5), "-2.5");
        assert_eq!(jcs(3.0), "3");
        assert_eq!(jcs(0.794004), "0.794004");
    }

    #[test]
    fn python_floats_follow_repr() {
        let cases: [(f64, &str); 14] = [
            (0.0, "0.0"),
            (-0.0, "-0.0"),
            (1.0, "1.0"),
            (3.0, "3.0"),
            (0.1, "0.1"),
            (1e15, "1000000000000000.0"),
            (1e16, "1e+16"),
            (1.5e16, "1.5e+16"),
            (0.0001, "0.0001"),
            (0.00001, "1e-05"),
            (1.25e-5, "1.25e-05"),
            (5e-324, "5e-324"),
            (1.7976931348623157e308, "1.7976931348623157e+308"),
            (-123.456, "-123.456"),
        ];
        for (value, expected) in cases {
            assert_eq!(python(value), expected);
        }
    }

    #[test]
    fn non_finite_numbers_are_refused() {
        for value in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY] {
            assert!(matches!(
                FiniteNumber::new(value),
                Err(NumberError::NotFinite(_))
            ));
        }
        assert_eq!(
            NumberError::NotFinite(f64::NAN).to_string(),
            "NaN is not a JSON number"
        );
        assert_eq!(
            NumberError::NotFinite(f64::NEG_INFINITY).to_string(),
            "-Infinity is not a JSON number"
        );
    }

    #[test]
    fn integers_stop_at_two_to_the_53() {
        let mut out = Vec::new();
        write_safe_integer(&mut out, MAX_SAFE_INTEGER).unwrap();
        out.push(b' ');
        write_safe_integer(&mut out, -MAX_SAFE_INTEGER).unwrap();
        out.push(b' ');
        write_safe_integer(&mut out, 0).unwrap();
        assert_eq!(out, b"9007199254740991 -9007199254740991 0");
        for refused in [
            MAX_SAFE_INTEGER + 1,
            -MAX_SAFE_INTEGER - 1,
            i64::MIN,
            i64::MAX,
        ] {
            assert_eq!(
                write_safe_integer(&mut out, refused),
                Err(NumberError::UnsafeInteger(refused))
            );
        }
        let mut out = Vec::new();
        write_integer(&mut out, i64::MIN);
        assert_eq!(out, b"-9223372036854775808");
    }

    #[test]
    fn strings_escape_what_jcs_requires() {
        assert_eq!(string("plain"), "\"plain\"");
        assert_eq!(string("a\"b\\c/"), "\"a\\\"b\\\\c/\"");
        assert_eq!(string("\u{8}\t\n\u{c}\r"), "\"\\b\\t\\n\\f\\r\"");
        assert_eq!(string("\u{0}\u{1f}\u{7f}"), "\"\\u0000\\u001f\u{7f}\"");
        assert_eq!(string("€😀\u{2028}"), "\"€😀\u{2028}\"");
        // Escapes at every position of an eight-byte word, and after whole clean words.
        for at in 0..20 {
            for special in ["\"", "\\", "\n", "\u{1}", "\u{1f}"] {
                let mut text = "abcdefghijklmnopqrstu".to_owned();
                text.replace_range(at..=at, special);
                let mut expected = String::from("\"");
                for character in text.chars() {
                    match character {
                        '"' => expected.push_str("\\\""),
                        '\\' => expected.push_str("\\\\"),
                        '\n' => expected.push_str("\\n"),
                        '\u{1}' => expected.push_str("\\u0001"),
                        '\u{1f}' => expected.push_str("\\u001f"),
                        other => expected.push(other),
                    }
                }
                expected.push('"');
                assert_eq!(string(&text), expected, "{text:?}");
            }
        }
        // Bytes just above the escaped ones, and UTF-8 beyond ASCII, are written as they are.
        assert_eq!(string(" !#[]~\u{7f}ÿ€"), "\" !#[]~\u{7f}ÿ€\"");
        // Escapes at every position of an eight-byte word, and after whole clean words.
        for at in 0..20 {
            for special in ["\"", "\\", "\n", "\u{1}", "\u{1f}"] {
                let mut text = "abcdefghijklmnopqrstu".to_owned();
                text.replace_range(at..=at, special);
                let mut expected = String::from("\"");
                for character in text.chars() {
                    match character {
                        '"' => expected.push_str("\\\""),
                        '\\' => expected.push_str("\\\\"),
                        '\n' => expected.push_str("\\n"),
                        '\u{1}' => expected.push_str("\\u0001"),
                        '\u{1f}' => expected.push_str("\\u001f"),
                        other => expected.push(other),
                    }
                }
                expected.push('"');
                assert_eq!(string(&text), expected, "{text:?}");
            }
        }
        // Bytes just above the escaped ones, and UTF-8 continuation bytes, are not escaped.
        assert_eq!(string(" !#[]~\u{7f}ÿ€"), "\" !#[]~\u{7f}ÿ€\"");
    }

    #[test]
    fn members_order_by_utf16_code_units() {
        // RFC 8785 §3.2.3's example: its names in canonical order.
        let mut names = vec![
            "\u{20ac}",
            "\r",
            "\u{fb33}",
            "1",
            "\u{1f600}",
            "\u{80}",
            "\u{f6}",
        ];
        names.sort_by(|a, b| utf16_order(a, b));
        assert_eq!(
            names,
            [
                "\r",
                "1",
                "\u{80}",
                "\u{f6}",
                "\u{20ac}",
                "\u{1f600}",
                "\u{fb33}"
            ]
        );
        // Code point order would put U+FB33 first; UTF-16 puts the surrogate pair first.
        assert_eq!(utf16_order("a\u{1f600}", "a\u{fb33}"), Ordering::Less);
        assert_eq!(utf16_order("a\u{e000}", "a\u{ffff}"), Ordering::Less);
        assert_eq!(utf16_order("ab", "abc"), Ordering::Less);
        assert_eq!(utf16_order("abc", "abc"), Ordering::Equal);
        assert_eq!(utf16_order("b", "a\u{1f600}"), Ordering::Greater);
        assert_eq!(utf16_order("é", "e"), Ordering::Greater);
    }

    #[test]
    fn digest_is_lowercase_sha256() {
        assert_eq!(
            sha256_hex(b"abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }
}
