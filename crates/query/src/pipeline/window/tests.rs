//! Expected values come from the MongoDB manual's examples (the `$setWindowFields` page and each
//! window operator's page) and mongod's window function definitions; error codes are mongod's.

use bson::{doc, Bson, DateTime, Document};

use super::SetWindowFields;
use crate::expr::fixtures::context;
use crate::pipeline::fixtures::{parse_error, run, run_ok};
use tideway_base::error::ErrorCode;

fn date(text: &str) -> Bson {
    Bson::DateTime(DateTime::parse_rfc3339_str(text).expect("a valid date"))
}

/// The manual's `cakeSales` collection.
fn cake_sales() -> Vec<Document> {
    vec![
        doc! {"_id": 0, "type": "chocolate", "orderDate": date("2020-05-18T14:10:30Z"), "state": "CA", "price": 13, "quantity": 120},
        doc! {"_id": 1, "type": "chocolate", "orderDate": date("2021-03-20T11:30:05Z"), "state": "WA", "price": 14, "quantity": 140},
        doc! {"_id": 2, "type": "vanilla", "orderDate": date("2021-01-11T06:31:15Z"), "state": "CA", "price": 12, "quantity": 145},
        doc! {"_id": 3, "type": "vanilla", "orderDate": date("2020-02-08T13:13:23Z"), "state": "WA", "price": 13, "quantity": 104},
        doc! {"_id": 4, "type": "strawberry", "orderDate": date("2019-05-18T16:09:01Z"), "state": "CA", "price": 41, "quantity": 162},
        doc! {"_id": 5, "type": "strawberry", "orderDate": date("2019-01-08T06:12:03Z"), "state": "WA", "price": 43, "quantity": 134},
    ]
}

/// Runs one `$setWindowFields` over `input`; the `_id` and `field` of each output document.
fn window(spec: Document, input: Vec<Document>, field: &str) -> Vec<(Bson, Option<Bson>)> {
    run_ok(vec![doc! {"$setWindowFields": spec}], input)
        .into_iter()
        .map(|document| {
            (
                document.get("_id").cloned().unwrap_or(Bson::Null),
                document.get(field).cloned(),
            )
        })
        .collect()
}

#[track_caller]
fn assert_exact(actual: Vec<(Bson, Option<Bson>)>, expected: Vec<(i32, Bson)>) {
    assert_eq!(actual.len(), expected.len(), "{actual:?}");
    for ((id, value), (expected_id, expected_value)) in actual.iter().zip(&expected) {
        assert_eq!(id, &Bson::Int32(*expected_id), "{actual:?}");
        let value = value.as_ref().expect("the output field is set");
        assert!(
            crate::compare::identical_values(value, expected_value),
            "_id {expected_id}: {value:?} != {expected_value:?}"
        );
    }
}

#[track_caller]
fn assert_close(actual: Vec<(Bson, Option<Bson>)>, expected: Vec<(i32, f64)>) {
    assert_eq!(actual.len(), expected.len(), "{actual:?}");
    for ((id, value), (expected_id, expected_value)) in actual.iter().zip(&expected) {
        assert_eq!(id, &Bson::Int32(*expected_id), "{actual:?}");
        let value = match value {
            Some(Bson::Double(value)) => *value,
            Some(Bson::Int32(value)) => f64::from(*value),
            other => panic!("_id {expected_id}: not a number: {other:?}"),
        };
        assert!(
            (value - expected_value).abs() < 1e-9,
            "_id {expected_id}: {value} != {expected_value}"
        );
    }
}

#[test]
fn documents_windows_answer_the_manual_cake_sales_examples() {
    let by_year = || bson::bson!({"$year": "$orderDate"});
    // Cumulative quantity for each year.
    let cumulative = window(
        doc! {"partitionBy": by_year(), "sortBy": {"orderDate": 1}, "output": {
        "cumulativeQuantityForYear": {"$sum": "$quantity", "window": {"documents": ["unbounded", "current"]}}}},
        cake_sales(),
        "cumulativeQuantityForYear",
    );
    let ints = |pairs: &[(i32, i32)]| -> Vec<(i32, Bson)> {
        pairs.iter().map(|(id, v)| (*id, Bson::Int32(*v))).collect()
    };
    assert_exact(
        cumulative,
        ints(&[(5, 134), (4, 296), (3, 104), (0, 224), (2, 145), (1, 285)]),
    );
    // Moving average over the previous and current document.
    let moving = window(
        doc! {"partitionBy": by_year(), "sortBy": {"orderDate": 1}, "output": {
        "averageQuantity": {"$avg": "$quantity", "window": {"documents": [-1, 0]}}}},
        cake_sales(),
        "averageQuantity",
    );
    assert_close(
        moving,
        vec![
            (5, 134.0),
            (4, 148.0),
            (3, 104.0),
            (0, 112.0),
            (2, 145.0),
            (1, 142.5),
        ],
    );
    // The default window is the whole partition.
    let maximum = window(
        doc! {"partitionBy": by_year(), "sortBy": {"orderDate": 1}, "output": {
        "maximumQuantityForYear": {"$max": "$quantity", "window": {"documents": ["unbounded", "unbounded"]}},
        "maxDefault": {"$max": "$quantity"}}},
        cake_sales(),
        "maximumQuantityForYear",
    );
    assert_exact(
        maximum,
        ints(&[(5, 162), (4, 162), (3, 120), (0, 120), (2, 145), (1, 145)]),
    );
    // No partitionBy: one partition; `$count` counts the window.
    let counted = window(
        doc! {"sortBy": {"_id": 1}, "output": {"n": {"$count": {}, "window": {"documents": [-1, 1]}}}},
        cake_sales(),
        "n",
    );
    assert_exact(
        counted,
        ints(&[(0, 2), (1, 3), (2, 3), (3, 3), (4, 3), (5, 2)]),
    );
}

#[test]
fn range_windows_answer_the_manual_examples() {
    let similar = window(
        doc! {"partitionBy": "$state", "sortBy": {"price": 1}, "output": {
        "quantityFromSimilarOrders": {"$sum": "$quantity", "window": {"range": [-10, 10]}}}},
        cake_sales(),
        "quantityFromSimilarOrders",
    );
    assert_exact(
        similar,
        vec![
            (2, Bson::Int32(265)),
            (0, Bson::Int32(265)),
            (4, Bson::Int32(162)),
            (3, Bson::Int32(244)),
            (1, Bson::Int32(244)),
            (5, Bson::Int32(134)),
        ],
    );
    let dates = |texts: &[&str]| Bson::Array(texts.iter().map(|text| date(text)).collect());
    let (ca4, ca0, ca2) = (
        "2019-05-18T16:09:01Z",
        "2020-05-18T14:10:30Z",
        "2021-01-11T06:31:15Z",
    );
    let (wa5, wa3, wa1) = (
        "2019-01-08T06:12:03Z",
        "2020-02-08T13:13:23Z",
        "2021-03-20T11:30:05Z",
    );
    let recent = window(
        doc! {"partitionBy": "$state", "sortBy": {"orderDate": 1}, "output": {
        "recentOrders": {"$push": "$orderDate", "window": {"range": ["unbounded", 10], "unit": "month"}}}},
        cake_sales(),
        "recentOrders",
    );
    assert_exact(
        recent,
        vec![
            (4, dates(&[ca4])),
            (0, dates(&[ca4, ca0, ca2])),
            (2, dates(&[ca4, ca0, ca2])),
            (5, dates(&[wa5])),
            (3, dates(&[wa5, wa3])),
            (1, dates(&[wa5, wa3, wa1])),
        ],
    );
    let older = window(
        doc! {"partitionBy": "$state", "sortBy": {"orderDate": 1}, "output": {
        "recentOrders": {"$push": "$orderDate", "window": {"range": ["unbounded", -10], "unit": "month"}}}},
        cake_sales(),
        "recentOrders",
    );
    assert_exact(
        older,
        vec![
            (4, dates(&[])),
            (0, dates(&[ca4])),
            (2, dates(&[ca4])),
            (5, dates(&[])),
            (3, dates(&[wa5])),
            (1, dates(&[wa5, wa3])),
        ],
    );
}

