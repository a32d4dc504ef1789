//! The wire protocol over raw sockets: what drivers never send but a server must survive.

mod common;

use std::time::Duration;

use bson::{doc, Document};
use common::raw::*;
use common::TestServer;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

#[tokio::test]
async fn op_query_is_master_gets_op_reply() {
    let server = TestServer::start().await;
    let mut stream = connect(&server).await;
    let query = doc! {"isMaster": 1, "helloOk": true, "client": {"driver": {"name": "raw", "version": "1"}}};
    let reply = roundtrip(&mut stream, &op_query(11, "admin.$cmd", &query)).await;
    assert_eq!(reply.op_code, OP_REPLY);
    assert_eq!(reply.response_to, 11);
    assert_eq!(reply.document.get_bool("ismaster"), Ok(true));
    assert_eq!(reply.document.get_bool("helloOk"), Ok(true));
    assert_eq!(reply.document.get_i32("maxWireVersion"), Ok(25));
    // Subsequent commands go over OP_MSG on the same connection.
    assert_still_serving(&mut stream).await;
    // A second hello with client metadata is refused, as mongod does.
    let again = roundtrip(&mut stream, &op_query(12, "admin.$cmd", &query)).await;
    assert_eq!(again.document.get_i32("code"), Ok(186));
    server.stop().await;
}

#[tokio::test]
async fn op_query_other_commands_get_352() {
    let server = TestServer::start().await;
    let mut stream = connect(&server).await;
    let reply = roundtrip(&mut stream, &op_query(5, "test.$cmd", &doc! {"find": "c"})).await;
    assert_eq!(reply.op_code, OP_REPLY);
    assert_eq!(reply.document.get_i32("code"), Ok(352));
    assert_eq!(
        reply.document.get_str("codeName"),
        Ok("UnsupportedOpQueryCommand")
    );
    assert!(reply.document.get_str("errmsg").unwrap().starts_with(
        "Unsupported OP_QUERY command: find. The client driver may require an upgrade."
    ));
    assert_still_serving(&mut stream).await;
    server.stop().await;
}

#[tokio::test]
async fn every_op_msg_parse_error_is_answered_and_the_connection_lives() {
    let server = TestServer::start().await;
    let mut stream = connect(&server).await;
    let ping = kind0(&doc! {"ping": 1, "$db": "admin"});
    let cases: Vec<(Vec<u8>, i32)> = vec![
        (op_msg(1, 1 << 4, std::slice::from_ref(&ping)), 223),
        (op_msg(2, 0, &[ping.clone(), ping.clone()]), 40430),
        (
            op_msg(3, 0, &[ping.clone(), kind1("d", &[]), kind1("d", &[])]),
            40431,
        ),
        (op_msg(4, 0, &[ping.clone(), vec![9]]), 40432),
        (op_msg(5, 0, &[kind1("documents", &[doc! {"a": 1}])]), 40587),
        (
            op_msg(
                6,
                0,
                &[
                    kind0(&doc! {"insert": "c", "documents": [], "$db": "t"}),
                    kind1("documents", &[]),
                ],
            ),
            40433,
        ),
        (
            op_msg(
                7,
                0,
                &[
                    ping.clone(),
                    kind1("a", &[]),
                    kind1("b", &[]),
                    kind1("c", &[]),
                ],
            ),
            233,
        ),
        (op_msg(8, CHECKSUM_PRESENT, &[vec![0, 0]]), 51251),
        (op_msg(9, 0, &[kind0(&doc! {"ping": 1})]), 40571),
        (
            op_msg(10, 0, &[vec![0, 12, 0, 0, 0, 0x10, b'a', 0, 1, 0]]),
            22,
        ),
    ];
    for (message, code) in cases {
        let reply = roundtrip(&mut stream, &message).await;
        assert_eq!(reply.document.get_f64("ok"), Ok(0.0));
        assert_eq!(
            reply.document.get_i32("code"),
            Ok(code),
            "{}",
            reply.document
        );
        assert_still_serving(&mut stream).await;
    }
    server.stop().await;
}

