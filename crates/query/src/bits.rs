//! The bitwise query operators `$bitsAllSet`, `$bitsAllClear`, `$bitsAnySet` and
//! `$bitsAnyClear`: their bitmask operands and how a value is tested, as mongod's
//! `BitTestMatchExpression` does.
//!
//! Rules: the operand is a non-negative integral number (its set bits), an array of bit
//! positions, or BinData (its set bits, bit 0 being the lowest bit of the first byte). A value
//! is tested when it is a number that is exactly an integer in the 64-bit range (two's
//! complement: a negative number has every bit from 64 on set) or BinData (bits past its end
//! are clear); any other value matches none of the four operators. Array fields are traversed
//! like any leaf predicate's. An empty position list is matched by every tested value under
//! "all" and by none under "any".

use bson::Bson;

use super::numeric::Number;
use tideway_base::display::value_string;
use tideway_base::error::{CommandError, CommandResult, ErrorCode};

/// The largest bit position accepted (mongod keeps positions in a 32-bit int).
const MAX_POSITION: i64 = i32::MAX as i64;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum BitTest {
    AllSet,
    AllClear,
    AnySet,
    AnyClear,
}

#[derive(Clone, Debug, PartialEq)]
pub struct BitsPredicate {
    test: BitTest,
    mask: Mask,
}

/// The bits tested: positions (an array operand, sorted without repeats), or a mask of bytes
/// (a number as its 8 little-endian bytes, or BinData as given: tested byte by byte, never
/// expanded into positions, so a large BinData operand costs its size and no more).
#[derive(Clone, Debug, PartialEq)]
enum Mask {
    Positions(Vec<u32>),
    Bytes { bytes: Vec<u8>, operand: Bson },
}

impl BitsPredicate {
    /// The predicate of `operator` (one of the four) on the field `path` with `argument`.
    pub(crate) fn parse(
        operator: &str,
        path: &str,
        argument: &Bson,
    ) -> CommandResult<BitsPredicate> {
        let test = match operator {
            "$bitsAllSet" => BitTest::AllSet,
            "$bitsAllClear" => BitTest::AllClear,
            "$bitsAnySet" => BitTest::AnySet,
            _ => BitTest::AnyClear,
        };
        let mask = match argument {
            Bson::Array(items) => {
                let mut positions = items
                    .iter()
                    .enumerate()
                    .map(|(index, item)| bit_position(index, item))
                    .collect::<CommandResult<Vec<u32>>>()?;
                positions.sort_unstable();
                positions.dedup();
                Mask::Positions(positions)
            }
            Bson::Binary(binary) => Mask::Bytes {
                bytes: binary.bytes.clone(),
                operand: argument.clone(),
            },
            number if Number::from_bson(number).is_some() => {
                let mask = non_negative_integer(operator, number)
                    .map_err(|why| CommandError::new(ErrorCode::FailedToParse, why))?;
                Mask::Bytes {
                    bytes: mask.to_le_bytes().to_vec(),
                    operand: argument.clone(),
                }
            }
            other => {
                return Err(CommandError::bad_value(format!(
                    "{path} takes an Array, a number, or a BinData but received: {operator}: {}",
                    value_string(other)
                )))
            }
        };
        Ok(BitsPredicate { test, mask })
    }