#[test]
fn rank_functions_follow_the_manual() {
    let ranked = window(
        doc! {"partitionBy": "$state", "sortBy": {"quantity": -1}, "output": {
        "rankQuantityForState": {"$rank": {}}}},
        cake_sales(),
        "rankQuantityForState",
    );
    assert_exact(
        ranked,
        vec![
            (4, Bson::Int32(1)),
            (2, Bson::Int32(2)),
            (0, Bson::Int32(3)),
            (1, Bson::Int32(1)),
            (5, Bson::Int32(2)),
            (3, Bson::Int32(3)),
        ],
    );
    // Ties: $rank leaves gaps, $denseRank does not, $documentNumber numbers every document;
    // null and missing tie.
    let input = vec![
        doc! {"_id": 1, "q": 10},
        doc! {"_id": 2, "q": 20},
        doc! {"_id": 3, "q": 10},
        doc! {"_id": 4, "q": Bson::Null},
        doc! {"_id": 5},
    ];
    let output = run_ok(
        vec![doc! {"$setWindowFields": {"sortBy": {"q": 1}, "output": {
        "rank": {"$rank": {}}, "dense": {"$denseRank": {}}, "number": {"$documentNumber": {}}}}}],
        input,
    );
    let table: Vec<(i32, i32, i32, i32)> = output
        .iter()
        .map(|document| {
            (
                document.get_i32("_id").unwrap_or(0),
                document.get_i32("rank").unwrap_or(0),
                document.get_i32("dense").unwrap_or(0),
                document.get_i32("number").unwrap_or(0),
            )
        })
        .collect();
    assert_eq!(
        table,
        vec![
            (4, 1, 1, 1),
            (5, 1, 1, 2),
            (1, 3, 2, 3),
            (3, 3, 2, 4),
            (2, 5, 3, 5)
        ]
    );
}

#[test]
fn shift_follows_the_manual() {
    let shifted = window(
        doc! {"partitionBy": "$state", "sortBy": {"quantity": -1}, "output": {
        "shiftQuantityForState": {"$shift": {"output": "$quantity", "by": 1, "default": "Not available"}}}},
        cake_sales(),
        "shiftQuantityForState",
    );
    assert_exact(
        shifted,
        vec![
            (4, Bson::Int32(145)),
            (2, Bson::Int32(120)),
            (0, Bson::String("Not available".into())),
            (1, Bson::Int32(134)),
            (5, Bson::Int32(104)),
            (3, Bson::String("Not available".into())),
        ],
    );
    let back = window(
        doc! {"partitionBy": "$state", "sortBy": {"quantity": -1}, "output": {
        "s": {"$shift": {"output": "$quantity", "by": -1}}}},
        cake_sales(),
        "s",
    );
    assert_exact(
        back,
        vec![
            (4, Bson::Null),
            (2, Bson::Int32(162)),
            (0, Bson::Int32(145)),
            (1, Bson::Null),
            (5, Bson::Int32(140)),
            (3, Bson::Int32(134)),
        ],
    );
}

fn delivery_fleet() -> Vec<Document> {
    let rows = [
        (0, "1", "2020-05-18T14:10:30Z", 1295.1),
        (1, "1", "2020-05-18T14:11:00Z", 1295.63),
        (2, "1", "2020-05-18T14:11:30Z", 1296.25),
        (3, "1", "2020-05-18T14:12:00Z", 1296.76),
        (4, "2", "2020-05-18T14:10:30Z", 10234.1),
        (5, "2", "2020-05-18T14:11:00Z", 10234.33),
        (6, "2", "2020-05-18T14:11:30Z", 10234.73),
        (7, "2", "2020-05-18T14:12:00Z", 10235.13),
    ];
    rows.iter()
        .map(|(id, truck, time, miles)| {
            doc! {"_id": id, "truckID": truck, "timeStamp": date(time), "miles": miles}
        })
        .collect()
}

#[test]
fn derivative_and_integral_follow_the_manual() {
    let speeds = window(
        doc! {"partitionBy": "$truckID", "sortBy": {"timeStamp": 1}, "output": {
        "truckAverageSpeed": {"$derivative": {"input": "$miles", "unit": "hour"},
                              "window": {"range": [-30, 0], "unit": "second"}}}},
        delivery_fleet(),
        "truckAverageSpeed",
    );
    // The first document of each truck has a window of itself: no run, null.
    assert_eq!(speeds[0], (Bson::Int32(0), Some(Bson::Null)));
    assert_eq!(speeds[4], (Bson::Int32(4), Some(Bson::Null)));
    let per_hour = |a: f64, b: f64| (b - a) / 30_000.0 * 3_600_000.0;
    assert_close(
        vec![speeds[1].clone(), speeds[2].clone(), speeds[3].clone()],
        vec![
            (1, per_hour(1295.1, 1295.63)),
            (2, per_hour(1295.63, 1296.25)),
            (3, per_hour(1296.25, 1296.76)),
        ],
    );
    // The manual's rounded speeds.
    for ((_, speed), expected) in speeds[1..4].iter().zip([63.6, 74.4, 61.2]) {
        let Some(Bson::Double(speed)) = speed else {
            panic!("{speed:?}")
        };
        assert!((speed - expected).abs() < 1e-6, "{speed} != {expected}");
    }

    let meters = [
        ("1", "2020-05-18T14:10:30Z", 2.95),
        ("1", "2020-05-18T14:11:00Z", 2.7),
        ("1", "2020-05-18T14:11:30Z", 2.6),
        ("1", "2020-05-18T14:12:00Z", 2.98),
        ("2", "2020-05-18T14:10:30Z", 2.5),
        ("2", "2020-05-18T14:11:00Z", 2.25),
        ("2", "2020-05-18T14:11:30Z", 2.75),
        ("2", "2020-05-18T14:12:00Z", 2.82),
    ];
    let power: Vec<Document> = meters
        .iter()
        .enumerate()
        .map(|(id, (meter, time, kilowatts))| {
            doc! {"_id": id as i32, "powerMeterID": meter, "timeStamp": date(time), "kilowatts": kilowatts}
        })
        .collect();
    // The trapezoidal rule over 30-second steps, in kilowatt-hours.
    let hours = window(
        doc! {"partitionBy": "$powerMeterID", "sortBy": {"timeStamp": 1}, "output": {
        "powerMeterKilowattHours": {"$integral": {"input": "$kilowatts", "unit": "hour"},
                                    "window": {"range": ["unbounded", "current"], "unit": "minute"}}}},
        power,
        "powerMeterKilowattHours",
    );
    assert_close(
        hours,
        vec![
            (0, 0.0),
            (1, 0.023541666666666666),
            (2, 0.045625),
            (3, 0.068875),
            (4, 0.0),
            (5, 0.019791666666666666),
            (6, 0.040624999999999994),
            (7, 229_800.0 / 3_600_000.0),
        ],
    );
}

