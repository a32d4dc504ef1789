//! Hand-built wire messages over raw sockets: what drivers never send but a server must survive.

use std::time::Duration;

use bson::{doc, Document};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::TestServer;

pub const OP_REPLY: i32 = 1;
pub const OP_QUERY: i32 = 2004;
pub const OP_COMPRESSED: i32 = 2012;
pub const OP_MSG: i32 = 2013;
pub const CHECKSUM_PRESENT: u32 = 1;
pub const MORE_TO_COME: u32 = 2;

pub fn frame(request_id: i32, op_code: i32, body: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend(((16 + body.len()) as i32).to_le_bytes());
    out.extend(request_id.to_le_bytes());
    out.extend(0i32.to_le_bytes());
    out.extend(op_code.to_le_bytes());
    out.extend(body);
    out
}

pub fn kind0(document: &Document) -> Vec<u8> {
    let mut out = vec![0];
    out.extend(bson::to_vec(document).unwrap());
    out
}

pub fn kind1(identifier: &str, documents: &[Document]) -> Vec<u8> {
    let mut payload = identifier.as_bytes().to_vec();
    payload.push(0);
    for document in documents {
        payload.extend(bson::to_vec(document).unwrap());
    }
    let mut out = vec![1];
    out.extend(((payload.len() + 4) as i32).to_le_bytes());
    out.extend(payload);
    out
}

pub fn op_msg(request_id: i32, flags: u32, sections: &[Vec<u8>]) -> Vec<u8> {
    let mut body = flags.to_le_bytes().to_vec();
    for section in sections {
        body.extend(section);
    }
    frame(request_id, OP_MSG, &body)
}

pub fn ping_msg(request_id: i32) -> Vec<u8> {
    op_msg(request_id, 0, &[kind0(&doc! {"ping": 1, "$db": "admin"})])
}

/// An OP_MSG with a correct CRC-32C trailer.
pub fn checksummed(request_id: i32, document: &Document) -> Vec<u8> {
    let mut body = CHECKSUM_PRESENT.to_le_bytes().to_vec();
    body.extend(kind0(document));
    let mut message = Vec::new();
    message.extend(((16 + body.len() + 4) as i32).to_le_bytes());
    message.extend(request_id.to_le_bytes());
    message.extend(0i32.to_le_bytes());
    message.extend(OP_MSG.to_le_bytes());
    message.extend(body);
    let crc = crc32c::crc32c(&message);
    message.extend(crc.to_le_bytes());
    message
}

pub fn op_query(request_id: i32, namespace: &str, query: &Document) -> Vec<u8> {
    let mut body = 0i32.to_le_bytes().to_vec();
    body.extend(namespace.as_bytes());
    body.push(0);
    body.extend(0i32.to_le_bytes());
    body.extend((-1i32).to_le_bytes());
    body.extend(bson::to_vec(query).unwrap());
    frame(request_id, OP_QUERY, &body)
}

pub struct Reply {
    pub response_to: i32,
    pub op_code: i32,
    pub flags: u32,
    pub document: Document,
}

pub async fn read_reply(stream: &mut TcpStream) -> Reply {
    let mut header = [0u8; 16];
    tokio::time::timeout(Duration::from_secs(5), stream.read_exact(&mut header))
        .await
        .expect("a reply within 5 s")
        .expect("reply header");
    let field = |i: usize| i32::from_le_bytes(header[i..i + 4].try_into().unwrap());
    let mut body = vec![0u8; field(0) as usize - 16];
    stream.read_exact(&mut body).await.unwrap();
    let (op_code, body) = if field(12) == OP_COMPRESSED {
        let original = i32::from_le_bytes(body[0..4].try_into().unwrap());
        assert_eq!(body[8], 2, "test compresses with zlib only");
        let mut plain = Vec::new();
        std::io::Read::read_to_end(&mut flate2::read::ZlibDecoder::new(&body[9..]), &mut plain)
            .unwrap();
        (original, plain)
    } else {
        (field(12), body)
    };
    let (flags, document) = match op_code {
        OP_MSG => {
            let flags = u32::from_le_bytes(body[0..4].try_into().unwrap());
            assert_eq!(body[4], 0, "kind-0 section");
            let end = if flags & CHECKSUM_PRESENT != 0 {
                body.len() - 4
            } else {
                body.len()
            };
            (flags, Document::from_reader(&body[5..end]).unwrap())
        }
        OP_REPLY => {
            let flags = u32::from_le_bytes(body[0..4].try_into().unwrap());
            assert_eq!(
                i32::from_le_bytes(body[16..20].try_into().unwrap()),
                1,
                "numberReturned"
            );
            (flags, Document::from_reader(&body[20..]).unwrap())
        }
        other => panic!("unexpected reply opcode {other}"),
    };
    Reply {
        response_to: field(8),
        op_code,
        flags,
        document,
    }
}

pub async fn connect(server: &TestServer) -> TcpStream {
    TcpStream::connect(server.addr).await.unwrap()
}

pub async fn roundtrip(stream: &mut TcpStream, message: &[u8]) -> Reply {
    stream.write_all(message).await.unwrap();
    read_reply(stream).await
}

pub async fn assert_still_serving(stream: &mut TcpStream) {
    let reply = roundtrip(stream, &ping_msg(999)).await;
    assert_eq!(reply.response_to, 999);
    assert_eq!(reply.document.get_f64("ok"), Ok(1.0));
}

/// The stream is closed by the server: the next read sees end of file (or a reset).
pub async fn assert_closed(stream: &mut TcpStream) {
    let mut byte = [0u8; 1];
    let read = tokio::time::timeout(Duration::from_secs(5), stream.read(&mut byte))
        .await
        .expect("the server closes the connection within 5 s");
    assert!(
        matches!(read, Ok(0) | Err(_)),
        "connection must be closed, read {read:?}"
    );
}