    pub fn operator(&self) -> &'static str {
        match self.test {
            BitTest::AllSet => "$bitsAllSet",
            BitTest::AllClear => "$bitsAllClear",
            BitTest::AnySet => "$bitsAnySet",
            BitTest::AnyClear => "$bitsAnyClear",
        }
    }

    /// The operand as explain shows it: the positions of an array, else the mask as given.
    pub fn operand(&self) -> Bson {
        match &self.mask {
            Mask::Positions(positions) => Bson::Array(
                positions
                    .iter()
                    .map(|position| Bson::Int32(*position as i32))
                    .collect(),
            ),
            Mask::Bytes { operand, .. } => operand.clone(),
        }
    }

    /// Whether `value` passes the test (values that are neither integers nor BinData never do).
    pub(crate) fn matches(&self, value: &Bson) -> bool {
        // Byte `i` of the value's bits (bit 0: the lowest bit of byte 0).
        let byte: Box<dyn Fn(usize) -> u8 + '_> = match value {
            Bson::Binary(binary) => {
                Box::new(|index: usize| binary.bytes.get(index).copied().unwrap_or(0))
            }
            number => {
                let Some(integer) = Number::from_bson(number).and_then(Number::to_exact_i64) else {
                    return false;
                };
                Box::new(move |index: usize| match index {
                    0..=7 => (integer >> (8 * index)) as u8,
                    _ if integer < 0 => 0xFF,
                    _ => 0,
                })
            }
        };
        match &self.mask {
            Mask::Positions(positions) => {
                let is_set =
                    |position: &u32| byte(*position as usize / 8) >> (position % 8) & 1 == 1;
                match self.test {
                    BitTest::AllSet => positions.iter().all(is_set),
                    BitTest::AllClear => !positions.iter().any(is_set),
                    BitTest::AnySet => positions.iter().any(is_set),
                    BitTest::AnyClear => !positions.iter().all(is_set),
                }
            }
            Mask::Bytes { bytes, .. } => {
                let mut pairs = bytes
                    .iter()
                    .enumerate()
                    .map(|(index, mask)| (byte(index), *mask));
                match self.test {
                    BitTest::AllSet => pairs.all(|(value, mask)| value & mask == mask),
                    BitTest::AllClear => pairs.all(|(value, mask)| value & mask == 0),
                    BitTest::AnySet => pairs.any(|(value, mask)| value & mask != 0),
                    BitTest::AnyClear => pairs.any(|(value, mask)| value & mask != mask),
                }
            }
        }
    }
}

/// One element of a position array: a non-negative integer that fits in 32 bits.
fn bit_position(index: usize, item: &Bson) -> CommandResult<u32> {
    let element = format!("{index}: {}", value_string(item));
    let failed =
        |why: String| CommandError::bad_value(format!("Failed to parse bit position. {why}"));
    if Number::from_bson(item).is_none() {
        return Err(failed(format!("Expected a number in: {element}")));
    }
    let position = non_negative_integer(&index.to_string(), item).map_err(failed)?;
    if position > MAX_POSITION {
        return Err(CommandError::bad_value(format!(
            "bit positions cannot be represented as a 32-bit signed integer: {element}"
        )));
    }
    Ok(position as u32)
}