#[test]
fn exp_moving_avg_follows_the_manual() {
    let rows = [
        ("ABC", "2020-05-18T20:00:00Z", 13.0),
        ("ABC", "2020-05-19T20:00:00Z", 15.4),
        ("ABC", "2020-05-20T20:00:00Z", 12.0),
        ("ABC", "2020-05-21T20:00:00Z", 11.7),
        ("DEF", "2020-05-18T20:00:00Z", 82.0),
        ("DEF", "2020-05-19T20:00:00Z", 94.3),
        ("DEF", "2020-05-20T20:00:00Z", 112.0),
        ("DEF", "2020-05-21T20:00:00Z", 97.3),
    ];
    let prices: Vec<Document> = rows
        .iter()
        .enumerate()
        .map(|(id, (stock, time, price))| {
            doc! {"_id": id as i32, "stock": stock, "date": date(time), "price": price}
        })
        .collect();
    let with_n = window(
        doc! {"partitionBy": "$stock", "sortBy": {"date": 1}, "output": {
        "expMovingAvgForStock": {"$expMovingAvg": {"input": "$price", "N": 2}}}},
        prices.clone(),
        "expMovingAvgForStock",
    );
    assert_close(
        with_n,
        vec![
            (0, 13.0),
            (1, 14.6),
            (2, 12.866666666666667),
            (3, 12.088888888888889),
            (4, 82.0),
            (5, 90.2),
            (6, 104.73333333333333),
            (7, 99.77777777777777),
        ],
    );
    let with_alpha = window(
        doc! {"partitionBy": "$stock", "sortBy": {"date": 1}, "output": {
        "expMovingAvgForStock": {"$expMovingAvg": {"input": "$price", "alpha": 0.75}}}},
        prices,
        "expMovingAvgForStock",
    );
    assert_close(
        with_alpha,
        vec![
            (0, 13.0),
            (1, 14.8),
            (2, 12.7),
            (3, 11.95),
            (4, 82.0),
            (5, 91.225),
            (6, 106.80625),
            (7, 99.676_562_5),
        ],
    );
}

#[test]
fn covariance_is_the_population_or_sample_covariance_of_the_window() {
    let spec = |function: &str| {
        let mut output = Document::new();
        output.insert(
            "c",
            doc! {function: [{"$year": "$orderDate"}, "$quantity"], "window": {"documents": ["unbounded", "current"]}},
        );
        doc! {"partitionBy": "$state", "sortBy": {"orderDate": 1}, "output": output}
    };
    // CA by date: (2019, 162), (2020, 120), (2021, 145); WA: (2019, 134), (2020, 104),
    // (2021, 140).
    let population = window(spec("$covariancePop"), cake_sales(), "c");
    assert_close(
        population,
        vec![
            (4, 0.0),
            (0, -10.5),
            (2, -17.0 / 3.0),
            (5, 0.0),
            (3, -7.5),
            (1, 2.0),
        ],
    );
    let sample = window(spec("$covarianceSamp"), cake_sales(), "c");
    assert_eq!(sample[0].1, Some(Bson::Null));
    assert_close(sample[1..3].to_vec(), vec![(0, -21.0), (2, -8.5)]);
}

#[test]
fn locf_and_linear_fill_follow_the_manual() {
    let hours = |hour: u32| date(&format!("2021-03-08T{hour:02}:00:00Z"));
    let stock = vec![
        doc! {"_id": 1, "time": hours(9), "price": 500},
        doc! {"_id": 2, "time": hours(10)},
        doc! {"_id": 3, "time": hours(11), "price": 515},
        doc! {"_id": 4, "time": hours(12), "price": Bson::Null},
        doc! {"_id": 5, "time": hours(13)},
        doc! {"_id": 6, "time": hours(14), "price": 530},
    ];
    let carried = window(
        doc! {"sortBy": {"time": 1}, "output": {"price": {"$locf": "$price"}}},
        stock.clone(),
        "price",
    );
    assert_exact(
        carried,
        vec![
            (1, Bson::Int32(500)),
            (2, Bson::Int32(500)),
            (3, Bson::Int32(515)),
            (4, Bson::Int32(515)),
            (5, Bson::Int32(515)),
            (6, Bson::Int32(530)),
        ],
    );
    let filled = window(
        doc! {"sortBy": {"time": 1}, "output": {"price": {"$linearFill": "$price"}}},
        stock,
        "price",
    );
    assert_close(
        filled,
        vec![
            (1, 500.0),
            (2, 507.5),
            (3, 515.0),
            (4, 520.0),
            (5, 525.0),
            (6, 530.0),
        ],
    );
}

#[test]
fn outputs_are_set_at_dotted_paths_and_first_last_read_the_window_ends() {
    let output = run_ok(
        vec![doc! {"$setWindowFields": {"sortBy": {"_id": 1}, "output": {
        "w.first": {"$first": "$v", "window": {"documents": [-1, 1]}},
        "w.last": {"$last": "$v", "window": {"documents": [-1, 1]}},
        "empty": {"$first": "$v", "window": {"documents": [5, 6]}},
        "gone": {"$first": "$missing"}}}}],
        vec![
            doc! {"_id": 1, "v": "a", "gone": 1},
            doc! {"_id": 2, "v": "b", "w": 5},
            doc! {"_id": 3, "v": "c", "w": {"x": 1}},
        ],
    );
    let expected = vec![
        doc! {"_id": 1, "v": "a", "w": {"first": "a", "last": "b"}, "empty": Bson::Null},
        doc! {"_id": 2, "v": "b", "w": {"first": "a", "last": "c"}, "empty": Bson::Null},
        doc! {"_id": 3, "v": "c", "w": {"x": 1, "first": "b", "last": "c"}, "empty": Bson::Null},
    ];
    crate::pipeline::fixtures::assert_documents(&output, &expected);
}

#[test]
fn partitions_group_null_with_missing_and_refuse_arrays() {
    let ids = window(
        doc! {"partitionBy": "$p", "sortBy": {"_id": 1}, "output": {"n": {"$count": {}}}},
        vec![
            doc! {"_id": 1, "p": Bson::Null},
            doc! {"_id": 2, "p": 1},
            doc! {"_id": 3},
            doc! {"_id": 4, "p": 1.0},
        ],
        "n",
    );
    assert_exact(
        ids,
        vec![
            (1, Bson::Int32(2)),
            (3, Bson::Int32(2)),
            (2, Bson::Int32(2)),
            (4, Bson::Int32(2)),
        ],
    );
    let error = run(
        vec![doc! {"$setWindowFields": {"partitionBy": "$p", "output": {"n": {"$count": {}}}}}],
        vec![doc! {"_id": 1, "p": [1, 2]}],
    )
    .expect_err("an array partition");
    assert_eq!(error.code, ErrorCode::TypeMismatch);
}

