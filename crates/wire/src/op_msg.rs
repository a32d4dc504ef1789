//! OP_MSG (opcode 2013): flag bits, the single kind-0 body, kind-1 document sequences folded into the
//! body as arrays, and the optional CRC-32C trailer. Parse errors carry mongod's codes and texts; every
//! one of them is answered (unless `moreToCome` forbids a reply) and leaves the connection usable, since
//! the frame length already told us where the next message starts.

use std::sync::Arc;

use bson::{Bson, Document};

use super::{
    read_cstring, read_document, read_i32, MessageHeader, ReplyFormat, Request, HEADER_LEN,
};
use tideway_base::error::{CommandError, ErrorCode};

const CHECKSUM_PRESENT: u32 = 1 << 0;
const MORE_TO_COME: u32 = 1 << 1;
/// Bits 0–15 are required: a set bit we do not know is an error. Bits 16–31 are optional.
const REQUIRED_BITS: u32 = 0xFFFF;
const KNOWN_REQUIRED_BITS: u32 = CHECKSUM_PRESENT | MORE_TO_COME;
/// Drivers use at most two sequences at once (`bulkWrite`'s `ops` and `nsInfo`).
const MAX_DOCUMENT_SEQUENCES: usize = 2;

pub(super) fn decode(header: &MessageHeader, body: &[u8]) -> Request {
    let flags = read_i32(body, 0).map(|f| f as u32).unwrap_or(0);
    let checksum = flags & CHECKSUM_PRESENT != 0;
    Request {
        request_id: header.request_id,
        format: ReplyFormat::OpMsg { checksum },
        compressor: None,
        compressed_sizes: None,
        more_to_come: flags & MORE_TO_COME != 0,
        command: parse(header, body, flags).map(Arc::new),
    }
}

fn parse(header: &MessageHeader, body: &[u8], flags: u32) -> Result<Document, CommandError> {
    if body.len() < 4 {
        return Err(CommandError::new(
            ErrorCode::ProtocolError,
            "OP_MSG is too short to hold its flag bits",
        ));
    }
    let illegal = flags & REQUIRED_BITS & !KNOWN_REQUIRED_BITS;
    if illegal != 0 {
        return Err(CommandError::new(
            ErrorCode::IllegalOpMsgFlag,
            format!("Message contains illegal flags value: Ob{flags:032b}"),
        ));
    }
    let mut sections = &body[4..];
    if flags & CHECKSUM_PRESENT != 0 {
        if sections.len() < 4 {
            return Err(CommandError::new(
                ErrorCode::Location51251,
                "Invalid message size for an OP_MSG with a checksum",
            ));
        }
        let (payload, trailer) = sections.split_at(sections.len() - 4);
        let expected = u32::from_le_bytes([trailer[0], trailer[1], trailer[2], trailer[3]]);
        let mut digest = crc32c::crc32c(&header_bytes(header));
        digest = crc32c::crc32c_append(digest, &body[..4]);
        digest = crc32c::crc32c_append(digest, payload);
        if digest != expected {
            return Err(CommandError::new(
                ErrorCode::ChecksumMismatch,
                "OP_MSG checksum does not match contents",
            ));
        }
        sections = payload;
    }
    parse_sections(sections)
}

