//! `$bucketAuto`'s `granularity`: rounding bucket boundaries up or down to a preferred number
//! series (Renard R5…R80, 1-2-5, E6…E192) or to powers of two, as mongod's granularity rounders.
//!
//! Invariants: values are non-negative numbers other than NaN (the stage checks them first);
//! zero rounds to itself; a series value times a power of ten is a boundary, and rounding up
//! gives the smallest boundary strictly above the value, rounding down the largest strictly
//! below it. Series rounding computes in doubles and answers doubles; powers of two answer
//! `2^exp` with `$pow`'s integer promotion for integer and double inputs. Decimal128 values are
//! refused (mongod rounds them in decimal arithmetic this server does not reproduce yet).

use bson::Bson;

use tideway_base::error::{CommandError, CommandResult, ErrorCode};

/// A rounding granularity.
#[derive(Clone, Debug)]
pub enum Granularity {
    /// A preferred number series: its values between 1 and 10 times a power of ten, ascending.
    Series(&'static [f64]),
    PowersOfTwo,
}

// mongod's series tables, as its source lists them.
const R5: &[f64] = &[10.0, 16.0, 25.0, 40.0, 63.0];
const R10: &[f64] = &[
    100.0, 125.0, 160.0, 200.0, 250.0, 315.0, 400.0, 500.0, 630.0, 800.0,
];
const R20: &[f64] = &[
    100.0, 112.0, 125.0, 140.0, 160.0, 180.0, 200.0, 224.0, 250.0, 280.0, 315.0, 355.0, 400.0,
    450.0, 500.0, 560.0, 630.0, 710.0, 800.0, 900.0,
];
const R40: &[f64] = &[
    100.0, 106.0, 112.0, 118.0, 125.0, 132.0, 140.0, 150.0, 160.0, 170.0, 180.0, 190.0, 200.0,
    212.0, 224.0, 236.0, 250.0, 265.0, 280.0, 300.0, 315.0, 355.0, 375.0, 400.0, 425.0, 450.0,
    475.0, 500.0, 530.0, 560.0, 600.0, 630.0, 670.0, 710.0, 750.0, 800.0, 850.0, 900.0, 950.0,
];
const R80: &[f64] = &[
    103.0, 109.0, 115.0, 122.0, 128.0, 136.0, 145.0, 155.0, 165.0, 175.0, 185.0, 195.0, 206.0,
    218.0, 230.0, 243.0, 258.0, 272.0, 290.0, 307.0, 325.0, 345.0, 365.0, 387.0, 412.0, 437.0,
    462.0, 487.0, 515.0, 545.0, 575.0, 615.0, 650.0, 690.0, 730.0, 775.0, 825.0, 875.0, 925.0,
    975.0,
];
const SERIES_125: &[f64] = &[10.0, 20.0, 50.0];
const E6: &[f64] = &[10.0, 15.0, 22.0, 33.0, 47.0, 68.0];
const E12: &[f64] = &[
    10.0, 12.0, 15.0, 18.0, 22.0, 27.0, 33.0, 39.0, 47.0, 56.0, 68.0, 82.0,
];
const E24: &[f64] = &[
    10.0, 11.0, 12.0, 13.0, 15.0, 16.0, 18.0, 20.0, 22.0, 24.0, 27.0, 30.0, 33.0, 36.0, 39.0, 43.0,
    47.0, 51.0, 56.0, 62.0, 68.0, 75.0, 82.0, 91.0,
];
const E48: &[f64] = &[
    100.0, 105.0, 110.0, 115.0, 121.0, 127.0, 133.0, 140.0, 147.0, 154.0, 162.0, 169.0, 178.0,
    187.0, 196.0, 205.0, 215.0, 226.0, 237.0, 249.0, 261.0, 274.0, 287.0, 301.0, 316.0, 332.0,
    348.0, 365.0, 383.0, 402.0, 422.0, 442.0, 464.0, 487.0, 511.0, 536.0, 562.0, 590.0, 619.0,
    649.0, 681.0, 715.0, 750.0, 787.0, 825.0, 866.0, 909.0, 953.0,
];
const E96: &[f64] = &[
    100.0, 102.0, 105.0, 107.0, 110.0, 113.0, 115.0, 118.0, 121.0, 124.0, 127.0, 130.0, 133.0,
    137.0, 140.0, 143.0, 147.0, 150.0, 154.0, 158.0, 162.0, 165.0, 169.0, 174.0, 178.0, 182.0,
    187.0, 191.0, 196.0, 200.0, 205.0, 210.0, 215.0, 221.0, 226.0, 232.0, 237.0, 243.0, 249.0,
    255.0, 261.0, 267.0, 274.0, 280.0, 287.0, 294.0, 301.0, 309.0, 316.0, 324.0, 332.0, 340.0,
    348.0, 357.0, 365.0, 374.0, 383.0, 392.0, 402.0, 412.0, 422.0, 432.0, 442.0, 453.0, 464.0,
    475.0, 487.0, 499.0, 511.0, 523.0, 536.0, 549.0, 562.0, 576.0, 590.0, 604.0, 619.0, 634.0,
    649.0, 665.0, 681.0, 698.0, 715.0, 732.0, 750.0, 768.0, 787.0, 806.0, 825.0, 845.0, 866.0,
    887.0, 909.0, 931.0, 953.0, 976.0,
];
const E192: &[f64] = &[
    100.0, 101.0, 102.0, 104.0, 105.0, 106.0, 107.0, 109.0, 110.0, 111.0, 113.0, 114.0, 115.0,
    117.0, 118.0, 120.0, 121.0, 123.0, 124.0, 126.0, 127.0, 129.0, 130.0, 132.0, 133.0, 135.0,
    137.0, 138.0, 140.0, 142.0, 143.0, 145.0, 147.0, 149.0, 150.0, 152.0, 154.0, 156.0, 158.0,
    160.0, 162.0, 164.0, 165.0, 167.0, 169.0, 172.0, 174.0, 176.0, 178.0, 180.0, 182.0, 184.0,
    187.0, 189.0, 191.0, 193.0, 196.0, 198.0, 200.0, 203.0, 205.0, 208.0, 210.0, 213.0, 215.0,
    218.0, 221.0, 223.0, 226.0, 229.0, 232.0, 234.0, 237.0, 240.0, 243.0, 246.0, 249.0, 252.0,
    255.0, 258.0, 261.0, 264.0, 267.0, 271.0, 274.0, 277.0, 280.0, 284.0, 287.0, 291.0, 294.0,
    298.0, 301.0, 305.0, 309.0, 312.0, 316.0, 320.0, 324.0, 328.0, 332.0, 336.0, 340.0, 344.0,
    348.0, 352.0, 357.0, 361.0, 365.0, 370.0, 374.0, 379.0, 383.0, 388.0, 392.0, 397.0, 402.0,
    407.0, 412.0, 417.0, 422.0, 427.0, 432.0, 437.0, 442.0, 448.0, 453.0, 459.0, 464.0, 470.0,
    475.0, 481.0, 487.0, 493.0, 499.0, 505.0, 511.0, 517.0, 523.0, 530.0, 536.0, 542.0, 549.0,
    556.0, 562.0, 569.0, 576.0, 583.0, 590.0, 597.0, 604.0, 612.0, 619.0, 626.0, 634.0, 642.0,
    649.0, 657.0, 665.0, 673.0, 681.0, 690.0, 698.0, 706.0, 715.0, 723.0, 732.0, 741.0, 750.0,
    759.0, 768.0, 777.0, 787.0, 796.0, 806.0, 816.0, 825.0, 835.0, 845.0, 856.0, 866.0, 876.0,
    887.0, 898.0, 909.0, 920.0, 931.0, 942.0, 953.0, 965.0, 976.0, 988.0,
];

impl Granularity {
    pub fn parse(name: &str) -> CommandResult<Granularity> {
        let series = match name {
            "R5" => R5,
            "R10" => R10,
            "R20" => R20,
            "R40" => R40,
            "R80" => R80,
            "1-2-5" => SERIES_125,
            "E6" => E6,
            "E12" => E12,
            "E24" => E24,
            "E48" => E48,
            "E96" => E96,
            "E192" => E192,
            "POWERSOF2" => return Ok(Granularity::PowersOfTwo),
            other => {
                return Err(CommandError::new(
                    ErrorCode::Location40257,
                    format!("Unknown rounding granularity '{other}'"),
                ))
            }
        };
        Ok(Granularity::Series(series))
    }

