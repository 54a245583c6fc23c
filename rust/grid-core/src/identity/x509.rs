//! The few fields of an X.509 certificate that the life of a site's certificate needs and
//! the path validation does not give: its serial number (revocation by serial) and its
//! validity (which of two certificates of a site is the newer one, and when an earlier
//! one stops vouching for anything).
//!
//! Read from the DER of a certificate that was already parsed and verified by the path
//! validation, so this reader only walks the outer structure:
//!
//! ```text
//! Certificate  ::= SEQUENCE { tbsCertificate, signatureAlgorithm, signature }
//! TBSCertificate ::= SEQUENCE { [0] version OPTIONAL, serialNumber INTEGER,
//!                               signature SEQUENCE, issuer SEQUENCE,
//!                               validity SEQUENCE { notBefore Time, notAfter Time }, ... }
//! Time ::= UTCTime (YYMMDDHHMMSSZ) | GeneralizedTime (YYYYMMDDHHMMSSZ)
//! ```

use std::fmt;
use std::time::Duration;

const SEQUENCE: u8 = 0x30;
const INTEGER: u8 = 0x02;
const EXPLICIT_VERSION: u8 = 0xa0;
const UTC_TIME: u8 = 0x17;
const GENERALIZED_TIME: u8 = 0x18;

/// Longest serial number RFC 5280 allows (20 octets), with room for a sign octet.
pub const MAX_SERIAL_LEN: usize = 21;

/// A certificate's serial number and validity, times since the Unix epoch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Validity {
    /// The serial's octets as encoded, leading zero octets removed.
    pub serial: Vec<u8>,
    pub not_before: Duration,
    pub not_after: Duration,
}

/// Why a certificate's serial or validity could not be read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct X509Error(&'static str);

impl fmt::Display for X509Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "certificate: {}", self.0)
    }
}

impl std::error::Error for X509Error {}

/// One DER element at the front of `input`: its tag, contents and what follows it.
fn element(input: &[u8]) -> Result<(u8, &[u8], &[u8]), X509Error> {
    let (&tag, rest) = input.split_first().ok_or(X509Error("truncated"))?;
    let (&first, rest) = rest.split_first().ok_or(X509Error("truncated"))?;
    let (len, rest) = if first < 0x80 {
        (usize::from(first), rest)
    } else {
        let octets = usize::from(first & 0x7f);
        if octets == 0 || octets > 4 || rest.len() < octets {
            return Err(X509Error("bad length"));
        }
        let len = rest[..octets]
            .iter()
            .fold(0usize, |len, octet| (len << 8) | usize::from(*octet));
        (len, &rest[octets..])
    };
    if rest.len() < len {
        return Err(X509Error("truncated"));
    }
    Ok((tag, &rest[..len], &rest[len..]))
}

fn expect<'a>(
    input: &'a [u8],
    tag: u8,
    what: &'static str,
) -> Result<(&'a [u8], &'a [u8]), X509Error> {
    let (found, contents, rest) = element(input)?;
    if found != tag {
        return Err(X509Error(what));
    }
    Ok((contents, rest))
}

/// The serial number and validity of a DER certificate.
pub fn validity(der: &[u8]) -> Result<Validity, X509Error> {
    let (certificate, _) = expect(der, SEQUENCE, "not a certificate")?;
    let (tbs, _) = expect(certificate, SEQUENCE, "no tbsCertificate")?;
    let mut fields = tbs;
    if fields.first() == Some(&EXPLICIT_VERSION) {
        fields = element(fields)?.2;
    }
    let (serial, fields) = expect(fields, INTEGER, "no serial number")?;
    let serial = match serial.iter().position(|octet| *octet != 0) {
        Some(first) => serial[first..].to_vec(),
        None => vec![0],
    };
    if serial.len() > MAX_SERIAL_LEN {
        return Err(X509Error("serial number too long"));
    }
    let (_, _, fields) = element(fields)?; // signature algorithm
    let (_, _, fields) = element(fields)?; // issuer
    let (dates, _) = expect(fields, SEQUENCE, "no validity")?;
    let (tag, not_before, dates) = element(dates)?;
    let not_before = time(tag, not_before)?;
    let (tag, not_after, _) = element(dates)?;
    let not_after = time(tag, not_after)?;
    Ok(Validity {
        serial,
        not_before,
        not_after,
    })
}