fn parse_sections(mut sections: &[u8]) -> Result<Document, CommandError> {
    let malformed = |what: String| CommandError::new(ErrorCode::InvalidBSON, what);
    let mut body: Option<Document> = None;
    let mut sequences: Vec<(String, Vec<Bson>)> = Vec::new();
    while let Some((&kind, rest)) = sections.split_first() {
        match kind {
            0 => {
                let (document, used) = read_document(rest)?;
                if body.replace(document).is_some() {
                    return Err(CommandError::new(
                        ErrorCode::Location40430,
                        "Multiple body sections in message",
                    ));
                }
                sections = &rest[used..];
            }
            1 => {
                let size = read_i32(rest, 0)
                    .ok_or_else(|| malformed("document sequence is truncated".into()))?;
                if size < 4 || size as usize > rest.len() {
                    return Err(malformed(format!(
                        "document sequence size {size} is invalid"
                    )));
                }
                let (identifier, documents) = parse_sequence(&rest[4..size as usize])?;
                if sequences.iter().any(|(name, _)| *name == identifier) {
                    return Err(CommandError::new(
                        ErrorCode::Location40431,
                        format!("Duplicate document sequence: {identifier}"),
                    ));
                }
                if sequences.len() == MAX_DOCUMENT_SEQUENCES {
                    return Err(CommandError::new(
                        ErrorCode::TooManyDocumentSequences,
                        "Too many document sequences in OP_MSG",
                    ));
                }
                sequences.push((identifier, documents));
                sections = &rest[size as usize..];
            }
            2 => {
                return Err(CommandError::new(
                    ErrorCode::Unauthorized,
                    "Unsupported Security Token provided",
                ))
            }
            other => {
                return Err(CommandError::new(
                    ErrorCode::Location40432,
                    format!("Unknown section kind {other}"),
                ))
            }
        }
    }
    let mut body = body.ok_or_else(|| {
        CommandError::new(ErrorCode::Location40587, "OP_MSG messages must have a body")
    })?;
    for (identifier, documents) in sequences {
        if body.contains_key(&identifier) {
            return Err(CommandError::new(
                ErrorCode::Location40433,
                format!("Duplicate field between body and document sequence {identifier}"),
            ));
        }
        body.insert(identifier, Bson::Array(documents));
    }
    Ok(body)
}

/// A kind-1 payload after its size: the identifier, then documents back to back.
fn parse_sequence(payload: &[u8]) -> Result<(String, Vec<Bson>), CommandError> {
    let (identifier, used) =
        read_cstring(payload).map_err(|why| CommandError::new(ErrorCode::InvalidBSON, why))?;
    let mut rest = &payload[used..];
    let mut documents = Vec::new();
    while !rest.is_empty() {
        let (document, used) = read_document(rest)?;
        documents.push(Bson::Document(document));
        rest = &rest[used..];
    }
    Ok((identifier.to_owned(), documents))
}

fn header_bytes(header: &MessageHeader) -> [u8; HEADER_LEN] {
    let mut out = Vec::with_capacity(HEADER_LEN);
    header.write(&mut out);
    let mut bytes = [0u8; HEADER_LEN];
    bytes.copy_from_slice(&out);
    bytes
}

/// Flag bits and one kind-0 section holding `document`; with `checksum`, the flag is set and the
/// caller appends the trailer with [`append_checksum`] once the header is in place.
pub(super) fn encode_body(document: &[u8], checksum: bool) -> Vec<u8> {
    let mut out = Vec::with_capacity(5 + document.len());
    let flags = if checksum { CHECKSUM_PRESENT } else { 0 };
    out.extend_from_slice(&flags.to_le_bytes());
    out.push(0);
    out.extend_from_slice(document);
    out
}