#[test]
fn bad_specifications_fail_with_mongods_codes() {
    let cases: Vec<(Bson, ErrorCode)> = vec![
        (Bson::Int32(1), ErrorCode::FailedToParse),
        (bson::bson!({}), ErrorCode::Location40414),
        (
            bson::bson!({"output": {}, "foo": 1}),
            ErrorCode::Location40415,
        ),
        (bson::bson!({"output": 1}), ErrorCode::TypeMismatch),
        (
            bson::bson!({"sortBy": 1, "output": {}}),
            ErrorCode::TypeMismatch,
        ),
        (
            bson::bson!({"partitionBy": [1, 2], "output": {}}),
            ErrorCode::TypeMismatch,
        ),
        (bson::bson!({"output": {"a": 1}}), ErrorCode::FailedToParse),
        (
            bson::bson!({"output": {"a": {"$summ": 1}}}),
            ErrorCode::FailedToParse,
        ),
        (
            bson::bson!({"output": {"a": {"b": 1}}}),
            ErrorCode::FailedToParse,
        ),
        (
            bson::bson!({"output": {"a": {"$sum": 1, "foo": 1}}}),
            ErrorCode::FailedToParse,
        ),
        (
            bson::bson!({"output": {"a": {"$sum": 1, "$avg": 1}}}),
            ErrorCode::FailedToParse,
        ),
        (
            bson::bson!({"output": {"a": {"$sum": 1}, "a.b": {"$sum": 1}}}),
            ErrorCode::Location6307900,
        ),
        (
            bson::bson!({"sortBy": {"x": 1}, "output": {"a": {"$sum": 1, "window": {"documents": [1, 0]}}}}),
            ErrorCode::Location5339900,
        ),
        (
            bson::bson!({"sortBy": {"x": 1}, "output": {"a": {"$sum": 1, "window": {"documents": ["current", -1]}}}}),
            ErrorCode::Location5339900,
        ),
        (
            bson::bson!({"output": {"a": {"$sum": 1, "window": {"documents": [-1, 0]}}}}),
            ErrorCode::Location5339901,
        ),
        (
            bson::bson!({"sortBy": {"x": 1}, "output": {"a": {"$sum": 1, "window": {"documents": ["now", 0]}}}}),
            ErrorCode::FailedToParse,
        ),
        (
            bson::bson!({"sortBy": {"x": 1}, "output": {"a": {"$sum": 1, "window": {"documents": [0.5, 1]}}}}),
            ErrorCode::FailedToParse,
        ),
        (
            bson::bson!({"sortBy": {"x": 1}, "output": {"a": {"$sum": 1, "window": {"documents": ["$x", 1]}}}}),
            ErrorCode::FailedToParse,
        ),
        (
            bson::bson!({"sortBy": {"x": 1}, "output": {"a": {"$sum": 1, "window": {"documents": [0]}}}}),
            ErrorCode::FailedToParse,
        ),
        (
            bson::bson!({"sortBy": {"x": 1}, "output": {"a": {"$sum": 1, "window": {"documents": [0, 1], "range": [0, 1]}}}}),
            ErrorCode::FailedToParse,
        ),
        (
            bson::bson!({"sortBy": {"x": 1}, "output": {"a": {"$sum": 1, "window": {"documents": [0, 1], "unit": "day"}}}}),
            ErrorCode::FailedToParse,
        ),
        (
            bson::bson!({"sortBy": {"x": 1}, "output": {"a": {"$sum": 1, "window": {"foo": 1}}}}),
            ErrorCode::FailedToParse,
        ),
        (
            bson::bson!({"sortBy": {"x": 1}, "output": {"a": {"$sum": 1, "window": 1}}}),
            ErrorCode::FailedToParse,
        ),
        (
            bson::bson!({"output": {"a": {"$sum": 1, "window": {"range": [-1, 1]}}}}),
            ErrorCode::Location5339902,
        ),
        (
            bson::bson!({"sortBy": {"x": 1, "y": 1}, "output": {"a": {"$sum": 1, "window": {"range": [-1, 1]}}}}),
            ErrorCode::Location5339902,
        ),
        (
            bson::bson!({"sortBy": {"x": -1}, "output": {"a": {"$sum": 1, "window": {"range": [-1, 1]}}}}),
            ErrorCode::Location8947401,
        ),
        (
            bson::bson!({"sortBy": {"x": 1}, "output": {"a": {"$sum": 1, "window": {"range": [2, 1]}}}}),
            ErrorCode::Location5339900,
        ),
        (
            bson::bson!({"sortBy": {"x": 1}, "output": {"a": {"$sum": 1, "window": {"range": ["a", 1]}}}}),
            ErrorCode::FailedToParse,
        ),
        (
            bson::bson!({"sortBy": {"x": 1}, "output": {"a": {"$sum": 1, "window": {"range": [-1.5, 1], "unit": "day"}}}}),
            ErrorCode::FailedToParse,
        ),
        (
            bson::bson!({"sortBy": {"x": 1}, "output": {"a": {"$sum": 1, "window": {"range": [-1, 1], "unit": "fortnight"}}}}),
            ErrorCode::FailedToParse,
        ),
        (
            bson::bson!({"sortBy": {"x": 1}, "output": {"a": {"$sum": 1, "window": {"range": [-1, 1], "unit": 5}}}}),
            ErrorCode::FailedToParse,
        ),
        (
            bson::bson!({"output": {"a": {"$rank": {}}}}),
            ErrorCode::Location5371602,
        ),
        (
            bson::bson!({"sortBy": {"x": 1, "y": 1}, "output": {"a": {"$denseRank": {}}}}),
            ErrorCode::Location5371602,
        ),
        (
            bson::bson!({"sortBy": {"x": 1}, "output": {"a": {"$rank": 1}}}),
            ErrorCode::Location5371603,
        ),
        (
            bson::bson!({"sortBy": {"x": 1}, "output": {"a": {"$documentNumber": {}, "window": {}}}}),
            ErrorCode::Location5371601,
        ),
        (
            bson::bson!({"output": {"a": {"$shift": {"output": "$x", "by": 1}}}}),
            ErrorCode::FailedToParse,
        ),
        (
            bson::bson!({"sortBy": {"x": 1}, "output": {"a": {"$shift": {"output": "$x", "by": 1.5}}}}),
            ErrorCode::FailedToParse,
        ),
        (
            bson::bson!({"sortBy": {"x": 1}, "output": {"a": {"$shift": {"output": "$x"}}}}),
            ErrorCode::FailedToParse,
        ),
        (
            bson::bson!({"sortBy": {"x": 1}, "output": {"a": {"$shift": {"output": "$x", "by": 1, "default": "$y"}}}}),
            ErrorCode::FailedToParse,
        ),
        (
            bson::bson!({"sortBy": {"x": 1}, "output": {"a": {"$shift": {"output": "$x", "by": 1}, "window": {}}}}),
            ErrorCode::FailedToParse,
        ),
        (
            bson::bson!({"sortBy": {"x": 1}, "output": {"a": {"$derivative": {"input": "$y"}}}}),
            ErrorCode::FailedToParse,
        ),
        (
            bson::bson!({"output": {"a": {"$derivative": {"input": "$y"}, "window": {"documents": [-1, 0]}}}}),
            ErrorCode::FailedToParse,
        ),
        (
            bson::bson!({"sortBy": {"x": 1}, "output": {"a": {"$derivative": {"input": "$y", "unit": "month"}, "window": {"documents": [-1, 0]}}}}),
            ErrorCode::Location5490710,
        ),
        (
            bson::bson!({"sortBy": {"x": 1}, "output": {"a": {"$integral": {"unit": "day"}}}}),
            ErrorCode::FailedToParse,
        ),
        (
            bson::bson!({"sortBy": {"x": 1, "y": 1}, "output": {"a": {"$integral": {"input": "$y"}}}}),
            ErrorCode::FailedToParse,
        ),
        (
            bson::bson!({"output": {"a": {"$expMovingAvg": {"input": "$y", "N": 2}}}}),
            ErrorCode::FailedToParse,
        ),
        (
            bson::bson!({"sortBy": {"x": 1}, "output": {"a": {"$expMovingAvg": {"input": "$y", "N": 0}}}}),
            ErrorCode::FailedToParse,
        ),
        (
            bson::bson!({"sortBy": {"x": 1}, "output": {"a": {"$expMovingAvg": {"input": "$y", "alpha": 1}}}}),
            ErrorCode::FailedToParse,
        ),
        (
            bson::bson!({"sortBy": {"x": 1}, "output": {"a": {"$expMovingAvg": {"input": "$y", "N": 2, "alpha": 0.5}}}}),
            ErrorCode::FailedToParse,
        ),
        (
            bson::bson!({"sortBy": {"x": 1, "y": 1}, "output": {"a": {"$linearFill": "$y"}}}),
            ErrorCode::Location605001,
        ),
        (
            bson::bson!({"sortBy": {"x": 1}, "output": {"a": {"$locf": "$y", "window": {}}}}),
            ErrorCode::FailedToParse,
        ),
        (
            bson::bson!({"output": {"a": {"$count": 1}}}),
            ErrorCode::FailedToParse,
        ),
        (
            bson::bson!({"output": {"a": {"$firstN": {"input": "$y", "n": 0}}}}),
            ErrorCode::Location5787908,
        ),
        (
            bson::bson!({"output": {"a": {"$median": {"input": "$y", "method": "exact"}}}}),
            ErrorCode::BadValue,
        ),
        (
            bson::bson!({"output": {"a": {"$percentile": {"input": "$y", "p": [2], "method": "approximate"}}}}),
            ErrorCode::Location7750303,
        ),
    ];
    for (spec, code) in cases {
        let error = parse_error(vec![doc! {"$setWindowFields": spec.clone()}]);
        assert_eq!(error.code, code, "{spec:?}: {}", error.errmsg);
    }
}

