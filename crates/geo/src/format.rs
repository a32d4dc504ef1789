//! Numbers as mongod's messages print them: C++ `ostream` defaults (`%g`, six significant
//! digits), as in `Longitude/latitude is out of bounds, lng: 36.5043 lat: 110.271`.

/// `value` with six significant digits, fixed or scientific as `%g` chooses, trailing zeros
/// dropped (`190`, `36.5043`, `1e+07`, `1.5e-05`).
pub fn six_digits(value: f64) -> String {
    if value == 0.0 {
        return "0".to_string();
    }
    if !value.is_finite() {
        return if value.is_nan() {
            "nan".to_string()
        } else if value > 0.0 {
            "inf".to_string()
        } else {
            "-inf".to_string()
        };
    }
    // Rounded to six significant digits first: the exponent is the rounded value's.
    let scientific = format!("{value:.5e}");
    let (mantissa, exponent) = scientific
        .split_once('e')
        .unwrap_or((scientific.as_str(), "0"));
    let exponent: i32 = exponent.parse().unwrap_or(0);
    if !(-4..6).contains(&exponent) {
        let sign = if exponent < 0 { '-' } else { '+' };
        return format!(
            "{}e{sign}{:02}",
            trim_fraction(mantissa),
            exponent.unsigned_abs()
        );
    }
    let decimals = usize::try_from(5 - exponent).unwrap_or(0);
    trim_fraction(&format!("{value:.decimals$}")).to_string()
}

/// `text` without the trailing zeros of its fraction (and without a bare point).
fn trim_fraction(text: &str) -> &str {
    if !text.contains('.') {
        return text;
    }
    text.trim_end_matches('0').trim_end_matches('.')
}

#[cfg(test)]
mod tests {
    use super::six_digits;

    #[test]
    fn prints_as_cpp_streams_do() {
        // Values from mongod's messages, and printf("%g") for the rest.
        let cases = [
            (190.0, "190"),
            (36.50432, "36.5043"),
            (110.2712, "110.271"),
            (1000.0, "1000"),
            (-73.97, "-73.97"),
            (0.5, "0.5"),
            (123456.0, "123456"),
            (1234567.0, "1.23457e+06"),
            (1e7, "1e+07"),
            (0.0001, "0.0001"),
            (0.000015, "1.5e-05"),
            (999999.5, "1e+06"),
            (-0.0, "0"),
        ];
        for (value, printed) in cases {
            assert_eq!(six_digits(value), printed, "{value}");
        }
    }
}