#[tokio::test]
async fn checksums_are_verified_both_ways() {
    let server = TestServer::start().await;
    let mut stream = connect(&server).await;
    let good = checksummed(20, &doc! {"ping": 1, "$db": "admin"});
    let reply = roundtrip(&mut stream, &good).await;
    assert_eq!(reply.document.get_f64("ok"), Ok(1.0));
    assert_eq!(
        reply.flags & CHECKSUM_PRESENT,
        CHECKSUM_PRESENT,
        "reply carries a checksum"
    );

    let mut bad = checksummed(21, &doc! {"ping": 1, "$db": "admin"});
    let last = bad.len() - 1;
    bad[last] ^= 0x55;
    let reply = roundtrip(&mut stream, &bad).await;
    assert_eq!(reply.document.get_i32("code"), Ok(288));
    assert_eq!(reply.document.get_str("codeName"), Ok("ChecksumMismatch"));
    assert_still_serving(&mut stream).await;
    server.stop().await;
}

#[tokio::test]
async fn more_to_come_gets_no_reply_and_the_connection_stays_usable() {
    let server = TestServer::start().await;
    let mut stream = connect(&server).await;
    let silent = op_msg(
        30,
        MORE_TO_COME,
        &[kind0(&doc! {"ping": 1, "$db": "admin"})],
    );
    stream.write_all(&silent).await.unwrap();
    let failing_silent = op_msg(
        31,
        MORE_TO_COME,
        &[kind0(&doc! {"nope": 1, "$db": "admin"})],
    );
    stream.write_all(&failing_silent).await.unwrap();
    // The first reply on the wire answers the next normal request, not the silent ones.
    let reply = roundtrip(&mut stream, &ping_msg(32)).await;
    assert_eq!(reply.response_to, 32);
    server.stop().await;
}

#[tokio::test]
async fn exhaust_allowed_is_accepted_and_never_streams() {
    let server = TestServer::start().await;
    let mut stream = connect(&server).await;
    let message = op_msg(40, 1 << 16, &[kind0(&doc! {"hello": 1, "$db": "admin"})]);
    let reply = roundtrip(&mut stream, &message).await;
    assert_eq!(reply.flags & MORE_TO_COME, 0);
    assert_eq!(reply.document.get_f64("ok"), Ok(1.0));
    server.stop().await;
}

/// A TLS client on a server without TLS: mongod closes at once ("SSL handshake received but
/// server is started without SSL support") instead of waiting for the ~33 MB its record header
/// reads as.
#[tokio::test]
async fn a_tls_client_hello_on_a_plain_server_is_closed_at_once() {
    let server = TestServer::start().await;
    let mut stream = connect(&server).await;
    // A TLS 1.2 record header (0x16 0x03 0x01, length 0x0200) and a ClientHello header
    // (type 1, length 0x0001fc), padded to the 16 bytes of a message header.
    let hello = [
        0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01, 0xfc, 0x03, 0x03, 0, 0, 0, 0, 0,
    ];
    stream.write_all(&hello).await.unwrap();
    assert_closed(&mut stream).await;
    let mut fresh = connect(&server).await;
    assert_still_serving(&mut fresh).await;
    server.stop().await;
}

#[tokio::test]
async fn impossible_headers_close_only_that_connection() {
    let server = TestServer::start().await;
    let mut bystander = connect(&server).await;
    assert_still_serving(&mut bystander).await;
    for length in [48_000_001i32, i32::MAX, -5, 3] {
        let mut stream = connect(&server).await;
        let mut header = Vec::new();
        header.extend(length.to_le_bytes());
        header.extend(1i32.to_le_bytes());
        header.extend(0i32.to_le_bytes());
        header.extend(OP_MSG.to_le_bytes());
        stream.write_all(&header).await.unwrap();
        assert_closed(&mut stream).await;
        assert_still_serving(&mut bystander).await;
    }
    let mut fresh = connect(&server).await;
    assert_still_serving(&mut fresh).await;
    server.stop().await;
}

#[tokio::test]
async fn legacy_opcodes_and_bad_compression_close_the_connection() {
    let server = TestServer::start().await;
    for message in [
        frame(1, 2002, &[0; 8]),
        frame(
            2,
            OP_COMPRESSED,
            &[0xdd, 0x07, 0, 0, 5, 0, 0, 0, 2, 1, 2, 3],
        ),
    ] {
        let mut stream = connect(&server).await;
        stream.write_all(&message).await.unwrap();
        assert_closed(&mut stream).await;
    }
    let mut fresh = connect(&server).await;
    assert_still_serving(&mut fresh).await;
    server.stop().await;
}