#[test]
fn data_errors_fail_with_mongods_codes() {
    let cases: Vec<(Document, Vec<Document>, ErrorCode)> = vec![
        (
            doc! {"sortBy": {"x": 1}, "output": {"a": {"$sum": 1, "window": {"range": [-1, 1]}}}},
            vec![doc! {"x": "text"}],
            ErrorCode::Location5429414,
        ),
        (
            doc! {"sortBy": {"x": 1}, "output": {"a": {"$sum": 1, "window": {"range": [-1, 1]}}}},
            vec![doc! {"x": date("2021-01-01T00:00:00Z")}],
            ErrorCode::Location5429413,
        ),
        (
            doc! {"sortBy": {"x": 1}, "output": {"a": {"$sum": 1, "window": {"range": [-1, 1], "unit": "day"}}}},
            vec![doc! {"x": 1}],
            ErrorCode::Location5429513,
        ),
        (
            doc! {"sortBy": {"x": 1}, "output": {"a": {"$linearFill": "$y"}}},
            vec![doc! {"x": 1, "y": 1}, doc! {"x": 1, "y": 2}],
            ErrorCode::Location6050106,
        ),
        (
            doc! {"sortBy": {"x": 1}, "output": {"a": {"$linearFill": "$y"}}},
            vec![doc! {"x": 1, "y": "text"}],
            ErrorCode::TypeMismatch,
        ),
        (
            doc! {"sortBy": {"x": 1}, "output": {"a": {"$derivative": {"input": "$y"}, "window": {"documents": [-1, 0]}}}},
            vec![doc! {"x": date("2021-01-01T00:00:00Z"), "y": 1}],
            ErrorCode::Location5624901,
        ),
        (
            doc! {"sortBy": {"x": 1}, "output": {"a": {"$derivative": {"input": "$y", "unit": "second"}, "window": {"documents": [-1, 0]}}}},
            vec![doc! {"x": 1, "y": 1}],
            ErrorCode::Location5624900,
        ),
        (
            doc! {"sortBy": {"x": 1}, "output": {"a": {"$integral": {"input": "$y"}}}},
            vec![doc! {"x": 1, "y": "text"}],
            ErrorCode::Location5423900,
        ),
    ];
    for (spec, input, code) in cases {
        let error = run(vec![doc! {"$setWindowFields": spec.clone()}], input)
            .expect_err("the data is refused");
        assert_eq!(error.code, code, "{spec:?}: {}", error.errmsg);
    }
}

#[test]
fn a_partition_over_the_memory_limit_fails_without_disk_use() {
    let stage = SetWindowFields::parse(&Bson::Document(
        doc! {"partitionBy": "$p", "output": {"n": {"$count": {}}}},
    ))
    .expect("parses");
    let input = || -> super::DocumentStream {
        Box::new(
            (0..100)
                .map(|i| Ok(doc! {"_id": i, "p": i % 2, "pad": "x".repeat(100)}))
                .collect::<Vec<_>>()
                .into_iter(),
        )
    };
    // Sorted input is not needed for the limit: each run of equal keys is a partition.
    let error = stage
        .partitions(input(), context(), 1_000, false)
        .collect::<Result<Vec<_>, _>>();
    assert!(error.is_ok(), "partitions of one document fit");
    let sorted = || -> super::DocumentStream {
        Box::new(
            (0..100)
                .map(|i| Ok(doc! {"_id": i, "p": 1, "pad": "x".repeat(100)}))
                .collect::<Vec<_>>()
                .into_iter(),
        )
    };
    let error = stage
        .partitions(sorted(), context(), 1_000, false)
        .collect::<Result<Vec<_>, _>>()
        .expect_err("over the limit");
    assert_eq!(error.code, ErrorCode::Location5414201);
    let allowed = stage
        .partitions(sorted(), context(), 1_000, true)
        .collect::<Result<Vec<_>, _>>()
        .expect("disk use allowed");
    assert_eq!(allowed.len(), 100);
}

#[test]
fn accumulator_windows_match_recomputation() {
    // Sliding, growing, shrinking and fixed windows over the same data agree with a direct sum.
    let input: Vec<Document> = (0..12).map(|i| doc! {"_id": i, "v": i * i % 7}).collect();
    let values: Vec<i32> = (0..12).map(|i| i * i % 7).collect();
    let bounds: Vec<(Bson, Bson)> = vec![
        (
            Bson::String("unbounded".into()),
            Bson::String("current".into()),
        ),
        (
            Bson::String("current".into()),
            Bson::String("unbounded".into()),
        ),
        (Bson::Int32(-2), Bson::Int32(3)),
        (Bson::Int32(2), Bson::Int32(4)),
        (Bson::Int32(-4), Bson::Int32(-1)),
        (Bson::String("unbounded".into()), Bson::Int32(-3)),
    ];
    for (lower, upper) in bounds {
        let sums = window(
            doc! {"sortBy": {"_id": 1}, "output": {"s": {"$sum": "$v", "window": {"documents": [lower.clone(), upper.clone()]}}}},
            input.clone(),
            "s",
        );
        for (index, (_, sum)) in sums.iter().enumerate() {
            let at = |bound: &Bson, unbounded: i64| match bound {
                Bson::String(text) if text == "current" => index as i64,
                Bson::String(_) => unbounded,
                Bson::Int32(offset) => index as i64 + i64::from(*offset),
                _ => unreachable!(),
            };
            let (low, high) = (at(&lower, 0).max(0), at(&upper, 11).min(11));
            let expected: i32 = (low..=high).map(|i| values[i as usize]).sum();
            assert_eq!(
                sum,
                &Some(Bson::Int32(expected)),
                "[{lower}, {upper}] at {index}"
            );
        }
    }
}