/// A number that must be a non-negative integer in the 64-bit range, with mongod's reasons
/// (`parseIntegerElementToNonNegativeLong`) naming it `name: value`.
fn non_negative_integer(name: &str, value: &Bson) -> Result<i64, String> {
    let element = format!("{name}: {}", value_string(value));
    let number =
        Number::from_bson(value).ok_or_else(|| format!("Expected a number in: {element}"))?;
    if number.is_nan() {
        return Err(format!("Expected an integer, but found NaN in: {element}"));
    }
    let integer = match number.to_exact_i64() {
        Some(integer) => integer,
        None if number.to_i64_truncated().is_some() => {
            return Err(format!("Expected an integer: {element}"))
        }
        None => return Err(format!("Cannot represent as a 64-bit integer: {element}")),
    };
    if integer < 0 {
        return Err(format!("Expected a non-negative number in: {element}"));
    }
    Ok(integer)
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::spec::BinarySubtype;
    use bson::Binary;

    fn predicate(operator: &str, argument: Bson) -> BitsPredicate {
        BitsPredicate::parse(operator, "a", &argument).unwrap()
    }

    fn binary(bytes: &[u8]) -> Bson {
        Bson::Binary(Binary {
            subtype: BinarySubtype::Generic,
            bytes: bytes.to_vec(),
        })
    }

    #[test]
    fn the_documentation_examples() {
        // db.collection.find({a: {$bitsAllSet: [1, 5]}}) etc. over the documented values
        // 54 (0b00110110), 20 (0b00010100), 20.0 and BinData "Zg==" (0x66 = 0b01100110).
        let values = [
            Bson::Int32(54),
            Bson::Int32(20),
            Bson::Double(20.0),
            binary(&[0x66]),
        ];
        let matching = |operator: &str, argument: Bson| -> Vec<usize> {
            let predicate = predicate(operator, argument);
            (0..values.len())
                .filter(|i| predicate.matches(&values[*i]))
                .collect()
        };
        assert_eq!(
            matching("$bitsAllSet", Bson::Array(vec![1.into(), 5.into()])),
            [0, 3]
        );
        assert_eq!(matching("$bitsAllSet", Bson::Int32(50)), [0]);
        assert_eq!(matching("$bitsAllSet", binary(&[0x30])), [0]);
        assert_eq!(
            matching("$bitsAllClear", Bson::Array(vec![1.into(), 5.into()])),
            [1, 2]
        );
        assert_eq!(matching("$bitsAllClear", Bson::Int32(35)), [1, 2]);
        assert_eq!(
            matching("$bitsAnySet", Bson::Array(vec![1.into(), 5.into()])),
            [0, 3]
        );
        assert_eq!(matching("$bitsAnySet", Bson::Int32(35)), [0, 3]);
        assert_eq!(
            matching("$bitsAnyClear", Bson::Array(vec![1.into(), 5.into()])),
            [1, 2]
        );
        assert_eq!(matching("$bitsAnyClear", Bson::Int32(35)), [0, 1, 2, 3]);
    }

    #[test]
    fn negative_numbers_are_sign_extended_and_only_integers_are_tested() {
        let high = predicate("$bitsAllSet", Bson::Array(vec![200.into()]));
        assert!(high.matches(&Bson::Int32(-1)));
        assert!(!high.matches(&Bson::Int64(i64::MAX)));
        assert!(
            predicate("$bitsAllSet", Bson::Array(vec![63.into()])).matches(&Bson::Int64(i64::MIN))
        );
        let any = predicate("$bitsAnySet", Bson::Int32(1));
        for untested in [
            Bson::Double(1.5),
            Bson::Double(f64::NAN),
            Bson::Double(1e19),
            Bson::String("1".into()),
            Bson::Null,
        ] {
            assert!(!any.matches(&untested), "{untested}");
            assert!(!predicate("$bitsAllClear", Bson::Int32(2)).matches(&untested));
        }
        assert!(any.matches(&Bson::Decimal128("3".parse().unwrap())));
        // Empty lists: "all" holds for every tested value, "any" for none.
        assert!(predicate("$bitsAllSet", Bson::Array(vec![])).matches(&Bson::Int32(0)));
        assert!(!predicate("$bitsAnyClear", Bson::Array(vec![])).matches(&Bson::Int32(0)));
        assert!(!predicate("$bitsAllSet", Bson::Array(vec![])).matches(&Bson::Null));
        // A large BinData mask is tested byte by byte, never expanded into positions.
        let wide = predicate("$bitsAllSet", binary(&vec![0xFF; 1 << 20]));
        assert!(wide.matches(&Bson::Int32(-1)));
        assert!(!wide.matches(&Bson::Int64(i64::MAX)));
        assert!(wide.matches(&binary(&vec![0xFF; 1 << 20])));
        assert!(!wide.matches(&binary(&[0xFF; 8])));
        // BinData bits past the end are clear.
        assert!(predicate("$bitsAllClear", Bson::Array(vec![9.into()])).matches(&binary(&[0xFF])));
    }

    #[test]
    fn operands_are_refused_with_mongods_errors() {
        let error = |argument: Bson| {
            let error = BitsPredicate::parse("$bitsAllClear", "value", &argument).unwrap_err();
            (error.code.code(), error.errmsg)
        };
        assert_eq!(
            error(Bson::String("123".into())),
            (
                2,
                "value takes an Array, a number, or a BinData but received: $bitsAllClear: \"123\""
                    .into()
            )
        );
        assert_eq!(
            error(Bson::Double(1.2)),
            (9, "Expected an integer: $bitsAllClear: 1.2".into())
        );
        assert_eq!(
            error(Bson::Int32(-1)),
            (
                9,
                "Expected a non-negative number in: $bitsAllClear: -1".into()
            )
        );
        let (code, message) = error(Bson::Double(1e300));
        assert_eq!(code, 9);
        assert!(message.starts_with("Cannot represent as a 64-bit integer: $bitsAllClear: "));
        assert_eq!(
            error(Bson::Array(vec![Bson::Int32(-1)])),
            (
                2,
                "Failed to parse bit position. Expected a non-negative number in: 0: -1".into()
            )
        );
        assert_eq!(
            error(Bson::Array(vec![Bson::Int32(1), Bson::String("a".into())])),
            (
                2,
                "Failed to parse bit position. Expected a number in: 1: \"a\"".into()
            )
        );
        assert_eq!(error(Bson::Array(vec![Bson::Int64(1 << 40)])).0, 2);
    }
}