/// A UTCTime or GeneralizedTime in the form RFC 5280 requires (UTC, seconds, `Z`).
fn time(tag: u8, text: &[u8]) -> Result<Duration, X509Error> {
    let (year, rest) = match (tag, text.len()) {
        (UTC_TIME, 13) => {
            let yy = number(&text[..2])?;
            // RFC 5280 §4.1.2.5.1: YY >= 50 is 19YY, else 20YY.
            (if yy >= 50 { 1900 + yy } else { 2000 + yy }, &text[2..])
        }
        (GENERALIZED_TIME, 15) => (number(&text[..4])?, &text[4..]),
        _ => return Err(X509Error("bad time")),
    };
    if rest[10] != b'Z' {
        return Err(X509Error("time not in UTC"));
    }
    let month = number(&rest[0..2])?;
    let day = number(&rest[2..4])?;
    let (hour, minute, second) = (
        number(&rest[4..6])?,
        number(&rest[6..8])?,
        number(&rest[8..10])?,
    );
    if !(1..=12).contains(&month) || !(1..=31).contains(&day) || hour > 23 || minute > 59 {
        return Err(X509Error("bad time"));
    }
    if second > 60 {
        return Err(X509Error("bad time"));
    }
    let days = days_from_civil(year, month, day);
    let seconds = days * 86_400 + hour * 3600 + minute * 60 + second;
    Ok(Duration::from_secs(seconds))
}

fn number(digits: &[u8]) -> Result<u64, X509Error> {
    digits.iter().try_fold(0u64, |value, digit| {
        if digit.is_ascii_digit() {
            Ok(value * 10 + u64::from(digit - b'0'))
        } else {
            Err(X509Error("bad time"))
        }
    })
}

/// Days from 1970-01-01 to a date of the proleptic Gregorian calendar (1970 or later).
fn days_from_civil(year: u64, month: u64, day: u64) -> u64 {
    let (year, month) = if month <= 2 {
        (year - 1, month + 9)
    } else {
        (year, month - 3)
    };
    let era = year / 400;
    let year_of_era = year - era * 400;
    let day_of_year = (153 * month + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    (era * 146_097 + day_of_era).saturating_sub(719_468)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn civil_days_match_known_dates() {
        assert_eq!(days_from_civil(1970, 1, 1), 0);
        assert_eq!(days_from_civil(2000, 3, 1), 11_017);
        assert_eq!(days_from_civil(2026, 12, 6), 20_793);
    }

    #[test]
    fn both_time_forms_read() {
        let utc = time(UTC_TIME, b"261206113000Z").unwrap();
        let generalized = time(GENERALIZED_TIME, b"20261206113000Z").unwrap();
        assert_eq!(utc, generalized);
        assert_eq!(utc.as_secs(), 20_793 * 86_400 + 11 * 3600 + 30 * 60);
        assert_eq!(
            time(UTC_TIME, b"491231000000Z").unwrap().as_secs() / 86_400,
            days_from_civil(2049, 12, 31)
        );
    }

    #[test]
    fn a_generated_certificate_gives_its_serial_and_dates() {
        let mut params = rcgen::CertificateParams::new(vec!["site-a".to_owned()]).unwrap();
        params.serial_number = Some(rcgen::SerialNumber::from_slice(&[0x00, 0x9f, 0x01]));
        params.not_before = rcgen::date_time_ymd(2026, 12, 6);
        params.not_after = rcgen::date_time_ymd(2051, 1, 2);
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = params.self_signed(&key).unwrap();
        let found = validity(cert.der()).unwrap();
        assert_eq!(found.serial, vec![0x9f, 0x01]);
        assert_eq!(
            found.not_before.as_secs(),
            days_from_civil(2026, 12, 6) * 86_400
        );
        assert_eq!(
            found.not_after.as_secs(),
            days_from_civil(2051, 1, 2) * 86_400
        );
    }

    #[test]
    fn malformed_input_is_an_error_not_a_panic() {
        for bad in [
            &b""[..],
            b"\x30",
            b"\x30\x85\x00",
            b"\x30\x02\x02",
            b"\x02\x01\x01",
        ] {
            assert!(validity(bad).is_err(), "{bad:?}");
        }
        assert!(time(UTC_TIME, b"2612061130000").is_err());
        assert!(time(UTC_TIME, b"261306113000Z").is_err());
        assert!(time(GENERALIZED_TIME, b"2026120611300Z").is_err());
    }
}