#[test]
fn median_and_percentile_over_windows_follow_the_manual() {
    // The $median reference page's testScores window example: test01 over range [-3, 3].
    let scores: Vec<Document> = [
        ("2345", 62),
        ("2356", 60),
        ("2358", 67),
        ("2367", 64),
        ("2369", 60),
    ]
    .into_iter()
    .map(|(id, test01)| doc! {"_id": id, "test01": test01})
    .collect();
    let medians = window(
        doc! {"sortBy": {"test01": 1}, "output": {"m": {
        "$median": {"input": "$test01", "method": "approximate"}, "window": {"range": [-3, 3]}}}},
        scores.clone(),
        "m",
    );
    let medians: Vec<(Bson, f64)> = medians
        .into_iter()
        .map(|(id, value)| (id, value.and_then(|v| v.as_f64()).expect("a double")))
        .collect();
    let expected: Vec<(Bson, f64)> = [
        ("2356", 60.0),
        ("2369", 60.0),
        ("2345", 60.0),
        ("2367", 64.0),
        ("2358", 64.0),
    ]
    .into_iter()
    .map(|(id, value)| (Bson::String(id.into()), value))
    .collect();
    assert_eq!(medians, expected);
    // Over the whole partition, $percentile gives one array per document.
    let percentiles = window(
        doc! {"output": {"p": {"$percentile": {"input": "$test01", "p": [0.5, 0.9], "method": "approximate"}}}},
        scores,
        "p",
    );
    for (_, value) in percentiles {
        assert_eq!(value, Some(bson::bson!([62.0, 67.0])));
    }
}

/// concat_arrays.js's books.
fn book_data() -> Vec<Document> {
    vec![
        doc! {"_id": 0, "author": "Hana", "publisher": "Pub1", "books": ["Hana Book 0", "Hana Book 1"]},
        doc! {"_id": 1, "author": "Militsa", "publisher": "Pub1", "books": ["Militsa Book 0"]},
        doc! {"_id": 2, "author": "Ben", "publisher": "Pub2", "books": ["Ben Book 0", "Ben Book 1", "Ben Book 2"]},
        doc! {"_id": 3, "author": "Adrian", "publisher": "Pub1", "books": ["Adrian Book 0"]},
    ]
}

/// Runs `stages` then sorts by `_id`; the `_id` and `field` of each output document.
fn by_id(stages: Vec<Document>, input: Vec<Document>, field: &str) -> Vec<(Bson, Option<Bson>)> {
    let mut stages = stages;
    stages.push(doc! {"$sort": {"_id": 1}});
    run_ok(stages, input)
        .into_iter()
        .map(|document| {
            (
                document.get("_id").cloned().unwrap_or(Bson::Null),
                document.get(field).cloned(),
            )
        })
        .collect()
}

#[test]
fn concat_arrays_and_set_union_windows_follow_mongods_tests() {
    let books = |list: &[&str]| Bson::from(list.iter().map(|b| Bson::from(*b)).collect::<Vec<_>>());
    // concat_arrays.js: each partition's arrays in sort order, then a sliding window.
    let whole = by_id(
        vec![
            doc! {"$match": {"_id": {"$in": [0, 1, 2]}}},
            doc! {"$setWindowFields": {"partitionBy": "$publisher", "sortBy": {"_id": 1},
            "output": {"booksFromPublisher": {"$concatArrays": "$books"}}}},
        ],
        book_data(),
        "booksFromPublisher",
    );
    let pub1 = books(&["Hana Book 0", "Hana Book 1", "Militsa Book 0"]);
    let pub2 = books(&["Ben Book 0", "Ben Book 1", "Ben Book 2"]);
    assert_exact(whole, vec![(0, pub1.clone()), (1, pub1), (2, pub2.clone())]);
    let adjacent = by_id(
        vec![
            doc! {"$setWindowFields": {"partitionBy": "$publisher", "sortBy": {"_id": 1},
            "output": {"adjacent": {"$concatArrays": "$books", "window": {"documents": [-1, 0]}}}}},
        ],
        book_data(),
        "adjacent",
    );
    assert_exact(
        adjacent,
        vec![
            (0, books(&["Hana Book 0", "Hana Book 1"])),
            (1, books(&["Hana Book 0", "Hana Book 1", "Militsa Book 0"])),
            (2, pub2),
            (3, books(&["Militsa Book 0", "Adrian Book 0"])),
        ],
    );
    // set_union.js: no duplicates, and removal from a sliding window keeps a value another
    // document of the window still holds.
    let vals = [
        bson::bson!([1, 2, 3]),
        bson::bson!([2, 3, 4]),
        bson::bson!([2, 3, 4]),
        bson::bson!([5, 6]),
        bson::bson!([]),
    ]
    .into_iter()
    .enumerate()
    .map(|(id, vals)| doc! {"_id": id as i32, "notAnArray": "a", "vals": vals})
    .collect::<Vec<_>>();
    let all = bson::bson!([1, 2, 3, 4, 5, 6]);
    assert_exact(
        window(
            doc! {"sortBy": {"_id": 1}, "output": {"v": {"$setUnion": "$vals"}}},
            vals.clone(),
            "v",
        ),
        (0..5).map(|id| (id, all.clone())).collect(),
    );
    assert_exact(
        window(
            doc! {"sortBy": {"_id": 1}, "output": {"v": {"$setUnion": "$vals", "window": {"documents": [-1, 0]}}}},
            vals.clone(),
            "v",
        ),
        vec![
            (0, bson::bson!([1, 2, 3])),
            (1, bson::bson!([1, 2, 3, 4])),
            (2, bson::bson!([2, 3, 4])),
            (3, bson::bson!([2, 3, 4, 5, 6])),
            (4, bson::bson!([5, 6])),
        ],
    );
    // An empty window is an empty array (mongod's default value for both).
    for function in ["$concatArrays", "$setUnion"] {
        let output = window(
            doc! {"sortBy": {"_id": 1}, "output": {"v": {function: "$vals", "window": {"documents": [1, 1]}}}},
            vals.clone(),
            "v",
        );
        assert_eq!(output[4].1, Some(bson::bson!([])), "{function}");
    }
    // Anything but an array (or missing) is TypeMismatch.
    for (function, field, input) in [
        ("$concatArrays", "$publisher", book_data()),
        ("$setUnion", "$notAnArray", vals),
    ] {
        let error = run(
            vec![doc! {"$setWindowFields": {"output": {"willFail": {function: field}}}}],
            input,
        )
        .expect_err("refused");
        assert_eq!(error.code, ErrorCode::TypeMismatch, "{function}");
    }
}

