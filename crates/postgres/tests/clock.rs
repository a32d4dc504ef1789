//! The database's clock as the one clock for expiry: the offset measurement, the time floor
//! that only grows whichever node raises it, and the shared test advance. Needs
//! `TIDEWAY_TEST_PG_URI` (see `bootstrap.rs`).

mod common;

use common::scratch;

#[tokio::test]
async fn the_offset_of_a_clock_on_the_same_machine_is_within_half_a_round_trip() {
    let Some(scratch) = scratch().await else {
        return;
    };
    let database = scratch.connect(1).await;
    for _ in 0..5 {
        let sample = database.measure_clock(0).await.unwrap();
        // The test server shares this machine's clock: the true offset is 0, so the measured
        // one is off by at most half the round trip (plus the truncation of both readings
        // to whole milliseconds).
        assert!(sample.round_trip_ms >= 0, "{sample:?}");
        assert!(
            sample.offset_ms.abs() <= sample.round_trip_ms / 2 + 2,
            "{sample:?}"
        );
    }
    scratch.drop_database().await;
}

#[tokio::test]
async fn the_time_floor_only_grows_whichever_node_raises_it() {
    let Some(scratch) = scratch().await else {
        return;
    };
    let first = scratch.connect(4).await;
    let second = scratch.connect(4).await;
    assert_eq!(first.time_floor().await.unwrap(), None);
    assert_eq!(first.raise_time_floor(1_000).await.unwrap(), 1_000);
    assert_eq!(
        second.raise_time_floor(500).await.unwrap(),
        1_000,
        "never lowered"
    );
    // Two nodes raising at once, in both orders: the largest wins.
    let (first, second) = (std::sync::Arc::new(first), std::sync::Arc::new(second));
    let raises: Vec<_> = (0..40)
        .map(|i| {
            let node = if i % 2 == 0 {
                first.clone()
            } else {
                second.clone()
            };
            let value = 2_000 + (i * 37) % 40;
            tokio::spawn(async move { node.raise_time_floor(value).await.unwrap() })
        })
        .collect();
    for raise in raises {
        raise.await.unwrap();
    }
    assert_eq!(second.time_floor().await.unwrap(), Some(2_039));
    drop((first, second));
    // A restart (a new pool) finds it.
    let restarted = scratch.connect(1).await;
    assert_eq!(restarted.time_floor().await.unwrap(), Some(2_039));
    scratch.drop_database().await;
}

#[tokio::test]
async fn the_test_advance_is_shared_and_only_grows() {
    let Some(scratch) = scratch().await else {
        return;
    };
    let first = scratch.connect(1).await;
    let second = scratch.connect(1).await;
    assert_eq!(second.clock_advance().await.unwrap(), 0);
    assert_eq!(first.advance_clock(5_000).await.unwrap(), 5_000);
    assert_eq!(second.advance_clock(250).await.unwrap(), 5_250);
    assert_eq!(
        first.advance_clock(-100).await.unwrap(),
        5_250,
        "never backwards"
    );
    assert_eq!(first.clock_advance().await.unwrap(), 5_250);
    scratch.drop_database().await;
}
