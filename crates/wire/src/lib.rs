//! The MongoDB wire protocol: message framing, OP_MSG, the legacy OP_QUERY/OP_REPLY handshake, and
//! OP_COMPRESSED. This module turns bytes into a command document (plus how to answer) and a reply
//! document back into bytes. It knows nothing about what commands mean, beyond the OP_QUERY allow-list
//! and the list of replies that must never be compressed, both of which are part of the protocol.
//!
//! Invariants: a header whose length is negative, shorter than a header, or larger than
//! [`MAX_MESSAGE_SIZE_BYTES`] is rejected before any of its body is read ([`MessageHeader::check_length`]);
//! a body that is malformed in a way the client can be told about yields a `CommandError` to send back,
//! never a panic; only framing errors (which leave the byte stream unsynchronised) are fatal.

mod compression;
mod op_msg;
mod op_query;
mod reply;

pub use compression::Compressor;
pub use reply::Reply;

use std::sync::Arc;

use bson::Document;

use tideway_base::error::{CommandError, ErrorCode};

/// Largest user document, as advertised in `hello`.
pub const MAX_BSON_OBJECT_SIZE: i32 = 16 * 1024 * 1024;
/// Largest message, as advertised in `hello`; larger headers are rejected unread.
pub const MAX_MESSAGE_SIZE_BYTES: i32 = 48_000_000;
/// Largest write batch, as advertised in `hello`.
pub const MAX_WRITE_BATCH_SIZE: i32 = 100_000;

pub const HEADER_LEN: usize = 16;

pub const OP_REPLY: i32 = 1;
pub const OP_QUERY: i32 = 2004;
pub const OP_COMPRESSED: i32 = 2012;
pub const OP_MSG: i32 = 2013;

/// The 16-byte header that starts every message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MessageHeader {
    pub message_length: i32,
    pub request_id: i32,
    pub response_to: i32,
    pub op_code: i32,
}

impl MessageHeader {
    pub fn parse(bytes: &[u8; HEADER_LEN]) -> MessageHeader {
        let field =
            |i: usize| i32::from_le_bytes([bytes[i], bytes[i + 1], bytes[i + 2], bytes[i + 3]]);
        MessageHeader {
            message_length: field(0),
            request_id: field(4),
            response_to: field(8),
            op_code: field(12),
        }
    }

    fn write(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.message_length.to_le_bytes());
        out.extend_from_slice(&self.request_id.to_le_bytes());
        out.extend_from_slice(&self.response_to.to_le_bytes());
        out.extend_from_slice(&self.op_code.to_le_bytes());
    }

    /// Whether these 16 bytes open a TLS record carrying a ClientHello (record type 0x16,
    /// version 3.x, handshake type 1): a TLS client talking to a server without TLS.
    pub fn is_tls_client_hello(&self) -> bool {
        let [record_type, major, _, _] = self.message_length.to_le_bytes();
        let [_, handshake_type, _, _] = self.request_id.to_le_bytes();
        record_type == 0x16 && major == 3 && handshake_type == 1
    }

    /// The body length to read, or why the message must be refused unread.
    pub fn check_length(&self) -> Result<usize, FramingError> {
        if self.message_length < HEADER_LEN as i32 {
            return Err(FramingError::BadLength(self.message_length));
        }
        if self.message_length > MAX_MESSAGE_SIZE_BYTES {
            return Err(FramingError::TooLarge(self.message_length));
        }
        Ok(self.message_length as usize - HEADER_LEN)
    }
}

/// An error after which the byte stream cannot be trusted: the connection is closed.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum FramingError {
    #[error("message length {0} is invalid")]
    BadLength(i32),
    #[error("message length {0} exceeds the maximum of {MAX_MESSAGE_SIZE_BYTES} bytes")]
    TooLarge(i32),
    #[error("unsupported opcode {0}")]
    UnsupportedOpCode(i32),
    #[error("malformed message: {0}")]
    Malformed(String),
}