#[tokio::test]
async fn compressed_request_gets_compressed_reply_except_hello() {
    let server = TestServer::start().await;
    let mut stream = connect(&server).await;
    let compress = |request_id: i32, document: &Document| {
        let mut plain = 0u32.to_le_bytes().to_vec();
        plain.extend(kind0(document));
        let mut encoder =
            flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
        std::io::Write::write_all(&mut encoder, &plain).unwrap();
        let compressed = encoder.finish().unwrap();
        let mut body = OP_MSG.to_le_bytes().to_vec();
        body.extend((plain.len() as i32).to_le_bytes());
        body.push(2);
        body.extend(compressed);
        frame(request_id, OP_COMPRESSED, &body)
    };
    stream
        .write_all(&compress(50, &doc! {"ping": 1, "$db": "admin"}))
        .await
        .unwrap();
    let mut header = [0u8; 16];
    stream.read_exact(&mut header).await.unwrap();
    assert_eq!(
        i32::from_le_bytes(header[12..16].try_into().unwrap()),
        OP_COMPRESSED
    );
    let mut rest = vec![0u8; i32::from_le_bytes(header[0..4].try_into().unwrap()) as usize - 16];
    stream.read_exact(&mut rest).await.unwrap();

    stream
        .write_all(&compress(51, &doc! {"hello": 1, "$db": "admin"}))
        .await
        .unwrap();
    let reply = read_reply(&mut stream).await;
    assert_eq!(reply.document.get_f64("ok"), Ok(1.0));
    let raw_hello = roundtrip(
        &mut stream,
        &compress(52, &doc! {"hello": 1, "$db": "admin"}),
    )
    .await;
    assert_eq!(raw_hello.op_code, OP_MSG);
    server.stop().await;
}

#[tokio::test]
async fn connections_past_max_conns_are_closed() {
    let config = tideway::Config {
        max_conns: 2,
        ..common::test_config()
    };
    let server = TestServer::start_with(config).await;
    let mut first = connect(&server).await;
    let mut second = connect(&server).await;
    assert_still_serving(&mut first).await;
    assert_still_serving(&mut second).await;
    let mut third = connect(&server).await;
    assert_closed(&mut third).await;
    drop(first);
    // The freed slot is reusable once the server has seen the close.
    let mut fourth = None;
    for _ in 0..50 {
        let mut candidate = connect(&server).await;
        candidate.write_all(&ping_msg(77)).await.unwrap();
        let mut header = [0u8; 16];
        if let Ok(Ok(_)) = tokio::time::timeout(
            Duration::from_millis(500),
            candidate.read_exact(&mut header),
        )
        .await
        {
            fourth = Some(candidate);
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        fourth.is_some(),
        "a slot frees up after a client disconnects"
    );
    assert_still_serving(&mut second).await;
    server.stop().await;
}

#[tokio::test]
async fn shutdown_waits_for_nothing_when_connections_are_idle() {
    let server = TestServer::start().await;
    let mut idle = connect(&server).await;
    assert_still_serving(&mut idle).await;
    server.stop().await;
    assert_closed(&mut idle).await;
}

#[tokio::test]
async fn shutdown_finishes_the_request_in_flight() {
    let server = TestServer::start().await;
    let coll = server
        .client()
        .database("app")
        .collection::<Document>("big");
    let docs: Vec<Document> = (0..60_000)
        .map(|i| doc! {"_id": i, "r": (i * 7919) % 60_000})
        .collect();
    coll.insert_many(docs).await.unwrap();
    let mut stream = connect(&server).await;
    // A blocking sort over every document: long enough to still be running when shutdown starts.
    let find = op_msg(
        70,
        0,
        &[kind0(
            &doc! {"find": "big", "sort": {"r": -1}, "batchSize": 1, "$db": "app"},
        )],
    );
    stream.write_all(&find).await.unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;
    let stopping = tokio::spawn(server.stop());
    let reply = read_reply(&mut stream).await;
    assert_eq!(reply.response_to, 70);
    assert_eq!(reply.document.get_f64("ok"), Ok(1.0), "{}", reply.document);
    let first = reply
        .document
        .get_document("cursor")
        .unwrap()
        .get_array("firstBatch")
        .unwrap();
    assert_eq!(first[0].as_document().unwrap().get_i32("r"), Ok(59_999));
    stopping.await.unwrap();
    assert_closed(&mut stream).await;
}
