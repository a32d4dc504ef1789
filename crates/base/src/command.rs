//! The shape of a command document as the protocol defines it: the command's name first, then
//! its own fields, among which the generic arguments any command may carry (mongod's
//! generic_argument.idl), which a command's own checks must skip.

use bson::{Bson, Document};

/// Arguments any command may carry (mongod's generic_argument.idl); handlers that check for unknown
/// fields must skip these.
pub const GENERIC_ARGUMENTS: &[&str] = &[
    "$db",
    "apiVersion",
    "apiStrict",
    "apiDeprecationErrors",
    "maxTimeMS",
    "readConcern",
    "writeConcern",
    "lsid",
    "clientOperationKey",
    "txnNumber",
    "autocommit",
    "startTransaction",
    "stmtId",
    "comment",
    "$readPreference",
    "$clusterTime",
    "$audit",
    "$client",
    "allowImplicitCollectionCreation",
    "$queryOptions",
    "mayBypassWriteBlocking",
    "txnRetryCounter",
    "expectPrefix",
    "databaseVersion",
    "shardVersion",
    "help",
];

pub fn is_generic_argument(field: &str) -> bool {
    GENERIC_ARGUMENTS.contains(&field)
}

/// The command's own fields after the command name, without generic arguments.
pub fn command_fields(body: &Document) -> impl Iterator<Item = (&String, &Bson)> {
    body.iter()
        .skip(1)
        .filter(|(key, _)| !is_generic_argument(key))
}
