//! A logical session's identity (`lsid`): the key every session registry uses for it (retryable
//! writes, transactions, the logical session cache, open cursors), how mongod shows it in
//! messages, and the `_id` mongod stores for it. Pure functions.

use bson::spec::BinarySubtype;
use bson::{doc, Bson, Document};

use tideway_base::error::{CommandError, CommandResult, ErrorCode};

/// sha256 of no bytes: the `uid` part of a session id without authentication, as mongod shows it.
const NO_USER_UID: &str = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

/// The session's key in storage (`lsid.id`'s bytes, then `lsid.uid`'s if any) and how mongod
/// shows the session in messages.
pub fn session_key(body: &Document) -> CommandResult<(Vec<u8>, String)> {
    let lsid = body.get_document("lsid").map_err(|_| {
        CommandError::new(
            ErrorCode::InvalidOptions,
            "Transaction number requires a session ID to also be specified",
        )
    })?;
    let key = lsid_key(lsid)
        .ok_or_else(|| CommandError::bad_value("lsid.id must be a UUID (BinData subtype 4)"))?;
    let shown_id = bson::Uuid::from_bytes(key[..16].try_into().unwrap_or([0; 16])).to_string();
    let uid = match key.get(16..) {
        Some(uid) if !uid.is_empty() => uid.iter().map(|byte| format!("{byte:02x}")).collect(),
        _ => NO_USER_UID.to_owned(),
    };
    Ok((key, format!("{shown_id} - {uid}")))
}

/// The key every session registry uses for the session `lsid` names (retryable writes,
/// transactions, the logical session cache, open cursors): `lsid.id`'s 16 bytes, then
/// `lsid.uid`'s bytes if given. `None` unless `lsid.id` is a UUID.
pub(crate) fn lsid_key(lsid: &Document) -> Option<Vec<u8>> {
    let id = match lsid.get("id") {
        Some(Bson::Binary(binary))
            if binary.subtype == BinarySubtype::Uuid && binary.bytes.len() == 16 =>
        {
            &binary.bytes
        }
        _ => return None,
    };
    let mut key = Vec::with_capacity(48);
    key.extend_from_slice(id);
    if let Some(Bson::Binary(uid)) = lsid.get("uid") {
        key.extend_from_slice(&uid.bytes);
    }
    Some(key)
}

/// A session's id as mongod stores it (`config.transactions`' and `config.system.sessions`'
/// `_id`): `{id: <UUID>, uid: <BinData sha256>}` from its key (see [`lsid_key`]); the `uid` of
/// a session the client sent without one is that of no user.
pub(crate) fn session_id_document(key: &[u8]) -> Option<Document> {
    let (id, uid) = (key.get(..16)?, key.get(16..)?);
    let uid = if uid.is_empty() {
        no_user_uid()
    } else {
        uid.to_vec()
    };
    Some(doc! {
        "id": bson::Binary { subtype: BinarySubtype::Uuid, bytes: id.to_vec() },
        "uid": bson::Binary { subtype: BinarySubtype::Generic, bytes: uid },
    })
}

/// [`NO_USER_UID`] as bytes.
fn no_user_uid() -> Vec<u8> {
    (0..NO_USER_UID.len() / 2)
        .filter_map(|at| u8::from_str_radix(NO_USER_UID.get(at * 2..at * 2 + 2)?, 16).ok())
        .collect()
}
