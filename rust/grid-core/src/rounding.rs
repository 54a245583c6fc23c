//! Python's `round(x, n)` for floats, fast: the exact value of `x` rounded half-to-even to
//! `n` decimal places, then the double nearest that decimal.

/// `round(value, decimals)` as Python computes it, or `None` where this fast path does not
/// apply (`decimals` outside 0..=22, or `value` so large that `value × 10^decimals` reaches
/// 2⁵²): the caller then asks Python.
///
/// With `scale = 10^decimals` (exact), the product `|value| × scale` is `p + e` exactly,
/// `p` the rounded product and `e` its error (one fused multiply-add). Below 2⁵² the
/// integer part of `p` and its fraction are exact, and `|e| ≤ ulp(p)/2 ≤ 1/4`, so whether
/// the exact product lies above, below or exactly halfway between two integers is decided
/// exactly. The rounded integer `r` is below 2⁵², and `r / scale`, a correctly rounded
/// division of two exact doubles, is the double nearest `r × 10^-decimals`: what Python's
/// string round trip gives.
pub fn round_decimals(value: f64, decimals: i32) -> Option<f64> {
    if !value.is_finite() {
        return Some(value); // Python: NaN and the infinities round to themselves
    }
    if !(0..=22).contains(&decimals) {
        return None;
    }
    let scale = POWERS_OF_TEN[decimals as usize];
    let magnitude = value.abs();
    let product = magnitude * scale;
    if product >= TWO_TO_52 {
        return None;
    }
    let error = magnitude.mul_add(scale, -product);
    let whole = product.floor();
    let fraction = product - whole;
    let up = if fraction < 0.25 {
        false
    } else {
        // Exact: `fraction` is within a factor of two of 1/2.
        let above_half = fraction - 0.5;
        if above_half > -error {
            true
        } else if above_half < -error {
            false
        } else {
            whole % 2.0 == 1.0 // halfway: to even
        }
    };
    let rounded = if up { whole + 1.0 } else { whole };
    Some((rounded / scale).copysign(value))
}

const TWO_TO_52: f64 = 4_503_599_627_370_496.0;

const POWERS_OF_TEN: [f64; 23] = [
    1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15, 1e16,
    1e17, 1e18, 1e19, 1e20, 1e21, 1e22,
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounds_half_to_even_on_the_exact_value() {
        // 0.0078125 = 1/128 exactly: a true tie at six decimals, to even.
        assert_eq!(round_decimals(0.0078125, 6), Some(0.007812));
        assert_eq!(round_decimals(0.0234375, 6), Some(0.023438));
        assert_eq!(round_decimals(2.5, 0), Some(2.0));
        assert_eq!(round_decimals(3.5, 0), Some(4.0));
        // 2.675 is below 2.675 in binary: it rounds down, as Python's round(2.675, 2) does.
        assert_eq!(round_decimals(2.675, 2), Some(2.67));
        // 0.1234565 is 0.12345649999… in binary, -1.0000005 is -1.00000050000…07.
        assert_eq!(round_decimals(0.1234565, 6), Some(0.123456));
        assert_eq!(round_decimals(-1.0000005, 6), Some(-1.000001));
        assert_eq!(round_decimals(3.0 * 0.988081, 6), Some(2.964243));
    }

    #[test]
    fn keeps_signs_and_special_values() {
        let tiny = round_decimals(-1e-9, 6).unwrap();
        assert_eq!(tiny, 0.0);
        assert!(tiny.is_sign_negative());
        assert!(round_decimals(f64::NAN, 6).unwrap().is_nan());
        assert_eq!(round_decimals(f64::INFINITY, 6), Some(f64::INFINITY));
        assert_eq!(round_decimals(5e-324, 6), Some(0.0));
    }

    #[test]
    fn leaves_what_it_cannot_decide_exactly_to_the_caller() {
        assert_eq!(round_decimals(1e10, 6), None);
        assert_eq!(round_decimals(1.5, 23), None);
        assert_eq!(round_decimals(1.5, -1), None);
        assert_eq!(round_decimals(4e9, 6), Some(4e9));
    }
}