    /// The smallest boundary strictly above `value` (zero stays zero).
    pub(crate) fn round_up(&self, value: &Bson) -> CommandResult<Bson> {
        self.round(value, Direction::Up)
    }

    /// The largest boundary strictly below `value` (zero stays zero).
    pub(crate) fn round_down(&self, value: &Bson) -> CommandResult<Bson> {
        self.round(value, Direction::Down)
    }

    fn round(&self, value: &Bson, direction: Direction) -> CommandResult<Bson> {
        let number = match value {
            Bson::Int32(number) => f64::from(*number),
            Bson::Int64(number) => *number as f64,
            Bson::Double(number) => *number,
            Bson::Decimal128(_) => {
                return Err(CommandError::new(
                    ErrorCode::NotImplemented,
                    "$bucketAuto with a 'granularity' over decimal values is not supported by \
                     this server",
                ))
            }
            _ => return Err(CommandError::internal("granularity of a checked value")),
        };
        if number == 0.0 {
            return Ok(value.clone());
        }
        Ok(match self {
            Granularity::Series(series) => Bson::Double(round_to_series(series, number, direction)),
            Granularity::PowersOfTwo => power_of_two(value, number, direction),
        })
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Direction {
    Up,
    Down,
}

/// mongod's `GranularityRounderPreferredNumbers` in doubles; `number` is positive and finite or
/// infinite.
fn round_to_series(series: &[f64], number: f64, direction: Direction) -> f64 {
    let (first, last) = (series[0], series[series.len() - 1]);
    let mut multiplier = 1.0;
    match direction {
        Direction::Up => {
            while number >= last * multiplier {
                multiplier *= 10.0;
            }
            while number < first * multiplier {
                let previous_min = first * multiplier;
                multiplier /= 10.0;
                if number >= last * multiplier {
                    return previous_min;
                }
            }
            let above = series.partition_point(|&value| value * multiplier <= number);
            series[above.min(series.len() - 1)] * multiplier
        }
        Direction::Down => {
            while number <= first * multiplier {
                multiplier /= 10.0;
            }
            while number > last * multiplier {
                let previous_max = last * multiplier;
                multiplier *= 10.0;
                if number <= first * multiplier {
                    return previous_max;
                }
            }
            let at_or_above = series.partition_point(|&value| value * multiplier < number);
            series[at_or_above.saturating_sub(1)] * multiplier
        }
    }
}

/// mongod's `GranularityRounderPowersOfTwo`: `2^exp` as `$pow` of two integers answers it.
fn power_of_two(value: &Bson, number: f64, direction: Direction) -> Bson {
    let exponent: i64 = match (value, direction) {
        (Bson::Double(_), Direction::Up) => (number.log2().floor() + 1.0) as i64,
        (Bson::Double(_), Direction::Down) => (number.log2().ceil() - 1.0) as i64,
        _ => {
            let integer = match value {
                Bson::Int32(number) => i64::from(*number),
                Bson::Int64(number) => *number,
                _ => 0,
            };
            let highest_bit = 63 - i64::from(integer.leading_zeros());
            match direction {
                Direction::Up => highest_bit + 1,
                Direction::Down if integer.count_ones() == 1 => highest_bit - 1,
                Direction::Down => highest_bit,
            }
        }
    };
    // `$pow(2, exp)`: int when it fits, else long, else double; a negative exponent is a
    // double.
    match exponent {
        0..=30 => Bson::Int32(1 << exponent),
        31..=62 => Bson::Int64(1 << exponent),
        _ => Bson::Double(2f64.powi(exponent.clamp(-2000, 2000) as i32)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn up(granularity: &str, value: Bson) -> Bson {
        Granularity::parse(granularity)
            .expect("known")
            .round_up(&value)
            .expect("rounds")
    }

    fn down(granularity: &str, value: Bson) -> Bson {
        Granularity::parse(granularity)
            .expect("known")
            .round_down(&value)
            .expect("rounds")
    }

    #[test]
    fn series_round_to_strictly_greater_or_smaller_boundaries() {
        // From mongod's granularity_rounder_preferred_numbers_test.cpp: values on a boundary
        // round to the next one, values between powers of ten cross them.
        assert_eq!(up("R5", Bson::Int32(16)), Bson::Double(25.0));
        assert_eq!(down("R5", Bson::Int32(16)), Bson::Double(10.0));
        assert_eq!(up("R5", Bson::Int32(17)), Bson::Double(25.0));
        assert_eq!(down("R5", Bson::Int32(17)), Bson::Double(16.0));
        assert_eq!(up("E6", Bson::Double(0.8)), Bson::Double(1.0));
        let Bson::Double(rounded) = down("E6", Bson::Double(0.8)) else {
            panic!("a double");
        };
        assert!((rounded - 0.68).abs() < 1e-12, "{rounded}");
        assert_eq!(up("1-2-5", Bson::Int32(100)), Bson::Double(200.0));
        assert_eq!(down("1-2-5", Bson::Int32(100)), Bson::Double(50.0));
        assert_eq!(up("R5", Bson::Int32(0)), Bson::Int32(0));
    }

    #[test]
    fn powers_of_two_follow_pow_types() {
        assert_eq!(up("POWERSOF2", Bson::Int32(5)), Bson::Int32(8));
        assert_eq!(up("POWERSOF2", Bson::Int32(8)), Bson::Int32(16));
        assert_eq!(down("POWERSOF2", Bson::Int32(8)), Bson::Int32(4));
        assert_eq!(down("POWERSOF2", Bson::Int32(5)), Bson::Int32(4));
        assert_eq!(up("POWERSOF2", Bson::Double(0.3)), Bson::Double(0.5));
        assert_eq!(up("POWERSOF2", Bson::Int64(1 << 40)), Bson::Int64(1 << 41));
    }

    #[test]
    fn unknown_names_are_40257() {
        let error = Granularity::parse("R7").expect_err("unknown");
        assert_eq!(error.code.code(), 40257);
    }
}
