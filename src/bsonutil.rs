//! Small BSON helpers shared by every layer: reading numeric and boolean command arguments the way
//! mongod's command parsers accept them (any numeric type). Type names live in `query::display`.

use bson::Bson;

/// A numeric value as f64 (Int32, Int64, Double; Decimal128 through its string form).
pub fn as_f64(value: &Bson) -> Option<f64> {
    match value {
        Bson::Int32(v) => Some(f64::from(*v)),
        Bson::Int64(v) => Some(*v as f64),
        Bson::Double(v) => Some(*v),
        Bson::Decimal128(v) => v.to_string().parse().ok(),
        _ => None,
    }
}

/// Truthiness as mongod reads boolean-ish command options: booleans, and numbers (non-zero is true).
pub fn is_truthy(value: &Bson) -> bool {
    match value {
        Bson::Boolean(b) => *b,
        Bson::Null | Bson::Undefined => false,
        other => as_f64(other).is_none_or(|number| number != 0.0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_of_every_type_read_as_f64() {
        assert_eq!(as_f64(&Bson::Int32(3)), Some(3.0));
        assert_eq!(as_f64(&Bson::Int64(-4)), Some(-4.0));
        assert_eq!(as_f64(&Bson::Double(2.5)), Some(2.5));
        let decimal: bson::Decimal128 = "12.5".parse().unwrap();
        assert_eq!(as_f64(&Bson::Decimal128(decimal)), Some(12.5));
        assert_eq!(as_f64(&Bson::String("1".into())), None);
    }

    #[test]
    fn truthiness_matches_mongod_options() {
        assert!(is_truthy(&Bson::Int32(1)));
        assert!(!is_truthy(&Bson::Int32(0)));
        assert!(!is_truthy(&Bson::Boolean(false)));
        assert!(!is_truthy(&Bson::Null));
        assert!(is_truthy(&Bson::String("x".into())));
    }
}