/// Appends the CRC-32C of everything in `message` (header included).
pub(super) fn append_checksum(message: &mut Vec<u8>) {
    let digest = crc32c::crc32c(message);
    message.extend_from_slice(&digest.to_le_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::OP_MSG;
    use bson::doc;

    fn header() -> MessageHeader {
        MessageHeader {
            message_length: 0,
            request_id: 1,
            response_to: 0,
            op_code: OP_MSG,
        }
    }

    fn kind0(document: &Document) -> Vec<u8> {
        let mut out = vec![0];
        out.extend(bson::to_vec(document).unwrap());
        out
    }

    fn kind1(identifier: &str, documents: &[Document]) -> Vec<u8> {
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

    fn message(flags: u32, sections: &[Vec<u8>]) -> Vec<u8> {
        let mut out = flags.to_le_bytes().to_vec();
        for section in sections {
            out.extend(section);
        }
        out
    }

    fn error_code(body: &[u8]) -> i32 {
        decode(&header(), body).command.unwrap_err().code.code()
    }

    #[test]
    fn body_and_sequences_fold_into_one_document() {
        let body = message(
            0,
            &[
                kind1("documents", &[doc! {"a": 1}, doc! {"a": 2}]),
                kind0(&doc! {"insert": "c", "$db": "test"}),
            ],
        );
        let request = decode(&header(), &body);
        assert_eq!(
            *request.command.unwrap(),
            doc! {"insert": "c", "$db": "test", "documents": [{"a": 1}, {"a": 2}]}
        );
        assert!(!request.more_to_come);
    }

    #[test]
    fn parse_errors_carry_mongod_codes() {
        let ping = kind0(&doc! {"ping": 1, "$db": "admin"});
        assert_eq!(
            error_code(&message(1 << 5, std::slice::from_ref(&ping))),
            223
        );
        assert_eq!(
            error_code(&message(0, &[ping.clone(), ping.clone()])),
            40430
        );
        assert_eq!(error_code(&message(0, &[kind1("d", &[])])), 40587);
        assert_eq!(error_code(&message(0, &[ping.clone(), vec![7]])), 40432);
        assert_eq!(
            error_code(&message(
                0,
                &[ping.clone(), kind1("d", &[]), kind1("d", &[])]
            )),
            40431
        );
        assert_eq!(
            error_code(&message(
                0,
                &[
                    ping.clone(),
                    kind1("a", &[]),
                    kind1("b", &[]),
                    kind1("c", &[])
                ]
            )),
            233
        );
        assert_eq!(
            error_code(&message(
                0,
                &[kind0(&doc! {"insert": "c", "d": 1}), kind1("d", &[])]
            )),
            40433
        );
        assert_eq!(error_code(&message(CHECKSUM_PRESENT, &[vec![0, 0]])), 51251);
    }

    #[test]
    fn illegal_flag_message_spells_the_bits() {
        let err = decode(&header(), &message(1 << 3, &[kind0(&doc! {"ping": 1})]))
            .command
            .unwrap_err();
        assert_eq!(
            err.errmsg,
            "Message contains illegal flags value: Ob00000000000000000000000000001000"
        );
    }

    #[test]
    fn optional_flag_bits_are_ignored() {
        let exhaust_allowed = 1 << 16;
        let request = decode(
            &header(),
            &message(exhaust_allowed | (1 << 20), &[kind0(&doc! {"ping": 1})]),
        );
        assert!(request.command.is_ok());
    }

    #[test]
    fn checksum_is_verified() {
        let mut full = Vec::new();
        let body = message(CHECKSUM_PRESENT, &[kind0(&doc! {"ping": 1})]);
        let mut header = header();
        header.message_length = (HEADER_LEN + body.len() + 4) as i32;
        header.write(&mut full);
        full.extend(&body);
        append_checksum(&mut full);
        let with_trailer = &full[HEADER_LEN..];
        assert_eq!(
            *decode(&header, with_trailer).command.unwrap(),
            doc! {"ping": 1}
        );

        let mut corrupted = with_trailer.to_vec();
        let last = corrupted.len() - 1;
        corrupted[last] ^= 0xFF;
        assert_eq!(
            decode(&header, &corrupted).command.unwrap_err().code.code(),
            288
        );
    }

    #[test]
    fn truncated_documents_are_errors_not_panics() {
        let mut body = message(0, &[kind0(&doc! {"ping": 1})]);
        body.truncate(body.len() - 3);
        assert_eq!(error_code(&body), 22);
        assert_eq!(error_code(&[1, 0]), 17);
        let mut bad_sequence = message(0, &[kind0(&doc! {"ping": 1})]);
        bad_sequence.extend([1, 0xFF, 0xFF, 0, 0]);
        assert_eq!(error_code(&bad_sequence), 22);
    }

    #[test]
    fn more_to_come_is_reported() {
        let request = decode(
            &header(),
            &message(MORE_TO_COME, &[kind0(&doc! {"ping": 1})]),
        );
        assert!(request.more_to_come);
    }
}