/// How the reply to a request must be framed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReplyFormat {
    /// OP_MSG; with a CRC-32C trailer when the request carried one.
    OpMsg { checksum: bool },
    /// OP_REPLY, the answer to a legacy OP_QUERY.
    OpReply,
}

/// A decoded request: the command document (with `$db`), or the error to answer with.
#[derive(Debug)]
pub struct Request {
    pub request_id: i32,
    pub format: ReplyFormat,
    /// The compressor the request arrived with; the reply uses it too where allowed.
    pub compressor: Option<Compressor>,
    /// For a compressed request: (bytes on the wire, bytes after decompression), bodies only.
    pub compressed_sizes: Option<(usize, usize)>,
    /// OP_MSG `moreToCome`: the client expects no reply.
    pub more_to_come: bool,
    /// Shared: the running op keeps it for `currentOp` without copying it.
    pub command: Result<Arc<Document>, CommandError>,
}

/// Decodes a message whose header has passed [`MessageHeader::check_length`].
pub fn decode_request(header: &MessageHeader, body: &[u8]) -> Result<Request, FramingError> {
    match header.op_code {
        OP_COMPRESSED => {
            let (op_code, compressor, inner) = compression::decompress(body)?;
            let inner_header = MessageHeader { op_code, ..*header };
            let mut request = decode_uncompressed(&inner_header, &inner)?;
            request.compressor = Some(compressor);
            request.compressed_sizes = Some((body.len(), inner.len()));
            Ok(request)
        }
        _ => decode_uncompressed(header, body),
    }
}

fn decode_uncompressed(header: &MessageHeader, body: &[u8]) -> Result<Request, FramingError> {
    match header.op_code {
        OP_MSG => Ok(op_msg::decode(header, body)),
        OP_QUERY => Ok(op_query::decode(header, body)),
        other => Err(FramingError::UnsupportedOpCode(other)),
    }
}

/// A reply ready for the socket.
pub struct EncodedReply {
    pub bytes: Vec<u8>,
    /// When compressed: the compressor, and the body sizes before and after compression.
    pub compression: Option<(Compressor, usize, usize)>,
}

/// Encodes `reply` as the answer to `request`, compressing it when the request was compressed and
/// `compressible` holds (hello and authentication replies must go out uncompressed).
pub fn encode_reply(
    request: &Request,
    reply_request_id: i32,
    reply: &Reply,
    compressible: bool,
) -> EncodedReply {
    let reply_bytes = reply.to_bytes().unwrap_or_else(|error| {
        // A reply we built ourselves failed to serialise: answer with an error the client can read.
        let fallback =
            CommandError::internal(format!("failed to encode reply: {error}")).to_reply();
        bson::to_vec(&fallback).unwrap_or_default()
    });
    let compressor = request.compressor.filter(|_| compressible);
    // A checksum would have to cover the compressed frame; replies that are compressed carry none.
    let checksum =
        request.format == (ReplyFormat::OpMsg { checksum: true }) && compressor.is_none();
    let (op_code, payload) = match request.format {
        ReplyFormat::OpMsg { .. } => (OP_MSG, op_msg::encode_body(&reply_bytes, checksum)),
        ReplyFormat::OpReply => (OP_REPLY, op_query::encode_reply_body(&reply_bytes)),
    };
    let compressed =
        compressor.and_then(|c| Some((c, compression::compress(c, op_code, &payload)?)));
    let (op_code, payload, compression) = match compressed {
        Some((compressor, compressed)) => {
            let sizes = (compressor, payload.len(), compressed.len());
            (OP_COMPRESSED, compressed, Some(sizes))
        }
        None => (op_code, payload, None),
    };
    let trailer = if checksum { 4 } else { 0 };
    let mut out = Vec::with_capacity(HEADER_LEN + payload.len() + trailer);
    MessageHeader {
        message_length: (HEADER_LEN + payload.len() + trailer) as i32,
        request_id: reply_request_id,
        response_to: request.request_id,
        op_code,
    }
    .write(&mut out);
    out.extend_from_slice(&payload);
    if checksum {
        op_msg::append_checksum(&mut out);
    }
    EncodedReply {
        bytes: out,
        compression,
    }
}