/// min_max_scaler_output_values.js's documents.
fn scaler_input() -> Vec<Document> {
    [
        (1, -3, 8, "A"),
        (2, 10, 4, "B"),
        (3, 3, -2, "A"),
        (4, 2, 3, "B"),
        (5, -6, 6, "A"),
        (6, 0, -8, "B"),
        (7, 4, 10, "A"),
    ]
    .into_iter()
    .map(|(id, x, y, partition)| doc! {"_id": id, "x": x, "y": y, "partition": partition})
    .collect()
}

/// `partitionBy`, `sortBy`, the `$minMaxScaler` argument, `window`, the value for `_id` 1..=7.
type ScalerCase = (Option<&'static str>, Document, Bson, Option<Bson>, [f64; 7]);

#[test]
fn min_max_scaler_follows_the_manual_and_mongods_tests() {
    // The manual's example (with the `{input}` form: mongod's IDL takes only an object).
    let manual: Vec<Document> = [(1, 1), (2, 5), (3, 13), (4, 21)]
        .into_iter()
        .map(|(id, a)| doc! {"_id": id, "a": a})
        .collect();
    let spec = doc! {"sortBy": {"a": 1}, "output": {
    "scaled": {"$minMaxScaler": {"input": "$a"}},
    "scaledTo100": {"$minMaxScaler": {"input": "$a", "min": 0, "max": 100}}}};
    assert_close(
        window(spec.clone(), manual.clone(), "scaled"),
        vec![(1, 0.0), (2, 0.2), (3, 0.6), (4, 1.0)],
    );
    assert_close(
        window(spec, manual, "scaledTo100"),
        vec![(1, 0.0), (2, 20.0), (3, 60.0), (4, 100.0)],
    );
    // min_max_scaler_output_values.js.
    let unbounded = [
        3.0 / 16.0,
        1.0,
        9.0 / 16.0,
        0.5,
        0.0,
        6.0 / 16.0,
        10.0 / 16.0,
    ];
    let x = || bson::bson!({"input": "$x"});
    let cases: Vec<ScalerCase> = vec![
        (None, doc! {"_id": 1}, x(), None, unbounded),
        (
            None,
            doc! {"y": -1},
            x(),
            Some(bson::bson!({"documents": ["unbounded", "unbounded"]})),
            unbounded,
        ),
        (
            None,
            doc! {"y": 1},
            x(),
            Some(bson::bson!({"range": ["unbounded", "unbounded"]})),
            unbounded,
        ),
        (
            None,
            doc! {"_id": 1},
            x(),
            Some(bson::bson!({"documents": ["unbounded", "current"]})),
            [
                0.0,
                1.0,
                6.0 / 13.0,
                5.0 / 13.0,
                0.0,
                6.0 / 16.0,
                10.0 / 16.0,
            ],
        ),
        (
            None,
            doc! {"_id": -1},
            x(),
            Some(bson::bson!({"documents": ["unbounded", 1]})),
            [3.0 / 16.0, 1.0, 9.0 / 16.0, 0.8, 0.0, 0.6, 1.0],
        ),
        (
            None,
            doc! {"_id": 1},
            bson::bson!({"input": "$x", "min": 10000, "max": 20000}),
            Some(bson::bson!({"documents": ["unbounded", 1]})),
            [
                10000.0,
                20000.0,
                190_000.0 / 13.0,
                15000.0,
                10000.0,
                13750.0,
                16250.0,
            ],
        ),
        (
            None,
            doc! {"_id": 1},
            bson::bson!({"input": {"$add": ["$x", "$y"]}}),
            Some(bson::bson!({"documents": ["unbounded", 2]})),
            [
                4.0 / 13.0,
                1.0,
                1.0 / 14.0,
                13.0 / 22.0,
                8.0 / 22.0,
                0.0,
                1.0,
            ],
        ),
        (
            None,
            doc! {"y": 1},
            bson::bson!({"input": {"$const": 1}}),
            Some(bson::bson!({"documents": ["unbounded", 1]})),
            [0.0; 7],
        ),
        (
            Some("$partition"),
            doc! {"_id": 1},
            x(),
            Some(bson::bson!({"documents": ["unbounded", 1]})),
            [0.0, 1.0, 1.0, 0.2, 0.0, 0.0, 1.0],
        ),
        (
            None,
            doc! {"y": 1},
            x(),
            Some(bson::bson!({"range": ["unbounded", 5]})),
            [3.0 / 16.0, 1.0, 1.0, 0.5, 0.0, 0.0, 10.0 / 16.0],
        ),
        (
            Some("$partition"),
            doc! {"y": 1},
            x(),
            Some(bson::bson!({"range": ["unbounded", 2]})),
            [0.3, 1.0, 0.0, 0.2, 0.0, 0.0, 1.0],
        ),
        (
            None,
            doc! {"y": -1},
            x(),
            Some(bson::bson!({"documents": ["current", "current"]})),
            [0.0; 7],
        ),
        (
            None,
            doc! {"_id": -1},
            x(),
            Some(bson::bson!({"documents": [-1, "unbounded"]})),
            [0.0, 1.0, 6.0 / 13.0, 0.5, 0.0, 3.0 / 8.0, 5.0 / 8.0],
        ),
        (
            None,
            doc! {"y": -1},
            x(),
            Some(bson::bson!({"documents": ["current", "unbounded"]})),
            [3.0 / 16.0, 1.0, 1.0, 2.0 / 3.0, 0.0, 0.0, 5.0 / 8.0],
        ),
        (
            None,
            doc! {"_id": 1},
            x(),
            Some(bson::bson!({"documents": [-2, 2]})),
            [0.0, 1.0, 9.0 / 16.0, 0.5, 0.0, 0.6, 1.0],
        ),
        (
            None,
            doc! {"y": 1},
            bson::bson!({"input": "$x", "min": 10000, "max": 20000}),
            Some(bson::bson!({"documents": ["current", "unbounded"]})),
            [
                10000.0, 20000.0, 15625.0, 15000.0, 10000.0, 13750.0, 10000.0,
            ],
        ),
        (
            Some("$partition"),
            doc! {"_id": 1},
            x(),
            Some(bson::bson!({"documents": [-1, 2]})),
            [3.0 / 9.0, 1.0, 0.9, 0.2, 0.0, 0.0, 1.0],
        ),
        (
            None,
            doc! {"_id": 1},
            x(),
            Some(bson::bson!({"range": ["current", 2]})),
            [0.0, 1.0, 1.0, 1.0, 0.0, 0.0, 0.0],
        ),
        (
            None,
            doc! {"y": 1},
            x(),
            Some(bson::bson!({"range": [-5, 5]})),
            [3.0 / 16.0, 1.0, 1.0, 0.5, 0.0, 0.0, 1.0],
        ),
        (
            Some("$partition"),
            doc! {"y": 1},
            x(),
            Some(bson::bson!({"range": [-3, 4]})),
            [0.3, 1.0, 0.0, 0.0, 0.0, 0.0, 1.0],
        ),
    ];
    for (partition_by, sort_by, arguments, bounds, expected) in cases {
        let mut function = doc! {"$minMaxScaler": arguments};
        if let Some(bounds) = bounds {
            function.insert("window", bounds);
        }
        let mut spec = doc! {"sortBy": sort_by, "output": {"relativeXValue": function}};
        if let Some(partition_by) = partition_by {
            spec.insert("partitionBy", partition_by);
        }
        let mut output = window(spec.clone(), scaler_input(), "relativeXValue");
        output.sort_by_key(|(id, _)| id.as_i32());
        let values: Vec<f64> = output
            .iter()
            .map(|(_, value)| {
                value
                    .as_ref()
                    .and_then(crate::numeric::Number::from_bson)
                    .map(crate::numeric::Number::to_f64)
                    .expect("a number")
            })
            .collect();
        for (id, (value, expected)) in values.iter().zip(expected).enumerate() {
            assert!(
                (value - expected).abs() < 1e-9,
                "{spec}: _id {}: {value} != {expected}",
                id + 1
            );
        }
    }
    // All values equal: the output is `min` itself.
    let equal = window(
        doc! {"sortBy": {"_id": 1}, "output": {"v": {"$minMaxScaler": {"input": 7, "min": -1, "max": 1}}}},
        scaler_input(),
        "v",
    );
    assert!(equal
        .iter()
        .all(|(_, value)| value == &Some(Bson::Int32(-1))));
}

#[test]
fn min_max_scaler_refuses_what_mongod_refuses() {
    // min_max_scaler_parsing.js, and mongod's IDL for the function's shape.
    let parse_cases: Vec<(Document, ErrorCode)> = vec![
        (
            doc! {"$minMaxScaler": {"input": "$x", "hello": "world"}, "window": {"documents": ["current", "unbounded"]}},
            ErrorCode::Location40415,
        ),
        (
            doc! {"$minMaxScaler": {"min": 0, "max": 10}, "window": {"documents": ["current", "unbounded"]}},
            ErrorCode::Location40414,
        ),
        (doc! {"$minMaxScaler": "$x"}, ErrorCode::TypeMismatch),
        (
            doc! {"$minMaxScaler": {"input": "$x"}, "window": 1},
            ErrorCode::TypeMismatch,
        ),
        (
            doc! {"$minMaxScaler": {"input": "$x"}, "foo": 1},
            ErrorCode::Location40415,
        ),
        (
            doc! {"$minMaxScalar": {"input": "$x"}},
            ErrorCode::FailedToParse,
        ),
        (
            doc! {"$minMaxScaler": {"input": "$x", "min": "hello", "max": 10}},
            ErrorCode::FailedToParse,
        ),
        (
            doc! {"$minMaxScaler": {"input": "$x", "min": 1, "max": "hi"}},
            ErrorCode::FailedToParse,
        ),
        (
            doc! {"$minMaxScaler": {"input": "$x", "min": 0}},
            ErrorCode::FailedToParse,
        ),
        (
            doc! {"$minMaxScaler": {"input": "$x", "max": 10}},
            ErrorCode::FailedToParse,
        ),
        (
            doc! {"$minMaxScaler": {"input": "$x", "min": 10, "max": 10}},
            ErrorCode::FailedToParse,
        ),
        (
            doc! {"$minMaxScaler": {"input": "$x", "min": 11, "max": 10}},
            ErrorCode::FailedToParse,
        ),
        (
            doc! {"$minMaxScaler": {"input": "$x", "min": {"$multiply": [1, 20]}, "max": {"$divide": [20, 2]}}},
            ErrorCode::FailedToParse,
        ),
        (
            doc! {"$minMaxScaler": {"input": "$x", "min": {"$multiply": [1, "$x"]}, "max": {"$divide": [20, 2]}}},
            ErrorCode::FailedToParse,
        ),
        (
            doc! {"$minMaxScaler": {"input": "$x", "min": {"$multiply": [1, 1]}, "max": {"$divide": [20, "$x"]}}},
            ErrorCode::FailedToParse,
        ),
        (
            doc! {"$minMaxScaler": {"input": "$x"}, "window": {"documents": [1, "unbounded"]}},
            ErrorCode::FailedToParse,
        ),
        (
            doc! {"$minMaxScaler": {"input": "$x"}, "window": {"documents": [-2, -1]}},
            ErrorCode::FailedToParse,
        ),
        (
            doc! {"$minMaxScaler": {"input": "$x"}, "window": {"documents": ["unbounded", -1]}},
            ErrorCode::FailedToParse,
        ),
        (
            doc! {"$minMaxScaler": {"input": "$x"}, "window": {"range": [1.5, "unbounded"]}},
            ErrorCode::FailedToParse,
        ),
        (
            doc! {"$minMaxScaler": {"input": "$x"}, "window": {"range": [-1.5, -0.5]}},
            ErrorCode::FailedToParse,
        ),
        (
            doc! {"$minMaxScaler": {"input": "$x"}, "window": {"range": ["unbounded", -0.5]}},
            ErrorCode::FailedToParse,
        ),
    ];
    for (function, code) in parse_cases {
        let error = parse_error(vec![
            doc! {"$setWindowFields": {"sortBy": {"_id": 1}, "output": {"relativeXValue": function.clone()}}},
        ]);
        assert_eq!(error.code, code, "{function}: {}", error.errmsg);
    }
    let error = parse_error(vec![
        doc! {"$setWindowFields": {"sortBy": {"_id": 1}, "output": {"v":
        {"$minMaxScaler": {"input": "$x"}, "window": {"documents": [1, "unbounded"]}}}}},
    ]);
    assert_eq!(
        error.errmsg,
        "Lower specified bound cannot be greater than 0 (the current doc), as $minMaxScaler must \
         ensure that the current document being processed is always within the configured \
         window. Lower specified bound = 1.000000"
    );
    // The input must be a number: mongod's codes for each executor.
    let run_cases: Vec<(Bson, Vec<Document>, ErrorCode, &str)> = vec![
        (
            bson::bson!({"documents": ["unbounded", "unbounded"]}),
            vec![doc! {"_id": 1, "x": 1}, doc! {"_id": 2, "x": "a"}],
            ErrorCode::Location10487001,
            "'input' argument to $minMaxScaler must evaluate to a numeric type, got: string",
        ),
        (
            bson::bson!({"range": ["unbounded", "current"]}),
            vec![doc! {"_id": 1, "x": 1}, doc! {"_id": 2}],
            ErrorCode::Location10487004,
            "'input' argument to $minMaxScaler must evaluate to a numeric type, got: missing",
        ),
        (
            bson::bson!({"documents": [-1, 0]}),
            vec![doc! {"_id": 1, "x": 1}, doc! {"_id": 2, "x": Bson::Null}],
            ErrorCode::Location10487000,
            "'input' argument to $minMaxScaler must evaluate to a numeric type, got: null",
        ),
        (
            bson::bson!({"documents": [0, 1]}),
            vec![doc! {"_id": 1, "x": 1}, doc! {"_id": 2, "x": "a"}],
            ErrorCode::Location9522905,
            "",
        ),
    ];
    for (bounds, input, code, message) in run_cases {
        let error = run(
            vec![
                doc! {"$setWindowFields": {"sortBy": {"_id": 1}, "output": {"v":
                {"$minMaxScaler": {"input": "$x"}, "window": bounds.clone()}}}},
            ],
            input,
        )
        .expect_err("refused");
        assert_eq!(error.code, code, "{bounds}: {}", error.errmsg);
        if !message.is_empty() {
            assert_eq!(error.errmsg, message);
        }
    }
}
