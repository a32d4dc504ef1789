//! Legacy OP_QUERY (opcode 2004) and its answer OP_REPLY (opcode 1). Since MongoDB 5.1 only the
//! handshake and authentication commands may arrive this way, on `<db>.$cmd`; mongosh, the Node.js
//! driver, Java and older PyMongo open every connection with it. Anything else is answered with
//! 352 UnsupportedOpQueryCommand, as mongod does.

use std::sync::Arc;

use bson::{Bson, Document};

use super::{read_cstring, read_document, MessageHeader, ReplyFormat, Request};
use tideway_base::error::{CommandError, ErrorCode};

/// Commands mongod still accepts over OP_QUERY.
const ALLOWED_COMMANDS: &[&str] = &[
    "hello",
    "isMaster",
    "ismaster",
    "buildinfo",
    "buildInfo",
    "saslStart",
    "saslContinue",
];

/// OP_REPLY flag mongod sets on every reply (AwaitCapable).
const AWAIT_CAPABLE: i32 = 8;

pub(super) fn decode(header: &MessageHeader, body: &[u8]) -> Request {
    Request {
        request_id: header.request_id,
        format: ReplyFormat::OpReply,
        compressor: None,
        compressed_sizes: None,
        more_to_come: false,
        command: parse(body).map(Arc::new),
    }
}

fn parse(body: &[u8]) -> Result<Document, CommandError> {
    let truncated = || CommandError::new(ErrorCode::ProtocolError, "OP_QUERY message is truncated");
    let (namespace, used) = body.get(4..).ok_or_else(truncated).and_then(|rest| {
        read_cstring(rest).map_err(|why| CommandError::new(ErrorCode::ProtocolError, why))
    })?;
    // numberToSkip and numberToReturn follow the namespace; commands ignore both.
    let query_bytes = body.get(4 + used + 8..).ok_or_else(truncated)?;
    let (query, _) = read_document(query_bytes)?;
    command_from_query(namespace, query)
}

/// The command document with `$db` taken from the namespace, or mongod's refusal.
fn command_from_query(namespace: &str, mut query: Document) -> Result<Document, CommandError> {
    // Old drivers wrap the command as {$query: {...}, $readPreference: ...}.
    if let Some(Bson::Document(inner)) = query.get("$query") {
        query = inner.clone();
    }
    let name = query.keys().next().cloned().unwrap_or_default();
    let database = namespace.strip_suffix(".$cmd");
    match database {
        Some(database) if ALLOWED_COMMANDS.contains(&name.as_str()) => {
            if query.contains_key("$db") {
                return Err(CommandError::new(
                    ErrorCode::Location40621,
                    "$db is not allowed in OP_QUERY requests",
                ));
            }
            query.insert("$db", database);
            Ok(query)
        }
        _ => Err(CommandError::new(
            ErrorCode::UnsupportedOpQueryCommand,
            format!(
                "Unsupported OP_QUERY command: {name}. The client driver may require an upgrade. \
                 For more details see https://dochub.mongodb.org/core/legacy-opcode-removal"
            ),
        )),
    }
}

/// responseFlags, cursorID 0, startingFrom 0, numberReturned 1, then the document.
pub(super) fn encode_reply_body(document: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(20 + document.len());
    out.extend_from_slice(&AWAIT_CAPABLE.to_le_bytes());
    out.extend_from_slice(&0i64.to_le_bytes());
    out.extend_from_slice(&0i32.to_le_bytes());
    out.extend_from_slice(&1i32.to_le_bytes());
    out.extend_from_slice(document);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::OP_QUERY;
    use bson::doc;

    fn query_body(namespace: &str, query: &Document) -> Vec<u8> {
        let mut out = 0i32.to_le_bytes().to_vec();
        out.extend(namespace.as_bytes());
        out.push(0);
        out.extend(0i32.to_le_bytes());
        out.extend((-1i32).to_le_bytes());
        out.extend(bson::to_vec(query).unwrap());
        out
    }

    fn header() -> MessageHeader {
        MessageHeader {
            message_length: 0,
            request_id: 3,
            response_to: 0,
            op_code: OP_QUERY,
        }
    }

    #[test]
    fn handshake_gets_db_from_namespace() {
        let request = decode(&header(), &query_body("admin.$cmd", &doc! {"isMaster": 1}));
        assert_eq!(request.format, ReplyFormat::OpReply);
        assert_eq!(
            *request.command.unwrap(),
            doc! {"isMaster": 1, "$db": "admin"}
        );
    }

    #[test]
    fn wrapped_query_is_unwrapped() {
        let query = doc! {"$query": {"ismaster": 1}, "$readPreference": {"mode": "primary"}};
        let request = decode(&header(), &query_body("admin.$cmd", &query));
        assert_eq!(
            *request.command.unwrap(),
            doc! {"ismaster": 1, "$db": "admin"}
        );
    }

    #[test]
    fn other_commands_are_refused_with_352() {
        let request = decode(&header(), &query_body("admin.$cmd", &doc! {"find": "c"}));
        let err = request.command.unwrap_err();
        assert_eq!(err.code, ErrorCode::UnsupportedOpQueryCommand);
        assert!(err
            .errmsg
            .starts_with("Unsupported OP_QUERY command: find. The client driver"));
        let request = decode(&header(), &query_body("test.coll", &doc! {"hello": 1}));
        assert_eq!(request.command.unwrap_err().code.code(), 352);
    }

    #[test]
    fn db_field_is_refused() {
        let query = doc! {"hello": 1, "$db": "admin"};
        let request = decode(&header(), &query_body("admin.$cmd", &query));
        assert_eq!(request.command.unwrap_err().code.code(), 40621);
    }

    #[test]
    fn truncated_query_is_an_error_reply() {
        let code = |body: &[u8]| decode(&header(), body).command.unwrap_err().code;
        assert_eq!(code(&[0, 0, 0, 0, b'a']), ErrorCode::ProtocolError);
        assert_eq!(code(&[0, 0]), ErrorCode::ProtocolError);
        let mut body = query_body("admin.$cmd", &doc! {"hello": 1});
        body.truncate(body.len() - 2);
        assert_eq!(code(&body), ErrorCode::InvalidBSON);
    }

    #[test]
    fn reply_body_carries_one_document() {
        let document = doc! {"ok": 1.0};
        let body = encode_reply_body(&bson::to_vec(&document).unwrap());
        assert_eq!(i32::from_le_bytes(body[16..20].try_into().unwrap()), 1);
        assert_eq!(read_document(&body[20..]).unwrap().0, document);
    }
}