/// Reads one BSON document from the front of `bytes`, returning it and the bytes it used.
/// Reads one document from the front of `bytes`: malformed BSON is `InvalidBSON`, nesting deeper
/// than `maxBSONDepth` is `Overflow` (checked on the raw bytes, before anything recursive decodes
/// them).
fn read_document(bytes: &[u8]) -> Result<(Document, usize), CommandError> {
    let malformed = |why: String| CommandError::new(ErrorCode::InvalidBSON, why);
    let declared = bytes
        .get(..4)
        .map(|b| i32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .ok_or_else(|| malformed("document is truncated".into()))?;
    if declared < 5 || declared as usize > bytes.len() {
        return Err(malformed(format!(
            "document length {declared} does not fit the {} remaining bytes",
            bytes.len()
        )));
    }
    let length = declared as usize;
    let raw = bson::RawDocument::from_bytes(&bytes[..length])
        .map_err(|error| malformed(error.to_string()))?;
    tideway_base::limits::check_wire_depth(raw)?;
    let document = tideway_base::bsonutil::document_from_raw(raw).map_err(malformed)?;
    Ok((document, length))
}

/// Reads a NUL-terminated UTF-8 string from the front of `bytes`.
fn read_cstring(bytes: &[u8]) -> Result<(&str, usize), String> {
    let end = bytes
        .iter()
        .position(|&b| b == 0)
        .ok_or("string is not NUL-terminated")?;
    let text = std::str::from_utf8(&bytes[..end]).map_err(|_| "string is not valid UTF-8")?;
    Ok((text, end + 1))
}

fn read_i32(bytes: &[u8], at: usize) -> Option<i32> {
    bytes
        .get(at..at + 4)
        .map(|b| i32::from_le_bytes([b[0], b[1], b[2], b[3]]))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header_bytes(length: i32, op_code: i32) -> [u8; HEADER_LEN] {
        let mut out = Vec::new();
        MessageHeader {
            message_length: length,
            request_id: 7,
            response_to: 0,
            op_code,
        }
        .write(&mut out);
        out.try_into().unwrap()
    }

    #[test]
    fn header_round_trips() {
        let header = MessageHeader::parse(&header_bytes(100, OP_MSG));
        assert_eq!(header.message_length, 100);
        assert_eq!(header.request_id, 7);
        assert_eq!(header.op_code, OP_MSG);
        assert_eq!(header.check_length(), Ok(84));
    }

    #[test]
    fn short_negative_and_oversized_lengths_are_refused() {
        for length in [-1, 0, 15] {
            let header = MessageHeader::parse(&header_bytes(length, OP_MSG));
            assert_eq!(header.check_length(), Err(FramingError::BadLength(length)));
        }
        let header = MessageHeader::parse(&header_bytes(MAX_MESSAGE_SIZE_BYTES + 1, OP_MSG));
        assert!(matches!(
            header.check_length(),
            Err(FramingError::TooLarge(_))
        ));
        let header = MessageHeader::parse(&header_bytes(MAX_MESSAGE_SIZE_BYTES, OP_MSG));
        assert!(header.check_length().is_ok());
    }

    #[test]
    fn legacy_opcodes_are_framing_errors() {
        let header = MessageHeader::parse(&header_bytes(20, 2002));
        assert_eq!(
            decode_request(&header, &[0; 4]).unwrap_err(),
            FramingError::UnsupportedOpCode(2002)
        );
    }

    #[test]
    fn read_document_rejects_lengths_past_the_end() {
        let bytes = bson::to_vec(&bson::doc! {"a": 1}).unwrap();
        assert!(read_document(&bytes[..bytes.len() - 1]).is_err());
        assert!(read_document(&[3, 0, 0, 0]).is_err());
        let (document, used) = read_document(&bytes).unwrap();
        assert_eq!(used, bytes.len());
        assert_eq!(document, bson::doc! {"a": 1});
    }
}
